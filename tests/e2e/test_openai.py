"""OpenAI Chat Completions, Completions and Responses through the official `openai` client."""
import json

from conftest import MODEL

MESSAGES = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]


def test_models(openai_client):
    ids = [m.id for m in openai_client.models.list().data]
    assert ids == [MODEL]


def test_chat(openai_client):
    r = openai_client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0)
    choice = r.choices[0]
    assert r.object == "chat.completion"
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert 0 < r.usage.completion_tokens <= 12
    assert r.usage.prompt_tokens > 10
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_stream_matches_non_stream(openai_client):
    whole = openai_client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0)
    chunks = list(openai_client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    usage = [c.usage for c in chunks if c.usage]
    assert usage and usage[-1].completion_tokens == whole.usage.completion_tokens


def test_cached_prompt_tokens(openai_client):
    long_system = "You are a careful assistant. " * 20
    messages = [{"role": "system", "content": long_system}, {"role": "user", "content": "Say hi."}]
    openai_client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2, temperature=0)
    second = openai_client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2, temperature=0)
    assert second.usage.prompt_tokens_details.cached_tokens >= 64


def test_completions(openai_client):
    r = openai_client.completions.create(model=MODEL, prompt="The sky is", max_tokens=8, temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].text
    assert 0 < r.usage.completion_tokens <= 8
    streamed = openai_client.completions.create(model=MODEL, prompt="The sky is", max_tokens=8, temperature=0,
                                                stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == r.choices[0].text


def test_stop_string(openai_client):
    base = openai_client.completions.create(model=MODEL, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0)
    text = base.choices[0].text
    assert "6" in text, text
    cut = openai_client.completions.create(model=MODEL, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0,
                                           stop=["6"])
    assert cut.choices[0].text == text[:text.index("6")]
    assert cut.choices[0].finish_reason == "stop"


def test_logprobs(openai_client):
    r = openai_client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6, temperature=0,
                                              logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0.0
        assert len(entry.top_logprobs) == 3
        # Greedy: the sampled token is the most probable one.
        assert abs(entry.top_logprobs[0].logprob - entry.logprob) < 1e-5
    c = openai_client.completions.create(model=MODEL, prompt="Hello", max_tokens=4, temperature=0, logprobs=2)
    assert len(c.choices[0].logprobs.token_logprobs) == c.usage.completion_tokens
    assert all(len(t) == 2 for t in c.choices[0].logprobs.top_logprobs)


def test_seed_reproduces(openai_client):
    def sample(seed):
        return openai_client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Tell me a story."}], max_tokens=8,
            temperature=1.0, seed=seed).choices[0].message.content
    first = sample(1234)
    assert sample(1234) == first
    others = {sample(s) for s in (1, 2)}
    assert len(others | {first}) > 1, "different seeds never changed the sample"


def test_n_choices(openai_client):
    r = openai_client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6, temperature=0, n=3)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert len({c.message.content for c in r.choices}) == 1  # greedy: all the same


def test_responses(openai_client):
    r = openai_client.responses.create(model=MODEL, input="Name a color.", max_output_tokens=10, temperature=0)
    assert r.object == "response"
    assert r.status in ("completed", "incomplete")
    assert r.output_text
    assert r.usage.output_tokens > 0


def test_responses_stream_events(openai_client):
    events = list(openai_client.responses.create(model=MODEL, input="Name a color.", max_output_tokens=10,
                                                  temperature=0, stream=True))
    types = [e.type for e in events]
    assert types[0] == "response.created"
    assert types[1] == "response.in_progress"
    assert "response.output_text.delta" in types
    assert types[-1] in ("response.completed", "response.incomplete")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    whole = openai_client.responses.create(model=MODEL, input="Name a color.", max_output_tokens=10, temperature=0)
    assert text == whole.output_text


def test_json_object_mode_stops_when_the_object_closes(openai_client, server):
    def ask(**extra):
        return openai_client.chat.completions.create(
            model=MODEL, max_tokens=40, temperature=0, logprobs=True,
            messages=[{"role": "user", "content": "Give me a JSON object with keys name and age for a person."}],
            **extra)

    r = ask(response_format={"type": "json_object"})
    value = json.loads(r.choices[0].message.content)
    assert isinstance(value, dict) and value
    # The sequence ends with the token that closes the top-level value (the output parser
    # reports it finished and the server stops the request there), not at max_tokens ...
    assert r.choices[0].finish_reason == "stop"
    tokens = [t.token for t in r.choices[0].logprobs.content]
    assert len(tokens) == r.usage.completion_tokens
    assert "".join(tokens).rstrip().endswith("}"), tokens
    # ... though this model, asked the same in plain text mode, writes on after the object.
    plain = ask()
    assert plain.usage.completion_tokens > r.usage.completion_tokens, plain.choices[0].message.content
    # With n choices the engine request is cancelled once all have ended: it generates what the
    # answers hold plus the few steps it ran ahead of the handler, far from running both on as
    # plain text does (the midpoint tells the two apart on a loaded machine too).
    before = server.metrics()["deepinfer:generation_tokens_total"]
    both = ask(response_format={"type": "json_object"}, n=2)
    generated = server.metrics()["deepinfer:generation_tokens_total"] - before
    assert [c.finish_reason for c in both.choices] == ["stop", "stop"]
    assert both.usage.completion_tokens == 2 * r.usage.completion_tokens
    assert generated < (both.usage.completion_tokens + 2 * plain.usage.completion_tokens) / 2, generated


def test_chat_stream_usage_only_when_asked(openai_client):
    """As OpenAI and vLLM: no usage without stream_options.include_usage; with it, "usage": null
    on every chunk but one last chunk with empty choices and the usage of all choices."""
    def chunks(**extra):
        return list(openai_client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=6, temperature=0, stream=True, **extra))

    plain = chunks()
    assert plain and all(c.choices for c in plain)
    assert all(c.usage is None and "usage" not in c.model_dump(exclude_unset=True) for c in plain)

    with_usage = chunks(n=2, stream_options={"include_usage": True})
    *body, last = with_usage
    assert last.choices == [] and last.usage is not None
    assert all(c.choices and "usage" in c.model_dump(exclude_unset=True) and c.usage is None for c in body)
    assert sorted({c.choices[0].index for c in body}) == [0, 1]
    finishes = [c.choices[0].finish_reason for c in body if c.choices[0].finish_reason]
    assert len(finishes) == 2
    whole = openai_client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6, temperature=0, n=2)
    assert last.usage.completion_tokens == whole.usage.completion_tokens
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
