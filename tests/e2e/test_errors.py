"""Errors in each protocol's shape, and bad input that must not hurt anyone else."""
import socket
import time

import anthropic
import openai
import pytest
from conftest import API_KEY, MODEL

MESSAGES = [{"role": "user", "content": "Hi"}]


def assert_openai_shape(body):
    assert set(body["error"]) >= {"message", "type", "param", "code"}, body
    assert body["error"]["message"]


def assert_anthropic_shape(body):
    assert body["type"] == "error", body
    assert body["error"]["type"] and body["error"]["message"], body


def test_malformed_json(server):
    status, _, data = server.request("POST", "/v1/chat/completions", b'{"model": "x", "messages": [',
                                     {"Content-Type": "application/json"})
    assert status == 400
    import json
    assert_openai_shape(json.loads(data))
    status, _, data = server.request("POST", "/v1/messages", b'{"model": ', {"Content-Type": "application/json"})
    assert status == 400
    assert_anthropic_shape(json.loads(data))


def test_unknown_model(openai_client, anthropic_client):
    with pytest.raises(openai.NotFoundError) as e:
        openai_client.chat.completions.create(model="no-such-model", messages=MESSAGES, max_tokens=2)
    assert_openai_shape(e.value.response.json())
    with pytest.raises(anthropic.NotFoundError) as e:
        anthropic_client.messages.create(model="no-such-model", max_tokens=2, messages=MESSAGES)
    assert_anthropic_shape(e.value.response.json())


def test_wrong_key(server):
    bad_openai = openai.OpenAI(base_url=server.base_url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad_openai.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
    assert e.value.status_code == 401
    assert_openai_shape(e.value.response.json())
    bad_anthropic = anthropic.Anthropic(base_url=server.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad_anthropic.messages.create(model=MODEL, max_tokens=2, messages=MESSAGES)
    assert_anthropic_shape(e.value.response.json())
    # Health and metrics stay public.
    assert server.request("GET", "/health", headers={"Authorization": "Bearer wrong"})[0] == 200


def test_prompt_over_context(openai_client, anthropic_client):
    huge = "hello " * 9000  # SmolLM2's context is 8192 tokens
    with pytest.raises(openai.BadRequestError) as e:
        openai_client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": huge}], max_tokens=2)
    assert "context length" in e.value.message
    assert_openai_shape(e.value.response.json())
    with pytest.raises(anthropic.BadRequestError) as e:
        anthropic_client.messages.create(model=MODEL, max_tokens=2, messages=[{"role": "user", "content": huge}])
    assert_anthropic_shape(e.value.response.json())


def raw_exchange(server, payload, shut_write=False, timeout=10):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    s.sendall(payload)
    if shut_write:
        s.shutdown(socket.SHUT_WR)
    data = b""
    try:
        while True:
            piece = s.recv(65536)
            if not piece:
                break
            data += piece
            if b"\r\n\r\n" in data and not shut_write:
                break
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    return data


def status_of(response):
    return int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.1 ") else None


def post(path, body, content_type="application/json", length=None):
    length = len(body) if length is None else length
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {API_KEY}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n").encode()
    return head + body


def test_bad_input_keeps_serving(server, openai_client):
    chat = b'{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}' % MODEL.encode()
    # Truncated body: the connection ends before Content-Length bytes arrived.
    raw_exchange(server, post("/v1/chat/completions", chat[:20], length=len(chat)), shut_write=True)
    # Wrong content type.
    assert status_of(raw_exchange(server, post("/v1/chat/completions", chat, "text/plain"))) == 415
    # Invalid UTF-8 inside a JSON string.
    bad_utf8 = chat.replace(b"hi", b"h\xff\xfei")
    assert status_of(raw_exchange(server, post("/v1/chat/completions", bad_utf8))) == 400
    # Deeply nested JSON.
    assert status_of(raw_exchange(server, post("/v1/chat/completions", b"[" * 200000 + b"]" * 200000))) == 400
    # Huge headers.
    huge = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n"
    assert status_of(raw_exchange(server, huge)) == 431
    # Body over the limit (announced): refused without reading it.
    assert status_of(raw_exchange(server, post("/v1/chat/completions", b"", length=1 << 30))) == 413
    # Fields of the wrong type are the client's error, never the server's.
    for path, body in (("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 1, "stream": "yes",
                                            "echo": 3, "stream_options": [1], "logprobs": "x"}),
                       ("/v1/chat/completions", {"model": MODEL, "messages": "hi", "stream": 5}),
                       ("/v1/messages", {"model": MODEL, "max_tokens": "2", "messages": [{"role": 3}]}),
                       ("/tokenize", {"prompt": 5, "add_special_tokens": "no"}),
                       ("/detokenize", {"tokens": ["a", -1]})):
        status, _, data = server.request("POST", path, body)
        assert 400 <= status < 500, (path, status, data)
    # Everyone else is still served.
    assert server.request("GET", "/health")[0] == 200
    r = openai_client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2, temperature=0)
    assert r.choices[0].message.content is not None


def test_slow_clients_get_408_while_others_are_served(server, openai_client):
    # One never finishes its headers, one its body, one trickles a byte at a time for longer
    # than the read timeout: a deadline on the whole request, not on each read.
    chat = b'{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}' % MODEL.encode()
    slow_head = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    slow_head.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")  # and nothing more
    slow_body = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    slow_body.sendall(post("/v1/chat/completions", chat)[:-10])  # all but the last 10 bytes
    trickle = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    trickle_bytes = post("/v1/chat/completions", chat)
    start = time.time()
    r = openai_client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2, temperature=0)
    assert r.choices[0].message.content is not None
    sent = 0
    trickle.settimeout(0.5)
    answer = b""
    while sent < len(trickle_bytes) and time.time() - start < 5 + 10:
        try:
            trickle.sendall(trickle_bytes[sent:sent + 1])
        except OSError:
            break
        sent += 1
        try:
            answer = trickle.recv(4096)
            if answer:
                break
        except socket.timeout:
            pass
    for s, data in ((slow_head, b""), (slow_body, b""), (trickle, answer)):
        while b"\r\n\r\n" not in data:
            piece = s.recv(4096)
            if not piece:
                break
            data += piece
        s.close()
        assert status_of(data) == 408, data
    assert time.time() - start < 5 + 10  # the server's --read-timeout plus a margin
