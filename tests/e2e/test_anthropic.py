"""Anthropic Messages and count_tokens through the official `anthropic` client."""
from conftest import MODEL

GREEDY = {"temperature": 0}  # this client version has no temperature argument; the API does

MESSAGES = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]


def test_messages(anthropic_client):
    m = anthropic_client.messages.create(model=MODEL, max_tokens=12, messages=MESSAGES, extra_body=GREEDY)
    assert m.type == "message" and m.role == "assistant"
    assert m.content and m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert 0 < m.usage.output_tokens <= 12
    assert m.usage.input_tokens > 10


def test_messages_stream_events(anthropic_client):
    whole = anthropic_client.messages.create(model=MODEL, max_tokens=12, messages=MESSAGES, extra_body=GREEDY)
    with anthropic_client.messages.stream(model=MODEL, max_tokens=12, messages=MESSAGES,
                                          extra_body=GREEDY) as stream:
        events = list(stream)
        final = stream.get_final_message()
    types = [e.type for e in events]
    for expected in ("message_start", "content_block_start", "content_block_delta", "content_block_stop",
                     "message_delta", "message_stop"):
        assert expected in types, types
    assert types[0] == "message_start" and types[-1] == "message_stop"
    deltas = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
    assert deltas == whole.content[0].text
    assert final.content[0].text == whole.content[0].text
    assert final.stop_reason == whole.stop_reason


def test_stop_sequence(anthropic_client):
    messages = [{"role": "user", "content": "Count from 1 to 10, separated by commas."}]
    base = anthropic_client.messages.create(model=MODEL, max_tokens=24, messages=messages, extra_body=GREEDY)
    text = base.content[0].text
    assert "5" in text, text
    cut = anthropic_client.messages.create(model=MODEL, max_tokens=24, messages=messages, extra_body=GREEDY,
                                           stop_sequences=["5"])
    assert cut.stop_reason == "stop_sequence"
    assert cut.stop_sequence == "5"
    assert cut.content[0].text == text[:text.index("5")]


def test_count_tokens_matches_usage(anthropic_client):
    counted = anthropic_client.messages.count_tokens(model=MODEL, messages=MESSAGES)
    m = anthropic_client.messages.create(model=MODEL, max_tokens=2, messages=MESSAGES, extra_body=GREEDY)
    # Anthropic's input_tokens leaves out the tokens read from the prompt cache.
    assert counted.input_tokens == m.usage.input_tokens + m.usage.cache_read_input_tokens
    assert counted.input_tokens > 10
