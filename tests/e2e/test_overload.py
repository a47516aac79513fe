"""The overload policy and graceful shutdown, on a server of its own with room for one request."""
import json
import threading
import time

from conftest import MODEL, start_server, stop_server


def test_full_queue_answers_429_with_retry_after():
    srv = start_server("--max-num-seqs", "1", "--max-queue", "0")
    try:
        long_request = {"model": MODEL, "max_tokens": 24, "temperature": 0, "ignore_eos": True,
                        "messages": [{"role": "user", "content": "Tell me a long story."}]}
        first = {}
        t = threading.Thread(target=lambda: first.update(
            zip(("status", "headers", "body"), srv.request("POST", "/v1/chat/completions", long_request))))
        t.start()
        deadline = time.time() + 30
        while srv.metrics().get("deepinfer:api_requests_in_flight", 0) < 1 and time.time() < deadline:
            time.sleep(0.02)
        status, headers, body = srv.request("POST", "/v1/chat/completions", dict(long_request, max_tokens=2))
        assert status == 429, body
        assert headers.get("Retry-After") == "1"
        assert json.loads(body)["error"]["type"] == "rate_limit_error"
        status, _, body = srv.request("POST", "/v1/messages", dict(long_request, max_tokens=2))
        assert status == 429
        assert json.loads(body)["type"] == "error"
        t.join()
        assert first["status"] == 200
        assert srv.metrics()["deepinfer:request_rejected_total"] == 2
    finally:
        stop_server(srv)


def test_sigterm_lets_the_request_in_flight_finish():
    srv = start_server("--shutdown-timeout", "60")
    result = {}
    request = {"model": MODEL, "max_tokens": 16, "temperature": 0, "ignore_eos": True,
               "messages": [{"role": "user", "content": "Count to twenty."}]}
    t = threading.Thread(target=lambda: result.update(
        zip(("status", "headers", "body"), srv.request("POST", "/v1/chat/completions", request))))
    t.start()
    deadline = time.time() + 30
    while srv.metrics().get("deepinfer:api_requests_in_flight", 0) < 1 and time.time() < deadline:
        time.sleep(0.02)
    stop_server(srv)  # SIGTERM, then requires exit code 0
    t.join()
    assert result["status"] == 200
    assert json.loads(result["body"])["usage"]["completion_tokens"] == 16
