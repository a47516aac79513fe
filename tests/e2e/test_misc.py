"""tokenize/detokenize, health, CORS: the small endpoints around the generating ones."""
import json

from conftest import MODEL


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
    status, headers, _ = server.request("OPTIONS", "/v1/chat/completions", headers={
        "Authorization": "", "Origin": "http://example.test", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert status == 204
    assert headers.get("Access-Control-Allow-Origin") == "*"
    assert "POST" in headers.get("Access-Control-Allow-Methods", "")
