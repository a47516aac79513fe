"""Structured output through the official clients: answers sampled at temperature 1 follow their
JSON Schema (validated with the `jsonschema` package, not our grammar), regex and choice; the
OpenAI client's `parse()` helper gets its Pydantic model back; a forced call's arguments are
valid; a bad grammar is a 400 and the server keeps serving.

DEEPINFER_E2E_STRUCTURED_N sets how many schema requests run (default 20 in the test suite; the
issue's check is 100)."""
import concurrent.futures
import json
import os
import re

import jsonschema
import openai
import pytest
from conftest import MODEL
from pydantic import BaseModel

N_REQUESTS = int(os.environ.get("DEEPINFER_E2E_STRUCTURED_N", "20"))

ADDRESS = {"type": "object", "properties": {"street": {"type": "string", "maxLength": 30},
                                            "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
           "required": ["street", "zip"], "additionalProperties": False}

SCHEMAS = [
    # nested objects
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "address": ADDRESS},
     "required": ["name", "address"], "additionalProperties": False},
    # arrays with bounds, enums
    {"type": "object", "properties": {"colors": {"type": "array", "items": {"enum": ["red", "green", "blue"]},
                                                 "minItems": 1, "maxItems": 4},
                                      "count": {"type": "integer", "minimum": 1, "maximum": 9}},
     "required": ["colors", "count"], "additionalProperties": False},
    # $defs and $ref (recursive schemas are compiled too, but a sampled answer may nest past any
    # budget; likewise an unbounded integer sampled at temperature 1 can run on for 200 tokens)
    {"$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer", "minimum": -999, "maximum": 999},
                                                          "y": {"type": "integer", "minimum": -999, "maximum": 999}},
                         "required": ["x", "y"], "additionalProperties": False}},
     "type": "object", "properties": {"from": {"$ref": "#/$defs/point"}, "to": {"$ref": "#/$defs/point"}},
     "required": ["from", "to"], "additionalProperties": False},
    # booleans, numbers, const, optional properties
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "score": {"type": "number"},
                                      "kind": {"const": "result"}, "note": {"type": "string", "maxLength": 10}},
     "required": ["ok", "score", "kind"], "additionalProperties": False},
    # a top-level array of small objects
    {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}, "tag": {"enum": ["a", "b"]}},
                                "required": ["id", "tag"], "additionalProperties": False}, "maxItems": 3},
    # string formats
    {"type": "object", "properties": {"when": {"type": "string", "format": "date"},
                                      "id": {"type": "string", "format": "uuid"}},
     "required": ["when", "id"], "additionalProperties": False},
]


def _chat_schema(client, schema, seed):
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Reply with JSON."}], temperature=1, seed=seed,
        max_tokens=200, response_format={"type": "json_schema",
                                         "json_schema": {"name": "answer", "strict": True, "schema": schema}})
    return r.choices[0]


def test_schemas_at_temperature_one_validate(openai_client):
    jobs = [(SCHEMAS[i % len(SCHEMAS)], 1000 + i) for i in range(N_REQUESTS)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        choices = list(pool.map(lambda job: _chat_schema(openai_client, *job), jobs))
    for (schema, seed), choice in zip(jobs, choices):
        # A length cut can end any JSON early; the budget above leaves these schemas room.
        assert choice.finish_reason == "stop", (seed, choice.message.content)
        value = json.loads(choice.message.content)
        jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())


def test_stream_follows_the_schema(openai_client):
    stream = openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Reply with JSON."}], temperature=1, seed=5, max_tokens=200,
        stream=True, response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMAS[1]}})
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    jsonschema.validate(json.loads(text), SCHEMAS[1])


class Person(BaseModel):
    name: str
    age: int
    likes_cats: bool


def test_openai_parse_helper(openai_client):
    r = openai_client.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": "Invent a person."}], temperature=1, seed=3,
        max_tokens=120, response_format=Person)
    person = r.choices[0].message.parsed
    assert isinstance(person, Person), r.model_dump_json()


def test_regex_and_choice(openai_client):
    r = openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "A phone number?"}], temperature=1, seed=2, max_tokens=20,
        extra_body={"structured_outputs": {"regex": r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}"}})
    assert re.fullmatch(r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}", r.choices[0].message.content), r.choices[0].message.content
    c = openai_client.completions.create(model=MODEL, prompt="The best pet is", temperature=1, seed=4, max_tokens=8,
                                         extra_body={"structured_outputs": {"choice": ["cat", "dog", "axolotl"]}})
    assert c.choices[0].text in ("cat", "dog", "axolotl")


def test_grammar_in_either_ebnf_dialect(openai_client):
    # The same language in GBNF and in Lark (told apart by the text), sampled at temperature 1.
    gbnf = 'root ::= "(" [a-c]{1,3} ("," [a-c]{1,3}){0,2} ")"'
    lark = 'start: "(" ITEM ("," ITEM)~0..2 ")"\nITEM: /[a-c]{1,3}/'
    for field, grammar in (("grammar", gbnf), ("grammar", lark), ("ebnf", lark)):
        body = {"structured_outputs": {"grammar": grammar}} if field == "grammar" else {"ebnf": grammar}
        r = openai_client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "A tuple?"}], temperature=1, seed=5, max_tokens=24,
            extra_body=body)
        text = r.choices[0].message.content
        assert re.fullmatch(r"\([a-c]{1,3}(,[a-c]{1,3}){0,2}\)", text), (field, grammar, text)


def test_responses_and_messages(openai_client, anthropic_client):
    r = openai_client.responses.create(
        model=MODEL, input="Reply with JSON.", temperature=1, max_output_tokens=200, extra_body={"seed": 6},
        text={"format": {"type": "json_schema", "name": "a", "schema": SCHEMAS[0]}})
    jsonschema.validate(json.loads(r.output_text), SCHEMAS[0])
    m = anthropic_client.messages.create(
        model=MODEL, max_tokens=200, messages=[{"role": "user", "content": "Reply with JSON."}],
        extra_body={"seed": 6, "output_config": {"format": {"type": "json_schema", "schema": SCHEMAS[1]}}})
    jsonschema.validate(json.loads(m.content[0].text), SCHEMAS[1])


def test_forced_call_arguments_validate(openai_client):
    params = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                               "days": {"type": "integer", "minimum": 1, "maximum": 7},
                                               "unit": {"enum": ["C", "F"]}},
              "required": ["city", "days", "unit"], "additionalProperties": False}
    tool = {"type": "function", "function": {"name": "forecast", "strict": True, "parameters": params}}
    for seed in range(3):
        r = openai_client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Weather in Oslo this week?"}], tools=[tool],
            tool_choice="required", temperature=1, seed=seed, max_tokens=80)
        call = r.choices[0].message.tool_calls[0]
        assert call.function.name == "forecast"
        jsonschema.validate(json.loads(call.function.arguments), params)


def test_strict_tool_under_auto_answers_text_or_a_valid_call(openai_client):
    """tool_choice auto with a strict tool is served: the model may answer in text (SmolLM2-135M
    mostly does), and a call it opens is written under the tool's schema (the grammar itself is
    tested in tests/unit/server/forced_call_test.cpp)."""
    params = {"type": "object", "properties": {"days": {"type": "integer", "minimum": 1, "maximum": 7}},
              "required": ["days"], "additionalProperties": False}
    tool = {"type": "function", "function": {"name": "forecast", "strict": True, "parameters": params}}
    n_calls = 0
    for seed in range(4):
        r = openai_client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Weather in Oslo this week?"}], tools=[tool],
            temperature=1, seed=seed, max_tokens=60)
        for call in r.choices[0].message.tool_calls or []:
            n_calls += 1
            assert call.function.name == "forecast"
            jsonschema.validate(json.loads(call.function.arguments), params)
        assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    print(f"{n_calls} calls in 4 answers")


def test_any_tool_choice_is_a_forced_call(anthropic_client):
    """Anthropic's tool_choice "any" on a chat-template model: the answer is a call of one of the
    tools, its input valid against that tool's schema."""
    params = {"type": "object", "properties": {"days": {"type": "integer", "minimum": 1, "maximum": 7}},
              "required": ["days"], "additionalProperties": False}
    # Both schemas close their objects and the request is seeded: an open object let an unseeded
    # sample write extra keys until max_tokens (a CI failure), which says nothing about the choice.
    other = {"type": "object", "properties": {"city": {"enum": ["Oslo", "Rome"]}}, "required": ["city"],
             "additionalProperties": False}
    m = anthropic_client.messages.create(
        model=MODEL, max_tokens=80, messages=[{"role": "user", "content": "Weather this week?"}],
        tools=[{"name": "forecast", "input_schema": params}, {"name": "pick_city", "input_schema": other}],
        tool_choice={"type": "any"}, extra_body={"temperature": 1, "seed": 11})
    assert m.stop_reason == "tool_use"
    uses = [b for b in m.content if b.type == "tool_use"]
    assert len(uses) == 1
    jsonschema.validate(uses[0].input, params if uses[0].name == "forecast" else other)


def test_bad_grammar_is_a_400_and_the_server_keeps_serving(openai_client):
    with pytest.raises(openai.BadRequestError) as err:
        openai_client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=5,
            extra_body={"structured_outputs": {"regex": "((a{1000}){1000}){1000}"}})
    assert "too large" in str(err.value)
    with pytest.raises(openai.BadRequestError) as err:
        openai_client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=5,
            response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": {"not": {"required": ["a"]}}}})
    assert "'not'" in str(err.value)
    r = openai_client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3)
    assert r.choices[0].message.content is not None
