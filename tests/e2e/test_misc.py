"""tokenize/detokenize, health, CORS: the small endpoints around the generating ones."""
import json

from conftest import MODEL, start_server, stop_server


def test_tokenize_round_trip(server, openai_client):
    status, _, data = server.request("POST", "/tokenize", {"prompt": "Hello, world!"})
    assert status == 200
    reply = json.loads(data)
    assert reply["count"] == len(reply["tokens"]) > 0
    assert reply["max_model_len"] == 8192
    status, _, data = server.request("POST", "/detokenize", {"tokens": reply["tokens"]})
    assert status == 200 and json.loads(data)["prompt"] == "Hello, world!"
    # A chat request's prompt is counted as the server renders it.
    messages = [{"role": "user", "content": "Hi there"}]
    status, _, data = server.request("POST", "/tokenize", {"messages": messages})
    assert status == 200
    chat = openai_client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1, temperature=0)
    assert json.loads(data)["count"] == chat.usage.prompt_tokens


def test_health_and_cors_preflight(server):
    status, headers, data = server.request("GET", "/health", headers={"Authorization": ""})
    assert status == 200 and json.loads(data)["status"] == "ok"
    # CORS is off by default: a page of another origin is refused, preflight or not.
    preflight = {"Authorization": "", "Origin": "http://example.test", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type"}
    status, headers, _ = server.request("OPTIONS", "/v1/chat/completions", headers=preflight)
    assert status == 403 and "Access-Control-Allow-Origin" not in headers
    # A DNS-rebinding page reaches the loopback server under its own name.
    status, _, data = server.request("GET", "/health", headers={"Host": "rebind.example.test"})
    assert status == 403 and b"--allowed-hosts" in data


def test_allowed_origins_and_hosts_flags():
    srv = start_server("--allowed-origins", "http://example.test", "--allowed-hosts", "my.box")
    try:
        status, headers, _ = srv.request("OPTIONS", "/v1/chat/completions", headers={
            "Authorization": "", "Origin": "http://example.test", "Access-Control-Request-Method": "POST"})
        assert status == 204
        assert headers.get("Access-Control-Allow-Origin") == "http://example.test"
        assert "POST" in headers.get("Access-Control-Allow-Methods", "")
        assert srv.request("GET", "/health", headers={"Host": "my.box:8000"})[0] == 200
    finally:
        stop_server(srv)


def test_a_server_with_a_draft_model_drafts_and_says_so():
    """--draft-model (here the served model drafting for itself): /v1/info names the method and
    the draft, greedy answers equal the plain server's, and /metrics counts the draft method."""
    srv = start_server("--draft-model", MODEL)
    try:
        status, _, data = srv.request("GET", "/v1/info")
        assert status == 200
        spec = json.loads(data)["engine"]["speculative"]
        assert spec["method"] == "draft" and spec["draft_model_file"].endswith(".gguf")
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Name three colours."}],
                "max_tokens": 40, "temperature": 0}
        status, _, data = srv.request("POST", "/v1/chat/completions", body)
        assert status == 200
        drafted = json.loads(data)["choices"][0]["message"]["content"]
    finally:
        metrics = srv.metrics()
        stop_server(srv)
    plain = start_server()
    try:
        status, _, data = plain.request("POST", "/v1/chat/completions", body)
        assert status == 200 and json.loads(data)["choices"][0]["message"]["content"] == drafted
    finally:
        stop_server(plain)
    assert 'deepinfer:spec_decode_mean_acceptance_length{method="draft"}' in metrics
