#!/usr/bin/env python3
"""Golden prompts for src/recipe from DeepSeek's reference library.

Writes tests/golden/recipe/prompts.json: conversations (in the JSON form that
tests/golden/recipe's C++ test reads back into recipe::Conversation) rendered by
deepseek-recipe's DeepseekV4Encoding / DeepseekV41Encoding, with the byte ranges of the
explicit special tokens. Protocol requests (Chat Completions, Responses, Messages) are
converted by the reference first; their cases also keep the request and, for rejected
requests, the reference's status code and error body.

Needs the reference in a virtual environment:

    python3 -m venv /tmp/recipevenv && /tmp/recipevenv/bin/pip install deepseek-recipe==0.2.0
    /tmp/recipevenv/bin/python tools/golden/make_recipe_golden.py

Deterministic: the random conversations come from a fixed seed.
"""

import json
import os
import random
import re
from pathlib import Path

import deepseek_recipe as dr

OUT = Path(__file__).resolve().parents[2] / "tests" / "golden" / "recipe" / "prompts.json"
ENCODERS = {"v4": dr.DeepseekV4Encoding(), "v41": dr.DeepseekV41Encoding()}
MODEL_NAMES = {"v4": "DeepSeek-V4-Pro", "v41": "DeepSeek-V4.1-Flash"}


# ---- conversation <-> JSON ---------------------------------------------------------------

def image_from_json(j):
    detail = j.get("detail", "high")
    if j["kind"] == "url":
        return dr.UrlImageSource(j["url"], detail)
    if j["kind"] == "data_url":
        return dr.DataUrlImageSource(j["data_url"], detail)
    return dr.BytesImageSource(bytes.fromhex(j["hex"]), detail)


def image_to_json(s):
    j = {"kind": s.kind, "detail": s.detail}
    if s.kind == "url":
        j["url"] = s.url
    elif s.kind == "data_url":
        j["data_url"] = s.data_url
    else:
        j["hex"] = s.data.hex()
    return j


def tool_from_json(t):
    return dr.ToolDefinition(t["name"], t.get("description"), t.get("parameters"), t.get("strict"))


def tool_to_json(t):
    j = {"name": t.name, "description": t.description, "parameters": t.parameters}
    if t.strict is not None:
        j["strict"] = t.strict
    return j


def message_from_json(m):
    role = m["role"]
    images = [image_from_json(i) for i in m.get("images", [])]
    if role == "system":
        tools = [tool_from_json(t) for t in m["tools"]] if "tools" in m else None
        return dr.SystemMessage(m["content"], images, tools)
    if role == "user":
        return dr.UserMessage(m["content"], images)
    if role == "tool":
        return dr.ToolMessage(m["content"], m.get("tool_call_id"), images)
    if role == "latest_reminder":
        return dr.LatestReminderMessage(m["content"])
    calls = [dr.ToolCall(c["id"], c["name"], c["arguments"]) for c in m["tool_calls"]] \
        if m.get("tool_calls") is not None else None
    return dr.AssistantMessage(m["content"], m.get("reasoning"), calls, m.get("prefix", False))


def message_to_json(m):
    j = {"role": m.role, "content": m.content}
    if m.image_sources:
        j["images"] = [image_to_json(s) for s in m.image_sources]
    if m.role == "system" and m.tools is not None:
        j["tools"] = [tool_to_json(t) for t in m.tools]
    if m.role == "tool" and m.tool_call_id is not None:
        j["tool_call_id"] = m.tool_call_id
    if m.role == "assistant":
        if m.reasoning_content is not None:
            j["reasoning"] = m.reasoning_content
        if m.tool_calls is not None:
            j["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments}
                               for c in m.tool_calls]
        if m.prefix:
            j["prefix"] = True
    return j


def conversation_from_json(c):
    return dr.Conversation(
        [message_from_json(m) for m in c["messages"]],
        thinking_mode=c.get("thinking", True),
        tools=[tool_from_json(t) for t in c.get("tools", [])],
        tool_choice=c.get("tool_choice", "auto"),
        reasoning_effort=c.get("effort"),
        response_format=c.get("response_format", "text"))


def conversation_to_json(c):
    j = {"messages": [message_to_json(m) for m in c.messages], "thinking": c.thinking_mode}
    if c.tools:
        j["tools"] = [tool_to_json(t) for t in c.tools]
    if c.tool_choice != "auto":
        j["tool_choice"] = c.tool_choice
    if c.reasoning_effort is not None:
        j["effort"] = c.reasoning_effort
    if c.response_format != "text":
        j["response_format"] = c.response_format
    return j


def render(encoding, conv):
    rp = ENCODERS[encoding].render_conversation(conv)
    prompt = rp.prompt
    # Code point offsets -> UTF-8 byte offsets, which is what the C++ side measures.
    special = [[len(prompt[:a].encode()), len(prompt[:b].encode())] for a, b in rp.special_ranges]
    return {"prompt": prompt, "special": special, "num_images": len(rp.image_sources)}


# ---- hand-written conversations ----------------------------------------------------------

WEATHER = {"name": "get_weather", "description": "Get the weather for a specific location",
           "parameters": {"type": "object", "properties": {
               "location": {"type": "string", "description": "The city name"},
               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                        "description": "Temperature unit"}}, "required": ["location"]}}
SEARCH = {"name": "search", "description": "Search the web for information",
          "parameters": {"type": "object", "properties": {
              "query": {"type": "string", "description": "Search query"},
              "num_results": {"type": "integer", "description": "Number of results to return"}},
              "required": ["query"]}}
FLOATS = {"name": "floats", "parameters": {"type": "object", "x": [
    0.1, 1e-5, 1.5e-7, 1e20, 1e16, 1e15, 123456789012345678.0, -0.0, 0.0, 1.0, 2.5, 1e-4,
    0.001, 1e300, 5e-324, 3.0e21, 12345.678, -2.5e-9, 9007199254740993, -7],
    "s": "日本\"\\\n\t\u0001\u007f\u2028/<｜User｜>"}}
NO_PARAMS = {"name": "ping"}


def user(t, **kw):
    return {"role": "user", "content": t, **kw}


def asst(t, reasoning=None, calls=None, prefix=False):
    m = {"role": "assistant", "content": t}
    if reasoning is not None:
        m["reasoning"] = reasoning
    if calls is not None:
        m["tool_calls"] = [{"id": i, "name": n, "arguments": a} for i, n, a in calls]
    if prefix:
        m["prefix"] = True
    return m


def tool(t, cid):
    return {"role": "tool", "content": t, "tool_call_id": cid}


def system(t):
    return {"role": "system", "content": t}


def hand_cases():
    sysm = system("You are a helpful assistant.")
    greet = [sysm, user("Hello"),
             asst("Hi there! How can I help you?", "The user said hello, I should greet back."),
             user("What is the capital of France?"),
             asst("The capital of France is Paris.",
                  "The user asks about the capital of France. It is Paris.")]
    weather = [sysm, user("What's the weather in Beijing?"),
               asst("", "The user wants to know the weather in Beijing. I should use the get_weather tool.",
                    [("c1", "get_weather", '{"location":"Beijing","unit":"celsius"}')]),
               tool('{"temperature": 22, "condition": "sunny", "humidity": 45}', "c1"),
               asst("The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity.",
                    "Got the weather data. Let me format a nice response.")]
    parallel = [user("Weather in Beijing and Shanghai?"),
                asst("Let me check both.", "two calls",
                     [("a", "get_weather", '{"location":"Beijing"}'),
                      ("b", "get_weather", '{"location":"Shanghai"}')]),
                tool('{"temperature": 22}', "a"), tool('{"temperature": 26}', "b"),
                asst("Beijing 22, Shanghai 26.", "done")]
    odd_args = [user("q"), asst("", None, [
        ("a", "f", '{"s":"x\\ny","n":1.5e-6,"o":{"k":[1,true,null]},"e":"","u":"日本","big":1e300}'),
        ("b", "g", '[1,2]'), ("c", "h", 'not json'), ("d", "h", '"{\\"a\\":1}"'),
        ("e", "k", '{}'), ("f", "k", ''), ("g", "k", ' {"a": 1} ')]),
        tool("rb", "b"), tool("ra", "a"), tool("rg", "g"), tool("rc", "c"),
        tool("rd", "d"), tool("re", "e"), tool("rf", "f"), user("after")]
    systems = [system("s1"), system(""), system("s2"), user("u1"), user("u2"), system("mid"),
               system(""), asst("a"), {"role": "latest_reminder", "content": "rem"}, user("u3"),
               asst("b"), system("late"), user("u4")]
    images = [user("look <｜image｜> and <｜image｜> <｜image｜>",
                   images=[{"kind": "url", "url": "http://a/x.png"},
                           {"kind": "data_url", "data_url": "data:image/png;base64,AAAA", "detail": "low"}]),
              asst("ok"), user("", images=[{"kind": "url", "url": "http://b"}]), user("<｜User｜> typed")]
    # A result whose id matches no call: V4.1 sorts it first, V4 by its id among the others.
    unknown_id = odd_args[:2] + [tool("rz", "zz")] + odd_args[2:]
    cases = [(enc, {"messages": unknown_id, "thinking": False}) for enc in ("v41", "v4")]
    for enc in ("v4", "v41"):
        for eff in (None, "low", "high", "xhigh", "max"):
            for thinking in (True, False):
                for tools in ([], [WEATHER, SEARCH]):
                    for msgs in (greet, greet[:4], weather, parallel):
                        cases.append((enc, {"messages": msgs, "thinking": thinking, "tools": tools,
                                            "effort": eff}))
        for thinking in (True, False):
            base = {"thinking": thinking}
            cases += [
                (enc, {**base, "messages": odd_args}),
                (enc, {**base, "messages": odd_args, "tools": [FLOATS]}),
                (enc, {**base, "messages": systems}),
                (enc, {**base, "messages": systems[5:]}),
                (enc, {**base, "messages": images}),
                (enc, {**base, "messages": [user("give json")], "response_format": "json_object"}),
                (enc, {**base, "messages": [sysm, user("give json")], "response_format": "json_object"}),
                (enc, {**base, "messages": [sysm, user("give json")], "response_format": "json_object",
                       "tools": [NO_PARAMS]}),
                (enc, {**base, "messages": [user("q")], "tools": [WEATHER], "tool_choice": "required"}),
                (enc, {**base, "messages": [user("q")], "tools": [WEATHER], "tool_choice": "none"}),
                (enc, {**base, "messages": weather, "tools": [WEATHER], "tool_choice": "none"}),
                (enc, {**base, "messages": [user("q")], "tools": [NO_PARAMS, FLOATS]}),
                (enc, {**base, "messages": [user("q"), asst("partial", "r", prefix=True)]}),
                (enc, {**base, "messages": [user("q"), asst("", "r", prefix=True)]}),
                (enc, {**base, "messages": [user("q"), asst("", None, prefix=True)]}),
                (enc, {**base, "messages": [asst("first", "r0"), user("q")], "tools": [NO_PARAMS]}),
                (enc, {**base, "messages": [user("")]}),
                (enc, {**base, "messages": []}),
                (enc, {**base, "messages": [{"role": "system", "content": "sys", "tools": [WEATHER]},
                                            user("q")]}),
                (enc, {**base, "messages": [user("q"), asst("a", "r"), {"role": "system", "content": "sys2",
                                            "tools": [SEARCH]}, user("q2")], "tools": [WEATHER]}),
            ]
    return cases


# ---- tool results out of order ------------------------------------------------------------
# 0.2.0 orders tool results differently for V4 and V4.1 (docs/recipe.md has the rules, found by
# experiment: the package ships no source). These cases pin both down.

def tool_id_none(t):
    return {"role": "tool", "content": t}


def calls_of(*ids):
    return asst("", None, [(i, "f", "{}") for i in ids])


def tool_order_hand_cases():
    q = user("q")
    convs = [
        [q, calls_of("a", "b", "c"), tool("rc", "c"), tool("ra", "a"), tool("rb", "b")],
        # V4 sorts by id, not by call position: c, a, b answered come out a, b, c there.
        [q, calls_of("c", "a", "b"), tool("ra", "a"), tool("rb", "b"), tool("rc", "c")],
        [q, calls_of("call_9", "call_10"), tool("r9", "call_9"), tool("r10", "call_10")],
        [q, calls_of("e", "b"), tool("rb", "b"), tool("re", "e")],
        # Fewer results than calls: V4 leaves them as they are, V4.1 still sorts.
        [q, calls_of("a", "b", "c"), tool("rc", "c"), tool("ra", "a")],
        [q, calls_of("a", "b", "c"), tool("rc", "c"), tool("ra", "a"), user("next")],
        # An unknown id and a missing id.
        [q, calls_of("a", "b"), tool("rb", "b"), tool("rx", "x"), tool("ra", "a")],
        [q, calls_of("a", "b"), tool("rb", "b"), tool_id_none("rn"), tool("ra", "a")],
        [q, calls_of("a", "b"), tool("rb", "b"), tool_id_none("rn"), tool("rx", "x"), tool("ra", "a")],
        # A user message inside the results: V4 moves it after them, V4.1 keeps its slot.
        [q, calls_of("a", "b"), tool("rb", "b"), user("u"), tool("ra", "a")],
        [q, calls_of("a", "b"), user("u"), tool("rb", "b"), tool("ra", "a")],
        [q, calls_of("a", "b", "c"), user("u1"), user("u2"), tool("rc", "c"), tool("ra", "a")],
        [q, calls_of("a", "b"), tool("rb", "b"), {"role": "latest_reminder", "content": "rem"}, tool("ra", "a")],
        [q, calls_of("a", "b"), tool("rb", "b"), system("s"), tool("ra", "a")],
        [q, calls_of("a", "b"), system("s"), tool("rb", "b"), tool("ra", "a")],
        # Duplicate ids, in the calls and in the results.
        [q, calls_of("a", "b", "a"), tool("rb", "b"), tool("ra1", "a"), tool("ra2", "a")],
        [q, calls_of("a", "b"), tool("rb1", "b"), tool("ra", "a"), tool("rb2", "b")],
        # Assistants inside another one's results, and one without calls between.
        [q, calls_of("a", "b"), calls_of("x", "y"), tool("rd", "d"), tool_id_none("rn")],
        [q, calls_of("c", "a"), calls_of("d", "c", "a"), tool("rd", "d"), user("u"), tool("rc", "c")],
        [q, calls_of("b", "a", "c"), asst("no calls"), tool("ra", "a"), tool("rz", "z"), user("u")],
        [q, calls_of("a", "b"), calls_of("c"), tool("rb", "b"), tool("ra", "a"), tool("rc", "c")],
        # Results with no assistant before them.
        [q, tool("rb", "b"), tool("ra", "a")],
    ]
    return [(enc, {"messages": m, "thinking": thinking}) for m in convs for enc in ("v4", "v41")
            for thinking in (False,)]


def rand_tool_order_conversation(rng):
    """Short conversations whose tool results come back shuffled, partial, with unknown or
    missing ids, and with user, reminder, system and assistant messages among them."""
    msgs, calls, n = [user("q")], [], 0
    for _ in range(rng.randint(2, 9)):
        n += 1
        r = rng.random()
        if r < 0.12:
            msgs.append(user(f"u{n}"))
        elif r < 0.16:
            msgs.append(system(f"s{n}"))
        elif r < 0.2:
            msgs.append({"role": "latest_reminder", "content": f"r{n}"})
        elif r < 0.38:
            calls = rng.sample(["a", "b", "c", "d", "call_9", "call_10"], rng.randint(0, 3))
            msgs.append(calls_of(*calls) if calls else asst(f"a{n}"))
        else:
            cid = rng.choice(calls + ["z", None] if calls else ["a", "z", None])
            msgs.append(tool(f"t{n}", cid) if cid is not None else tool_id_none(f"t{n}"))
    return {"messages": msgs, "thinking": rng.random() < 0.5}


def tool_order_cases():
    rng = random.Random(20261201)  # its own stream: the other random cases keep their draws
    cases = tool_order_hand_cases()
    for k in range(120):
        cases.append(("v4" if k % 2 == 0 else "v41", rand_tool_order_conversation(rng)))
    return cases


# ---- random conversations ----------------------------------------------------------------

WORDS = ["alpha", "beta", "日本語", "emoji 😀", "line\nbreak", "<think>", "</think>", "  spaced  ",
         "<｜User｜>", "<｜end▁of▁sentence｜>", "\n\n", "tab\t", "quote\"", "back\\slash", "json"]


def rand_text(rng, allow_empty=True):
    n = rng.randint(0 if allow_empty else 1, 4)
    return " ".join(rng.choice(WORDS) for _ in range(n))


def rand_value(rng, depth=0):
    r = rng.random()
    if depth > 1 or r < 0.3:
        return rng.choice([rand_text(rng), rng.randint(-1000, 10**12), rng.random() * 10 ** rng.randint(-8, 20),
                           True, False, None])
    if r < 0.6:
        return [rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["k", "key name", "日本", "x\"y", ""]) + str(i): rand_value(rng, depth + 1)
            for i in range(rng.randint(0, 3))}


def rand_conversation(rng):
    msgs = []
    if rng.random() < 0.6:
        msgs.append(system(rand_text(rng)))
    call_no = 0
    for _ in range(rng.randint(1, 4)):
        msgs.append(user(rand_text(rng)))
        if rng.random() < 0.2:
            msgs.append(user(rand_text(rng)))
        reasoning = rand_text(rng) if rng.random() < 0.7 else None
        if rng.random() < 0.5:
            calls = []
            for _ in range(rng.randint(1, 3)):
                call_no += 1
                args = {rng.choice(["city", "q", "n", "opts", "日本"]) + str(i): rand_value(rng)
                        for i in range(rng.randint(0, 3))}
                calls.append((f"call_{call_no}", rng.choice(["get_weather", "search", "f"]),
                              json.dumps(args, ensure_ascii=rng.random() < 0.5)))
            msgs.append(asst(rand_text(rng), reasoning, calls))
            order = list(calls)
            rng.shuffle(order)
            for c in order:
                msgs.append(tool(rand_text(rng), c[0]))
            if rng.random() < 0.3:
                msgs.append(user(rand_text(rng)))
            msgs.append(asst(rand_text(rng), rand_text(rng) if rng.random() < 0.7 else None))
        else:
            msgs.append(asst(rand_text(rng), reasoning))
        if rng.random() < 0.1:
            msgs.append({"role": "latest_reminder", "content": rand_text(rng)})
    if rng.random() < 0.5:
        msgs.append(user(rand_text(rng, allow_empty=False)))
    tools = rng.choice([[], [WEATHER], [WEATHER, SEARCH], [SEARCH, NO_PARAMS]])
    conv = {"messages": msgs, "thinking": rng.random() < 0.6, "tools": tools,
            "effort": rng.choice([None, None, "low", "high", "xhigh", "max"])}
    if tools:
        conv["tool_choice"] = rng.choice(["auto", "auto", "none", "required"])
    if rng.random() < 0.15:
        conv["response_format"] = "json_object"
    return conv


# ---- protocol requests -------------------------------------------------------------------

def chat_requests():
    reqs = []
    for enc in ("v4", "v41"):
        m = MODEL_NAMES[enc]
        fn = {"type": "function", "function": WEATHER}
        reqs += [
            {"model": m, "messages": [{"role": "user", "content": "Hello"}]},
            {"model": m, "messages": [{"role": "user", "content": "Hello"}], "thinking": {"type": "disabled"}},
            {"model": m, "messages": [{"role": "user", "content": "Hello"}], "reasoning_effort": "low"},
            {"model": m, "messages": [{"role": "user", "content": "Hello"}], "reasoning_effort": "max"},
            {"model": m, "messages": [{"role": "user", "content": "Hello"}], "reasoning_effort": "none"},
            {"model": m, "messages": [{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                   {"type": "text", "text": "b"}]}]},
            {"model": m, "messages": [{"role": "user", "content": "weather?"}], "tools": [fn]},
            {"model": m, "messages": [{"role": "user", "content": "weather?"}], "tools": [fn],
             "tool_choice": "required", "thinking": {"type": "disabled"}},
            {"model": m, "messages": [{"role": "user", "content": "weather?"}], "tools": [fn],
             "tool_choice": "none"},
            {"model": m, "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": None, "reasoning_content": "call it",
                 "tool_calls": [{"id": "c1", "type": "function",
                                 "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"}], "tools": [fn]},
            {"model": m, "messages": [{"role": "user", "content": "reply in json"}],
             "response_format": {"type": "json_object"}},
            {"model": m, "messages": [{"role": "user", "content": "no j-word"}],
             "response_format": {"type": "json_object"}},
            {"model": m, "messages": []},
            {"model": m, "messages": [{"role": "user", "content": "x <｜image｜>"}]},
            {"model": m, "messages": [
                {"role": "system", "content": [{"type": "image_url", "image_url": {"url": "http://s"}}]},
                {"role": "user", "content": [{"type": "text", "text": "see"},
                                             {"type": "image_url", "image_url": {"url": "http://x/a.png"}}]},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": [
                    {"type": "image_url", "image_url": {"url": "http://t"}}]}], "tools": [fn],
             "thinking": {"type": "disabled"}},
            {"model": m, "messages": [{"role": "user", "content": "hi"}], "temperature": 3},
            {"model": m, "messages": [{"role": "user", "content": "hi"}], "n": 2},
            {"model": m, "messages": [{"role": "user", "content": "hi"}], "tools": [fn, fn]},
            {"model": m, "messages": [{"role": "user", "content": "hi"}], "tools": [fn],
             "tool_choice": {"type": "function", "function": {"name": "nope"}},
             "thinking": {"type": "disabled"}},
            {"model": m, "messages": [{"role": "user", "content": "hi"}], "tools": [fn],
             "tool_choice": "required"},
            {"model": m, "messages": [{"role": "tool", "tool_call_id": "x", "content": "hi"}]},
            {"model": "unknown-model", "messages": [{"role": "user", "content": "hi"}]},
        ]
    return reqs


def chat_validation_requests():
    """One fault per request (or none), for the adapter's rules and its exact messages."""
    m = MODEL_NAMES["v41"]
    u = [{"role": "user", "content": "hi"}]
    fn = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}

    def call(i, name="f", args="{}"):
        return {"id": i, "type": "function", "function": {"name": name, "arguments": args}}

    def asst_calls(*calls):
        return {"role": "assistant", "tool_calls": list(calls)}

    def tool_msg(i, c="r"):
        return {"role": "tool", "tool_call_id": i, "content": c}

    reqs = [
        "{",
        {},
        {"messages": u},
        {"model": m},
        {"model": m, "messages": "x"},
        {"model": m, "messages": u, "temperature": -0.1, "thinking": {"type": "disabled"}},
        {"model": m, "messages": u, "temperature": 2, "thinking": {"type": "disabled"}},
        {"model": m, "messages": u, "top_p": 0},
        {"model": m, "messages": u, "top_p": 1.5},
        {"model": m, "messages": u, "top_p": 1},
        {"model": m, "messages": u, "max_tokens": 0},
        {"model": m, "messages": u, "max_tokens": 400000},
        {"model": m, "messages": u, "max_tokens": 393216},
        {"model": m, "messages": u, "n": 0},
        {"model": m, "messages": u, "n": 1},
        {"model": m, "messages": u, "presence_penalty": 3},
        {"model": m, "messages": u, "frequency_penalty": -3},
        {"model": m, "messages": u, "frequency_penalty": -2, "presence_penalty": 2},
        {"model": m, "messages": u, "seed": 2 ** 63},
        {"model": m, "messages": u, "seed": 2 ** 63 - 1},
        {"model": m, "messages": u, "stop": ["a"] * 17},
        {"model": m, "messages": u, "stop": ["a"] * 16},
        {"model": m, "messages": u, "stop": ["a", "", "b"]},
        {"model": m, "messages": u, "stop": "END", "stream": True},
        {"model": m, "messages": u, "stream_options": {"include_usage": True}},
        {"model": m, "messages": u, "stream_options": {"include_usage": True}, "stream": True},
        {"model": m, "messages": u, "logprobs": True, "top_logprobs": 30},
        {"model": m, "messages": [{"role": "robot", "content": "x"}]},
        {"model": m, "messages": [{"role": "system", "content": [{"type": "text", "text": "a"},
                                                                   {"type": "text", "text": "b"}]}] + u},
        {"model": m, "messages": [{"role": "system", "content": ""}] + u},
        {"model": m, "messages": [{"role": "user", "content": None}]},
        {"model": m, "messages": [{"role": "user", "content": []}]},
        # Empty content lists: Chat accepts every one (an empty turn; an empty system is dropped).
        {"model": m, "messages": u + [{"role": "assistant", "content": "a"}, {"role": "user", "content": []}]},
        {"model": m, "messages": [{"role": "system", "content": []}] + u},
        {"model": m, "messages": u + [{"role": "assistant", "content": []}, {"role": "user", "content": "y"}]},
        {"model": m, "messages": u + [asst_calls(call("a")), {"role": "tool", "tool_call_id": "a", "content": []}],
         "tools": [fn]},
        {"model": m, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "see"},
            {"type": "image_url", "image_url": {"url": "http://x/a.png", "detail": "low"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]}]},
        {"model": m, "messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "abc"}}]}]},
        {"model": m, "messages": u + [{"role": "assistant", "content": ""}, {"role": "user", "content": "y"}]},
        {"model": m, "messages": u + [{"role": "assistant"}, {"role": "user", "content": "y"}]},
        {"model": m, "messages": u + [{"role": "assistant", "content": "x"}]},
        {"model": m, "messages": u + [{"role": "assistant", "content": "x", "prefix": True}]},
        {"model": m, "messages": u + [{"role": "assistant", "content": "", "reasoning_content": "r",
                                       "prefix": True}]},
        {"model": m, "messages": u + [{"role": "assistant", "content": "x", "prefix": True},
                                      {"role": "user", "content": "y"}]},
        {"model": m, "messages": u + [{"role": "assistant", "content": "x", "tool_calls": []}]},
        {"model": m, "messages": u + [asst_calls(call("a"), call("a")), tool_msg("a")], "tools": [fn]},
        {"model": m, "messages": u + [asst_calls(call("a")), {"role": "user", "content": "y"}], "tools": [fn]},
        {"model": m, "messages": u + [asst_calls(call("a"))], "tools": [fn]},
        {"model": m, "messages": u + [asst_calls(call("a")), tool_msg("b")], "tools": [fn]},
        {"model": m, "messages": u + [asst_calls(call("a"), call("b")), tool_msg("a"), tool_msg("a")],
         "tools": [fn]},
        {"model": m, "messages": u + [asst_calls(call("a"), call("b")), tool_msg("b", "rb"), tool_msg("a", "ra"),
                                      {"role": "user", "content": "next"}], "tools": [fn]},
        {"model": m, "messages": u + [asst_calls(call("a", "f", '{"b": 1.0e-5, "a": [1, "x"]}')),
                                      {"role": "tool", "tool_call_id": "a",
                                       "content": [{"type": "text", "text": "r1"}, {"type": "text", "text": "r2"}]}],
         "tools": [fn]},
        {"model": m, "messages": u, "tools": [{"type": "function", "function": {"name": "a b"}}]},
        {"model": m, "messages": u, "tools": [{"type": "function", "function": {"name": "a" * 129}}]},
        {"model": m, "messages": u, "tools": [{"type": "function", "function": {"name": "a" * 128}}]},
        {"model": m, "messages": u, "tools": [{"type": "function", "function": {"name": ""}}]},
        {"model": m, "messages": u, "tools": [{"type": "function", "function": {
            "name": "f", "parameters": {"type": "string"}}}]},
        {"model": m, "messages": u, "tools": [{"type": "function", "function": {
            "name": "f", "parameters": {"properties": {}}}}]},
        {"model": m, "messages": u, "tools": [{"type": "function", "function": {"name": "f"}}]},
        {"model": m, "messages": u, "tools": [{"type": "function", "function": {
            "name": "f", "description": "D", "strict": True, "parameters": {
                "type": "object", "properties": {"b": {"type": "number"}, "a": {"type": "string"}}}}}]},
        {"model": m, "messages": u, "tools": [{"type": "function", "function": {
            "name": "f", "strict": True, "parameters": {
                "type": "object", "required": ["z"], "properties": {"b": {"type": "number"}}}}}]},
        {"model": m, "messages": u, "tool_choice": "none"},
        {"model": m, "messages": u, "tool_choice": "required", "thinking": {"type": "disabled"}},
        {"model": m, "messages": u, "tools": [fn, {"type": "function", "function": {"name": "g"}}],
         "tool_choice": {"type": "function", "function": {"name": "g"}}, "thinking": {"type": "disabled"}},
        {"model": m, "messages": u, "tools": [fn], "tool_choice": "none"},
        {"model": m, "messages": u, "response_format": {"type": "text"}},
        {"model": m, "messages": u, "response_format": {"type": "regex", "regex": "a+"}},
        {"model": m, "messages": [{"role": "system", "content": "Use JSON"}] + u,
         "response_format": {"type": "json_object"}},
        {"model": m, "messages": u, "reasoning_effort": "medium"},
        {"model": m, "messages": u, "reasoning_effort": "minimal"},
        {"model": m, "messages": u, "reasoning_effort": "ultra"},
        {"model": m, "messages": u, "reasoning_effort": "xhigh"},
        {"model": m, "messages": u, "thinking": {"type": "adaptive"}},
        {"model": m, "messages": u, "thinking": {"type": "enabled"}, "reasoning_effort": "none"},
        {"model": m, "messages": u, "thinking": {"type": "disabled"}, "reasoning_effort": "max"},
        {"model": m, "messages": u + [{"role": "latest_reminder", "content": "rem"}]},
        {"model": m, "messages": u + [{"role": "assistant", "content": "x", "reasoning_content": "r"},
                                      {"role": "user", "content": "y"}], "tools": [fn]},
        {"model": m, "messages": u + [{"role": "assistant", "content": [{"type": "text", "text": "x"},
                                                                         {"type": "text", "text": "z"}]},
                                      {"role": "user", "content": "y"}]},
        {"model": m, "messages": [{"role": "user", "content": "a <｜image｜>"}]},
        {"model": "x", "messages": []},
        {"model": m, "messages": [], "temperature": 5},
    ]
    return reqs


def responses_requests():
    reqs = []
    for enc in ("v4", "v41"):
        m = MODEL_NAMES[enc]
        fn = {"type": "function", **WEATHER}
        reqs += [
            {"model": m, "input": "Hello"},
            {"model": m, "input": "Hello", "instructions": "Be brief.", "reasoning": {"effort": "none"}},
            {"model": m, "input": "Hello", "reasoning": {"effort": "minimal"}},
            {"model": m, "input": [{"type": "message", "role": "user", "content": "weather?"},
                                   {"type": "function_call", "call_id": "c2", "name": "get_weather",
                                    "arguments": "{\"location\":\"Rome\"}"},
                                   {"type": "function_call", "call_id": "c1", "name": "get_weather",
                                    "arguments": "{\"location\":\"Paris\"}"},
                                   {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                                   {"type": "function_call_output", "call_id": "c2", "output": "rain"}],
             "tools": [fn]},
            {"model": m, "input": "hi", "tools": [{"type": "custom", "name": "apply_patch"}]},
            {"model": m, "input": "hi", "text": {"format": {"type": "json_object"}}},
            {"model": m, "input": []},
        ]
    return reqs


def messages_requests():
    reqs = []
    for enc in ("v4", "v41"):
        m = MODEL_NAMES[enc]
        t = {"name": "get_weather", "description": WEATHER["description"], "input_schema": WEATHER["parameters"]}
        reqs += [
            {"model": m, "max_tokens": 100, "messages": [{"role": "user", "content": "Hello"}]},
            {"model": m, "max_tokens": 100, "system": "Be brief.", "thinking": {"type": "disabled"},
             "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]},
            {"model": m, "max_tokens": 100, "tools": [t], "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"},
                                                  {"type": "tool_use", "id": "t1", "name": "get_weather",
                                                   "input": {"location": "Oslo", "x": 0.00001}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "cold"},
                                             {"type": "text", "text": "thanks"}]}]},
            {"model": m, "max_tokens": 100, "messages": [
                {"role": "user", "content": "a"}, {"role": "system", "content": "mid"}]},
        ]
    return reqs


def responses_validation_requests():
    """One fault per request (or none), for the Responses adapter's rules and messages."""
    fn = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    call = lambda i, n="f", a="{}": {"type": "function_call", "call_id": i, "name": n, "arguments": a}  # noqa: E731
    out = lambda i, o="r": {"type": "function_call_output", "call_id": i, "output": o}  # noqa: E731
    q = {"role": "user", "content": "q"}
    reqs = []
    for m in MODEL_NAMES.values():
        reqs += [
            {"model": m, "instructions": "Be"},
            {"model": m},
            {"model": m, "instructions": "", "input": "x"},
            {"model": m, "instructions": "I", "input": "x"},
            {"model": m, "input": "x", "reasoning": {"effort": "xhigh"}},
            {"model": m, "input": "x", "reasoning": {"effort": "max"}},
            {"model": m, "input": "x", "reasoning": {"effort": "medium"}},
            {"model": m, "input": "x", "max_output_tokens": 0},
            {"model": m, "input": "x", "max_output_tokens": 500},
            {"model": m, "input": "x", "temperature": 5},
            {"model": m, "input": "x", "top_p": 0},
            {"model": m, "input": [
                {"type": "message", "role": "system", "content": "S"},
                {"type": "message", "role": "developer", "content": "D"},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "a"}, {"type": "input_image", "image_url": "http://x"},
                    {"type": "input_file", "file_data": "x"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A1"}]},
                {"type": "message", "role": "assistant", "content": "A2"}]},
            {"model": m, "input": [q, {"type": "reasoning", "summary": [], "content": [
                {"type": "reasoning_text", "text": "r1"}, {"type": "reasoning_text", "text": "r2"}]},
                {"role": "assistant", "content": "ans"}]},
            {"model": m, "input": [q, {"role": "assistant", "content": "ans"},
                                   {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]}]},
            {"model": m, "tools": [fn], "input": [q, call("b"), call("a", "f", '{"x":1}'), out("a", "ra"),
                                                  out("b", "rb"), {"role": "user", "content": "next"}]},
            {"model": m, "tools": [fn], "input": [q, call("b"), {"role": "user", "content": "x"}]},
            {"model": m, "tools": [fn], "input": [q, out("z")]},
            {"model": m, "tools": [fn], "input": [q, call("b"), call("b")]},
            {"model": m, "tools": [fn], "input": [q, call("")]},
            {"model": m, "tools": [fn], "input": [q, call("b")]},
            {"model": m, "tools": [fn], "input": [q, call("a"), call("b"), out("a", "ra"), call("c"), out("c", "rc"),
                                                  out("b", "rb")]},
            {"model": m, "tools": [fn], "input": [q, {"role": "assistant", "content": "pre"}, call("c"), out("c"),
                                                  {"role": "assistant", "content": "post"}]},
            {"model": m, "tools": [fn], "input": [q, {"type": "reasoning", "summary": [], "content": [
                {"type": "reasoning_text", "text": "r"}]}, call("c"), out("c")]},
            {"model": m, "input": "x", "tools": [{"type": "namespace", "name": "ns", "description": "NS",
                                                  "tools": [{"type": "function", "name": "g", "description": "G",
                                                             "parameters": {"type": "object"}}]}]},
            {"model": m, "input": "x", "tools": [{"type": "namespace", "name": "ns", "description": "NS",
                                                  "tools": [{"type": "function", "name": "g"}]}]},
            {"model": m, "input": "x", "tools": [{"type": "namespace", "name": "ns", "description": "",
                                                  "tools": [{"type": "function", "name": "g"},
                                                            {"type": "function", "name": "g"}]}]},
            {"model": m, "tools": [{"type": "namespace", "name": "ns", "description": "",
                                    "tools": [{"type": "function", "name": "g"}]}],
             "input": [q, {"type": "function_call", "call_id": "c", "name": "g", "namespace": "ns",
                           "arguments": "{}"}, out("c", "ok")]},
            {"model": m, "input": "x", "tools": [{"type": "custom", "name": "apply_patch"}]},
            {"model": m, "input": "x", "tools": [{"type": "custom", "name": "other"}]},
            {"model": m, "input": "x", "tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}},
            {"model": m, "input": "x", "tools": [fn], "tool_choice": "none"},
            {"model": m, "input": "x", "tools": [fn], "tool_choice": "required", "reasoning": {"effort": "none"}},
            {"model": m, "input": "x", "tools": [fn], "tool_choice": "required"},
            {"model": m, "input": "x", "tools": [fn, {"type": "function", "name": "g"}],
             "tool_choice": {"type": "function", "name": "g"}, "reasoning": {"effort": "none"}},
            {"model": m, "input": "x", "tools": [{"type": "custom", "name": "apply_patch"}],
             "tool_choice": {"type": "custom", "name": "apply_patch"}, "reasoning": {"effort": "none"}},
            {"model": m, "input": "x", "tools": [fn], "tool_choice": {"type": "function", "name": "zz"},
             "reasoning": {"effort": "none"}},
            {"model": m, "input": "x json", "text": {"format": {"type": "json_object"}}},
            {"model": m, "tools": [{"type": "custom", "name": "apply_patch"}], "input": [
                q, {"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": "*** Begin"},
                {"type": "custom_tool_call_output", "call_id": "c", "output": "ok"}]},
            {"model": m, "input": [q, {"type": "web_search_call", "id": "w", "status": "completed"}]},
            {"model": m, "input": [{"role": "user", "content": [{"type": "output_text", "text": "o"}]}]},
            # Empty content lists: Responses accepts every one, as an empty turn.
            {"model": m, "input": [{"type": "message", "role": "user", "content": []}]},
            {"model": m, "input": [q, {"type": "message", "role": "user", "content": []}]},
            {"model": m, "input": [q, {"role": "assistant", "content": []}]},
            {"model": m, "input": [{"role": "system", "content": []}, q]},
            {"model": m, "tools": [fn], "input": [q, call("c"), out("c", [])]},
        ]
    return reqs


def messages_validation_requests():
    """One fault per request (or none), for the Messages adapter's rules and messages."""
    u = [{"role": "user", "content": "hi"}]
    t = {"name": "f", "input_schema": {"type": "object", "properties": {"a": {"type": "string"}}}}
    use = lambda i, inp=None: {"type": "tool_use", "id": i, "name": "f", "input": inp or {}}  # noqa: E731
    res = lambda i, c="r": {"type": "tool_result", "tool_use_id": i, "content": c}  # noqa: E731
    reqs = []
    for m in MODEL_NAMES.values():
        reqs += [
            {"model": m, "max_tokens": 10, "messages": []},
            {"model": m, "max_tokens": 10 ** 7, "messages": u},
            {"model": m, "messages": u},
            {"model": m, "max_tokens": 10, "system": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
             "messages": u},
            {"model": m, "max_tokens": 10, "output_config": {"effort": "low"}, "messages": u},
            {"model": m, "max_tokens": 10, "output_config": {"effort": "ultra"}, "messages": u},
            {"model": m, "max_tokens": 10, "output_config": {"effort": "medium"}, "messages": u},
            {"model": m, "max_tokens": 10, "thinking": {"type": "disabled"}, "output_config": {"effort": "max"},
             "messages": u},
            {"model": m, "max_tokens": 10, "thinking": {"type": "enabled", "budget_tokens": 1024}, "messages": u},
            {"model": m, "max_tokens": 10, "thinking": {"type": "adaptive"}, "messages": u},
            {"model": m, "max_tokens": 10, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "a"}, {"type": "image", "source": {"type": "url", "url": "http://x"}},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                {"type": "document", "source": {"type": "text", "data": "d"}},
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "AA"}},
                {"type": "text", "text": "b"}]}]},
            {"model": m, "max_tokens": 10, "tools": [t], "messages": u},
            {"model": m, "max_tokens": 10, "tools": [{"name": "f"}], "messages": u},
            {"model": m, "max_tokens": 10, "tools": [t, t], "messages": u},
            {"model": m, "max_tokens": 10, "tools": [{"name": "a b", "input_schema": {"type": "object"}}], "messages": u},
            {"model": m, "max_tokens": 10, "tools": [{"type": "bash_20250124", "name": "bash"}], "messages": u},
            {"model": m, "max_tokens": 10, "tools": [{"type": "web_search_20250305", "name": "web_search"}],
             "messages": u},
            {"model": m, "max_tokens": 10, "tools": [t], "tool_choice": {"type": "any"}, "messages": u},
            {"model": m, "max_tokens": 10, "tools": [t], "tool_choice": {"type": "tool", "name": "f"}, "messages": u},
            {"model": m, "max_tokens": 10, "thinking": {"type": "disabled"}, "tools": [t],
             "tool_choice": {"type": "tool", "name": "f"}, "messages": u},
            {"model": m, "max_tokens": 10, "thinking": {"type": "disabled"}, "tools": [t],
             "tool_choice": {"type": "tool", "name": "g"}, "messages": u},
            {"model": m, "max_tokens": 10, "tools": [t], "tool_choice": {"type": "none"}, "messages": u},
            {"model": m, "max_tokens": 10, "tools": [t], "messages": u + [
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "t1", "signature": "s"},
                    {"type": "thinking", "thinking": "t2", "signature": "s"}, {"type": "text", "text": "x"},
                    use("u1", {"a": "b", "n": 1.5, "e": 0.00001, "big": 1e20}), use("u2")]},
                {"role": "user", "content": [res("u2", "r2"), res("u1", [{"type": "text", "text": "r1a"},
                                                                         {"type": "text", "text": "r1b"}]),
                                             {"type": "text", "text": "more"}]}]},
            {"model": m, "max_tokens": 10, "tools": [t], "messages": u + [
                {"role": "assistant", "content": [use("u1")]}, {"role": "user", "content": "x"}]},
            {"model": m, "max_tokens": 10, "tools": [t], "messages": u + [
                {"role": "assistant", "content": [use("u1"), {"type": "text", "text": "after"}]},
                {"role": "user", "content": [res("u1")]}]},
            {"model": m, "max_tokens": 10, "messages": [{"role": "user", "content": [res("u1")]}]},
            {"model": m, "max_tokens": 10, "tools": [t], "messages": u + [
                {"role": "assistant", "content": [use("u1")]}, {"role": "user", "content": [res("u1"), res("u1")]}]},
            {"model": m, "max_tokens": 10, "tools": [t], "messages": u + [
                {"role": "assistant", "content": [use("u1")]},
                {"role": "user", "content": [{"type": "text", "text": "x"}, res("u1")]}]},
            {"model": m, "max_tokens": 10, "tools": [t], "messages": u + [
                {"role": "assistant", "content": [use("u1")]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u1", "is_error": True}]}]},
            {"model": m, "max_tokens": 10, "messages": u + [{"role": "assistant", "content": []}]},
            {"model": m, "max_tokens": 10, "messages": u + [{"role": "assistant", "content": "pre"}]},
            {"model": m, "max_tokens": 10, "messages": u + [{"role": "assistant", "content": [
                {"type": "thinking", "thinking": "tt", "signature": ""}]}]},
            {"model": m, "max_tokens": 10, "messages": u + [{"role": "user", "content": "again"}]},
            {"model": m, "max_tokens": 10, "stop_sequences": ["a"] * 17, "messages": u},
            {"model": m, "max_tokens": 10, "stop_sequences": ["a", ""], "messages": u},
            {"model": m, "max_tokens": 10, "temperature": 3, "messages": u},
            {"model": m, "max_tokens": 10, "top_p": 0, "messages": u},
            {"model": m, "max_tokens": 10, "messages": [{"role": "user", "content": [use("u1")]}]},
            {"model": m, "max_tokens": 10, "messages": u + [{"role": "system", "content": "late"},
                                                            {"role": "user", "content": "x"}]},
            # Empty content lists: refused for a user or assistant turn, wherever it is; an empty
            # string, an empty text block, an empty system list and an empty tool result are not.
            {"model": m, "max_tokens": 10, "messages": [{"role": "user", "content": []}]},
            {"model": m, "max_tokens": 10, "messages": u + [{"role": "assistant", "content": "a"},
                                                            {"role": "user", "content": []}]},
            {"model": m, "max_tokens": 10, "messages": u + [{"role": "assistant", "content": []},
                                                            {"role": "user", "content": "x"}]},
            {"model": m, "max_tokens": 10, "messages": [{"role": "user", "content": ""}]},
            {"model": m, "max_tokens": 10, "messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]},
            {"model": m, "max_tokens": 10, "system": [], "messages": u},
            {"model": m, "max_tokens": 10, "system": [], "thinking": {"type": "disabled"}, "messages": u},
            {"model": m, "max_tokens": 10, "system": "", "thinking": {"type": "disabled"}, "messages": u},
            {"model": m, "max_tokens": 10, "tools": [t], "messages": u + [
                {"role": "assistant", "content": [use("u1")]}, {"role": "user", "content": [res("u1", [])]}]},
        ]
    reqs.append({"model": "x", "max_tokens": 10, "messages": u})
    return reqs


def protocol_case(protocol, body):
    cls = {"chat": dr.ChatCompletionRequest, "responses": dr.ResponsesRequest,
           "messages": dr.MessagesRequest}[protocol]
    case = {"protocol": protocol, "request": body}
    try:
        req = cls(body if isinstance(body, str) else json.dumps(body)).convert(dr.ConversionOptions())
    except dr.ConversionError as e:
        case["error"] = {"status": e.status_code, "body": e.body}
        return case
    except ValueError as e:
        # A body that does not deserialize: the wording is serde's, so only the fact is kept.
        case["error"] = {"status": 400, "body": None, "reference_message": str(e)}
        return case
    enc = "v4" if req.model_version == dr.ModelVersion.DeepseekV4Pro else "v41"
    case["encoding"] = enc
    case["conversation"] = conversation_to_json(req.conversation)
    case.update(render(enc, req.conversation))
    return case


# ---- model outputs to parse --------------------------------------------------------------

PARSE_OUT = OUT.parent / "parse.json"


def dsml(block, sp, calls):
    s = f"<｜DSML｜{block}>\n"
    for name, params in calls:
        s += f'<｜DSML｜{sp}invoke name="{name}">\n'
        for key, is_str, value in params:
            s += (f'<｜DSML｜{sp}parameter name="{key}" string="{"true" if is_str else "false"}">'
                  f"{value}</｜DSML｜{sp}parameter>\n")
        s += f"</｜DSML｜{sp}invoke>\n"
    return s + f"</｜DSML｜{block}>"


def parse_outputs():
    # Parameter names here have no space or quote: 0.2.0 cuts such a name at its first space
    # (see docs/recipe.md), which the C++ parser does not copy.
    calls = [("get_weather", [("location", True, "Paris\n日本 \"q\" \\"), ("days", False, "3"),
                              ("opts", False, '{"a": [1, 2.5e-7, null]}'), ("", True, "empty key")]),
             ("search", [])]
    outs = []
    for block, sp in (("tool_calls", ""), (" calls", " ")):
        d = dsml(block, sp, calls)
        outs += [d, "Let me check.\n\n" + d, "\n\nplan</think>\n\n" + d + " trailing",
                 "plan\n\n" + d, d[:len(d) // 2]]
    outs += ["", "\n\nLet me think\n\n</think>\n\nHello world", "Hello</think> world",
             "no thinking end", "</think>", "a\n\n\n</think>\n\n\nb\n\n", "x STOP y", "x STO",
             "Here:\n```json\n{\"a\": 1}\n```\nbye", "{\"a\": [1, 2]}", "[1, 2]\n```\nz",
             "some text ```\n{\"k\": \"v\"}\n``` end", "reason</think>{\"j\": true}",
             "日本語</think>😀 emoji", "<think>nested</think>after"]
    return outs


def parse_requests():
    m = MODEL_NAMES["v41"]
    u = [{"role": "user", "content": "hi, json"}]
    fn = {"type": "function", "function": {"name": "get_weather"}}
    return [
        {"model": m, "messages": u},
        {"model": m, "messages": u, "thinking": {"type": "disabled"}},
        {"model": m, "messages": u, "tools": [fn]},
        {"model": m, "messages": u, "tools": [fn], "thinking": {"type": "disabled"}},
        {"model": m, "messages": u, "tools": [fn], "tool_choice": "required", "thinking": {"type": "disabled"}},
        {"model": m, "messages": u, "stop": ["STOP", "y"], "thinking": {"type": "disabled"}},
        {"model": m, "messages": u, "stop": "STOP"},
        {"model": m, "messages": u, "response_format": {"type": "json_object"}, "thinking": {"type": "disabled"}},
        {"model": m, "messages": u, "response_format": {"type": "json_object"}, "tools": [fn]},
    ]


def normalize_ids(text):
    # Tool call ids end in random characters; timestamps of chunks are the wall clock.
    text = re.sub(r'(call_\d\d_)[^"]+', r"\1ID", text)
    return re.sub(r'"created":\d+', '"created":0', text)


def delta_summary(chunk):
    delta = chunk["choices"][0]["delta"]
    if "tool_calls" in delta:
        call = delta["tool_calls"][0]
        if "id" in call:
            return ["tool_call", call["function"]["name"]]
        return ["arguments", call["function"]["arguments"]]
    if delta.get("reasoning_content") is not None:
        return ["reasoning", delta["reasoning_content"]]
    return ["content", delta.get("content")]


CHUNK_CHARS = 5


def streamed_deltas(body, output):
    """The deltas when the output arrives CHUNK_CHARS characters at a time."""
    req = dr.ChatCompletionRequest(json.dumps(body)).convert(dr.ConversionOptions())
    gen = dr.ChatCompletionRequest.chunk_generator(req, "resp-1", "model-x")
    sp = dr.StreamProcessor(gen, req.parsing_options)
    texts = []
    for i in range(0, len(output), CHUNK_CHARS):
        if sp.finished:
            break
        texts += [c.to_json() for c in sp.push(dr.InferenceChunk.text(output[i:i + CHUNK_CHARS], 1))]
    if not sp.finished:
        texts += [c.to_json() for c in sp.push(dr.InferenceChunk.finish(dr.InferenceFinishReason.Stop))]
    texts += [c.to_json() for c in sp.finish()]
    return [delta_summary(json.loads(t)) for t in texts[1:-1]]


def parse_case(body, output):
    req = dr.ChatCompletionRequest(json.dumps(body)).convert(dr.ConversionOptions())
    gen = dr.ChatCompletionRequest.chunk_generator(req, "resp-1", "model-x")
    sp = dr.StreamProcessor(gen, req.parsing_options)
    resp = dr.ChatCompletionResponse("resp-1", "model-x", 0, 10, 4)
    chunks = sp.push(dr.InferenceChunk.ready(
        prompt_usage=dr.PromptUsage(prompt_tokens=10, prompt_cache_hit_tokens=4), system_fingerprint="fp1"))
    chunks += sp.push(dr.InferenceChunk.text(output, 3))
    if not sp.finished:
        chunks += sp.push(dr.InferenceChunk.finish(dr.InferenceFinishReason.Stop))
    chunks += sp.finish()
    texts = [c.to_json() for c in chunks]  # accumulating consumes a chunk
    for c in chunks:
        resp.accumulate(c)
    choice = json.loads(resp.to_json())["choices"][0]
    msg = choice["message"]
    return {"request": body, "output": output, "expected": {
        "reasoning": msg.get("reasoning_content") or "",
        "content": msg.get("content") or "",
        "tool_calls": [[t["function"]["name"], t["function"]["arguments"]] for t in msg.get("tool_calls") or []],
        "finish_reason": choice["finish_reason"]},
        "body": normalize_ids(resp.to_json()),
        "first_chunk": normalize_ids(texts[0]),
        "last_chunk": normalize_ids(texts[-1]),
        # The deltas between them, as [field path, text] pairs, one per chunk.
        "deltas": [delta_summary(json.loads(t)) for t in texts[1:-1]],
        "streamed_deltas": streamed_deltas(body, output)}


MESSAGES_PARSE_OUT = OUT.parent / "messages_responses.json"


def messages_parse_requests():
    m = MODEL_NAMES["v41"]
    u = [{"role": "user", "content": "hi"}]
    t = {"name": "get_weather", "input_schema": {"type": "object"}}
    return [
        {"model": m, "max_tokens": 100, "messages": u},
        {"model": m, "max_tokens": 100, "messages": u, "thinking": {"type": "disabled"}},
        {"model": m, "max_tokens": 100, "messages": u, "tools": [t]},
        {"model": m, "max_tokens": 100, "messages": u, "tools": [t], "thinking": {"type": "disabled"}},
        {"model": m, "max_tokens": 100, "messages": u, "tools": [t], "thinking": {"type": "disabled"},
         "tool_choice": {"type": "tool", "name": "get_weather"}},
        {"model": m, "max_tokens": 100, "messages": u, "stop_sequences": ["STOP", "y"],
         "thinking": {"type": "disabled"}},
    ]


def messages_parse_case(body, output):
    req = dr.MessagesRequest(json.dumps(body)).convert(dr.ConversionOptions())
    gen = dr.MessagesRequest.chunk_generator(req, "msg-1", "model-x")
    sp = dr.StreamProcessor(gen, req.parsing_options)
    resp = dr.MessagesResponse("msg-1", "model-x", 0, 10, 4)
    events = sp.push(dr.InferenceChunk.ready(
        prompt_usage=dr.PromptUsage(prompt_tokens=10, prompt_cache_hit_tokens=4), system_fingerprint="fp1"))
    events += sp.push(dr.InferenceChunk.text(output, 3))
    if not sp.finished:
        events += sp.push(dr.InferenceChunk.finish(dr.InferenceFinishReason.Stop))
    events += sp.finish()
    texts = [[dr.MessagesResponse.sse_event_name(e), normalize_ids(e.to_json())] for e in events]
    for e in events:
        resp.accumulate(e)
    # The same output arriving CHUNK_CHARS characters at a time.
    req = dr.MessagesRequest(json.dumps(body)).convert(dr.ConversionOptions())
    sp = dr.StreamProcessor(dr.MessagesRequest.chunk_generator(req, "msg-1", "model-x"), req.parsing_options)
    streamed = sp.push(dr.InferenceChunk.ready(
        prompt_usage=dr.PromptUsage(prompt_tokens=10, prompt_cache_hit_tokens=4), system_fingerprint="fp1"))
    for i in range(0, len(output), CHUNK_CHARS):
        if sp.finished:
            break
        streamed += sp.push(dr.InferenceChunk.text(output[i:i + CHUNK_CHARS], 1))
    if not sp.finished:
        streamed += sp.push(dr.InferenceChunk.finish(dr.InferenceFinishReason.Stop))
    streamed += sp.finish()
    return {"request": body, "output": output, "events": texts, "body": normalize_ids(resp.to_json()),
            "streamed_events": [[dr.MessagesResponse.sse_event_name(e), normalize_ids(e.to_json())]
                                for e in streamed]}


RESPONSES_PARSE_OUT = OUT.parent / "responses_responses.json"


def responses_parse_requests():
    fn = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    ns = {"type": "namespace", "name": "ns", "description": "nd",
          "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]}
    custom = {"type": "custom", "name": "apply_patch", "description": "edit files"}
    reqs = []
    for enc in ("v4", "v41"):
        m = MODEL_NAMES[enc]
        reqs += [
            {"model": m, "input": "hi"},
            {"model": m, "input": "hi", "reasoning": {"effort": "none"}},
            {"model": m, "input": "hi", "tools": [fn, custom, {"type": "web_search"}]},
            {"model": m, "input": "hi", "tools": [fn], "reasoning": {"effort": "none"},
             "tool_choice": {"type": "function", "name": "get_weather"}},
            {"model": m, "input": "hi", "tools": [ns, custom], "reasoning": {"effort": "none"}},
        ]
    m = MODEL_NAMES["v41"]
    fn_full = {"type": "function", "name": "get_weather", "description": "d", "strict": True,
               "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}
    reqs += [
        {"model": m, "input": "hi, json", "text": {"format": {"type": "json_object"}, "verbosity": "low"},
         "instructions": "Be brief.", "max_output_tokens": 500, "temperature": 0.25, "top_p": 0.5,
         "top_logprobs": 2, "user": "u-1", "reasoning": {"effort": "minimal", "summary": "auto"}},
        {"model": m, "input": "hi", "tools": [fn_full], "tool_choice": "none", "reasoning": {"effort": "none"},
         "temperature": 0},
        {"model": m, "input": "hi", "tools": [fn_full], "tool_choice": "required",
         "reasoning": {"effort": "none"}, "parallel_tool_calls": False},
    ]
    return reqs


def responses_echo_requests():
    """Requests whose settings the response objects report back (ResponsesEcho)."""
    m = MODEL_NAMES["v41"]
    fn = {"type": "function", "name": "f"}
    variants = [
        {"tools": [{"type": "web_search_2025_08_26", "search_context_size": "low",
                    "user_location": {"type": "approximate", "city": "X"}}]},
        {"tools": [{"type": "web_search", "user_location": {"type": "approximate"}}, {"type": "whatever"}]},
        {"tools": [{"type": "custom", "name": "apply_patch", "description": "x", "format": {"type": "text"}}]},
        {"tools": [{"type": "function", "name": "f", "parameters": None, "description": None, "extra": 1}]},
        {"tools": [{"type": "namespace", "name": "ns", "tools": []}, fn]},
        {"tool_choice": {"type": "function", "name": "f"}, "tools": [fn], "reasoning": {"effort": "none"}},
        {"tool_choice": {"type": "custom", "name": "apply_patch"}, "tools": [{"type": "custom", "name": "apply_patch"}],
         "reasoning": {"effort": "none"}},
        {"tool_choice": {"type": "web_search"}, "tools": [fn]},
        {"tool_choice": "none", "tools": [fn]},
        {"reasoning": {"effort": "high", "summary": "detailed"}}, {"reasoning": {}}, {"reasoning": None},
        {"text": {}}, {"text": {"verbosity": "high"}}, {"text": None},
        {"temperature": 1}, {"temperature": 0.1}, {"temperature": 1e-7, "reasoning": {"effort": "none"}},
        {"max_output_tokens": 5, "top_p": 0.999}, {"instructions": "multi\nline \"q\" é\u0001"},
        {"user": "x"}, {"top_logprobs": None}, {"tool_choice": None}, {"tools": None}, {"tools": []},
    ]
    return [{"model": m, "input": "hi", **v} for v in variants]


def responses_parse_outputs():
    calls = [("get_weather", [("location", True, "Paris"), ("days", False, "3")])]
    patch = [("apply_patch", [("input", True, "*** Begin Patch\n\"q\" \\ 日本\n*** End Patch")])]
    ns_calls = [("ns::get_weather", [("a", False, "1")])]
    ns_v4 = [("ns__get_weather", [("a", False, "1")])]
    outs = []
    for block, sp in (("tool_calls", ""), (" calls", " ")):
        outs += ["Let me patch.\n\n" + dsml(block, sp, patch + calls),
                 "plan</think>" + dsml(block, sp, ns_calls + ns_v4),
                 dsml(block, sp, [("apply_patch", [("input", False, '"a\\u00e9\\ud83d\\ude00b"')])]),
                 dsml(block, sp, [("apply_patch", [("other", True, "x")])])]
    return outs


FINISHES = {"stop": "Stop", "length": "Length", "content_filter": "ContentFilter", None: None}


def normalize_times(text):
    text = re.sub(r'"created_at":\d+', '"created_at":0', text)
    return re.sub(r'"completed_at":\d+', '"completed_at":0', text)


def responses_events(body, output, chunk_chars, finish):
    r = dr.ResponsesRequest(json.dumps(body))
    echo = r.echo()
    ns_map = r.namespace_tool_map(dr.ConversionOptions())
    req = r.convert(dr.ConversionOptions())
    gen = dr.ResponsesRequest.chunk_generator(req, "resp-1", "model-x").with_echo(echo)
    if ns_map:
        gen = gen.with_namespace_tool_map(ns_map)
    sp = dr.StreamProcessor(gen, req.parsing_options)
    events = sp.push(dr.InferenceChunk.ready(
        prompt_usage=dr.PromptUsage(prompt_tokens=10, prompt_cache_hit_tokens=4), system_fingerprint="fp1"))
    step = chunk_chars or max(len(output), 1)
    tokens = 3 if not chunk_chars else 1
    for i in range(0, len(output), step):
        if sp.finished:
            break
        events += sp.push(dr.InferenceChunk.text(output[i:i + step], tokens))
    if not sp.finished and finish is not None:
        events += sp.push(dr.InferenceChunk.finish(getattr(dr.InferenceFinishReason, FINISHES[finish])))
    events += sp.finish()
    return events


def responses_parse_case(body, output, finish="stop"):
    events = responses_events(body, output, 0, finish)
    texts = [[dr.ResponsesResponse.sse_event_name(e), normalize_times(normalize_ids(e.to_json()))]
             for e in events]
    resp = dr.ResponsesResponse("resp-1", "model-x", 0, 10, 4)
    for e in events:
        resp.accumulate(e)
    streamed = responses_events(body, output, CHUNK_CHARS, finish)
    return {"request": body, "output": output, "finish": finish, "events": texts,
            "body": normalize_times(normalize_ids(resp.to_json())),
            # Fed CHUNK_CHARS characters at a time: the events between response.in_progress and
            # the final response event (those two carry the whole response, as in "events").
            "streamed_events": [[dr.ResponsesResponse.sse_event_name(e),
                                 normalize_times(normalize_ids(e.to_json()))] for e in streamed[2:-1]]}


def responses_cases():
    # Every response object is repeated whole in three events: V4 requests get a third of the
    # plain outputs to keep the file small.
    cases = []
    for r in responses_parse_requests():
        outs = parse_outputs() if r["model"] != MODEL_NAMES["v4"] else parse_outputs()[::3]
        cases += [responses_parse_case(r, o) for o in outs + responses_parse_outputs()]
    cases += [responses_parse_case(r, "Hi") for r in responses_echo_requests()]
    for r in responses_parse_requests()[:2]:
        for o in ("plan</think>Hello", "Hello", ""):
            cases += [responses_parse_case(r, o, f) for f in ("length", "content_filter", None)]
    return cases


PROMPT_IDS_OUT = OUT.parent / "prompt_ids.json"
DEEPSEEK_TOKENIZER = (Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "deepinfer" / "models"
                      / "deepseek-v4-tokenizer" / "tokenizer.json")


def prompt_ids(cases):
    """Token ids of the rendered golden prompts, as the reference encodes them with the DeepSeek V4
    tokenizer (special pieces as their ids, text never parsed for specials). V4.1 prompts with a
    <｜System｜> piece are left out: that tokenizer lacks the token (the reference fails too)."""
    tok = dr.Tokenizer.from_file(str(DEEPSEEK_TOKENIZER))
    encoders = {enc: e.with_tokenizer(tok) for enc, e in ENCODERS.items()}
    out = []
    for c in cases:
        # Protocol requests only: the C++ test feeds them to `deepinfer render --tokens`.
        if "conversation" not in c or "request" not in c:
            continue
        try:
            ids = encoders[c["encoding"]].encode(conversation_from_json(c["conversation"]))
        except Exception:  # noqa: BLE001 (the tokenizer has no <｜System｜>)
            continue
        out.append({"id": c["id"], "ids": list(ids)})
    return out


def main():
    rng = random.Random(20261130)
    cases = []
    convs = hand_cases()
    for _ in range(200):
        conv = rand_conversation(rng)
        convs.append((rng.choice(["v4", "v41"]), conv))
    convs += tool_order_cases()
    for enc, conv in convs:
        pconv = conversation_from_json(conv)
        # Store what the reference holds, so defaults are explicit for the C++ reader.
        case = {"encoding": enc, "conversation": conversation_to_json(pconv)}
        case.update(render(enc, pconv))
        cases.append(case)
    for proto, reqs in (("chat", chat_requests() + chat_validation_requests()),
                        ("responses", responses_requests() + responses_validation_requests()),
                        ("messages", messages_requests() + messages_validation_requests())):
        cases += [protocol_case(proto, r) for r in reqs]
    for i, c in enumerate(cases):
        c["id"] = i
    doc = {"reference": f"deepseek-recipe {dr.__version__}", "cases": cases}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n")
    parse_cases = [parse_case(r, o) for r in parse_requests() for o in parse_outputs()]
    PARSE_OUT.write_text(json.dumps({"reference": doc["reference"], "cases": parse_cases},
                                    ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"wrote {PARSE_OUT}: {len(parse_cases)} outputs")
    msg_cases = [messages_parse_case(r, o) for r in messages_parse_requests() for o in parse_outputs()]
    MESSAGES_PARSE_OUT.write_text(json.dumps({"reference": doc["reference"], "cases": msg_cases},
                                             ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"wrote {MESSAGES_PARSE_OUT}: {len(msg_cases)} outputs")
    resp_cases = responses_cases()
    RESPONSES_PARSE_OUT.write_text(json.dumps({"reference": doc["reference"], "cases": resp_cases},
                                              ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"wrote {RESPONSES_PARSE_OUT}: {len(resp_cases)} outputs")
    ids = prompt_ids(cases)
    PROMPT_IDS_OUT.write_text(json.dumps({"reference": doc["reference"], "tokenizer": "deepseek-v4-tokenizer",
                                          "cases": ids}, separators=(",", ":")) + "\n")
    print(f"wrote {PROMPT_IDS_OUT}: {len(ids)} prompts")
    n_err = sum("error" in c for c in cases)
    print(f"wrote {OUT}: {len(cases)} cases ({n_err} rejected requests)")


if __name__ == "__main__":
    main()
