"""A tool call from the real model, returned to the client as a tool-call object. The call is
forced (tool_choice names the function): the server opens the call in the prompt, the model
writes the arguments, and the output parser turns the text into a call."""
import json

import anthropic
from conftest import MODEL

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_forced_tool_call_chat(openai_client):
    r = openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=40, temperature=0)
    calls = r.choices[0].message.tool_calls
    assert calls, r.model_dump_json()
    assert calls[0].type == "function"
    assert calls[0].function.name == "get_weather"
    assert calls[0].id
    # The call ends where its arguments object closes, with a JSON object the client can use.
    assert r.choices[0].finish_reason == "tool_calls"
    assert "city" in json.loads(calls[0].function.arguments)


def test_forced_tool_call_stream(openai_client):
    chunks = list(openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=40, temperature=0,
        stream=True))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas and deltas[0].function.name == "get_weather"


def test_forced_tool_use_messages(anthropic_client):
    m = anthropic_client.messages.create(
        model=MODEL, max_tokens=40, extra_body={"temperature": 0},
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[{"name": "get_weather", "description": "Current weather in a city.",
                "input_schema": WEATHER["function"]["parameters"]}],
        tool_choice={"type": "tool", "name": "get_weather"})
    uses = [b for b in m.content if b.type == "tool_use"]
    assert uses, m.model_dump_json()
    assert uses[0].name == "get_weather"
    assert "city" in uses[0].input
    assert m.stop_reason == "tool_use"
