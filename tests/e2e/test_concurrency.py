"""Many clients at once: each gets exactly its own text; vanished clients leave nothing behind."""
import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from conftest import API_KEY, MODEL, wait_idle

TOPICS = ["cats", "the sea", "mountains", "bread", "trains", "winter", "music", "gardens"]


def ask(client, topic, max_tokens=8):
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": f"Write one sentence about {topic}."}],
        max_tokens=max_tokens, temperature=0, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def test_64_concurrent_streams_get_their_own_text(openai_client, server):
    alone = {topic: ask(openai_client, topic) for topic in TOPICS}
    assert len(set(alone.values())) > len(TOPICS) // 2, "prompts too alike to tell answers apart"
    jobs = [TOPICS[i % len(TOPICS)] for i in range(64)]
    random.Random(7).shuffle(jobs)
    with ThreadPoolExecutor(max_workers=64) as pool:
        results = list(pool.map(lambda t: (t, ask(openai_client, t)), jobs))
    mismatched = [(t, got, alone[t]) for t, got in results if got != alone[t]]
    assert not mismatched, mismatched[:3]
    m = wait_idle(server)
    assert m["deepinfer:num_requests_running"] == 0


def vanish(port, seed):
    """Sends a streaming request and hangs up at a random moment."""
    rng = random.Random(seed)
    body = ('{"model": "%s", "stream": true, "max_tokens": 32, "temperature": 0, "messages": '
            '[{"role": "user", "content": "Tell me about %s."}]}' % (MODEL, TOPICS[seed % len(TOPICS)])).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {API_KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        s.sendall(head + body)
        wanted = rng.choice([0, 0, 1, 200, 800, 3000])  # bytes of the answer to read before leaving
        got = 0
        while got < wanted:
            piece = s.recv(wanted - got)
            if not piece:
                break
            got += len(piece)
    finally:
        s.close()


def test_200_vanishing_clients_leave_nothing(server, openai_client):
    log_start = len(server.log())
    threads = [threading.Thread(target=vanish, args=(server.port, i)) for i in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    m = wait_idle(server, timeout=30)
    assert m["deepinfer:num_requests_running"] == 0, m
    assert m["deepinfer:num_requests_waiting"] == 0, m
    assert m["deepinfer:kv_cache_blocks_used"] == 0, m
    assert m["deepinfer:api_requests_in_flight"] == 0, m
    # A client that left is logged as nginx's 499 (client closed request), never as a 500.
    deadline = time.time() + 5  # a handler logs its line just after it leaves the in-flight count
    while True:
        lines = [line for line in server.log()[log_start:].splitlines() if " POST /v1/chat/completions " in line]
        if len(lines) >= 200 or time.time() > deadline:
            break
        time.sleep(0.05)
    assert len(lines) == 200, lines[-5:]
    assert not [line for line in lines if " 500 " in line], lines
    assert [line for line in lines if " 499 " in line]
    # And the server still answers.
    assert ask(openai_client, "cats", max_tokens=2)


def test_metrics_exposition(server, openai_client):
    ask(openai_client, "bees", max_tokens=4)
    m = server.metrics()
    for name in ("deepinfer:prompt_tokens_total", "deepinfer:generation_tokens_total",
                 "deepinfer:prefix_cache_queries_total", "deepinfer:prefix_cache_hits_total",
                 "deepinfer:kv_cache_usage_perc", "deepinfer:time_to_first_token_seconds_count",
                 "deepinfer:inter_token_latency_seconds_count", "deepinfer:e2e_request_latency_seconds_count",
                 "deepinfer:request_queue_time_seconds_count"):
        assert name in m, name
    assert m["deepinfer:generation_tokens_total"] > 0
    assert m["deepinfer:time_to_first_token_seconds_count"] > 0
    # The engine's step time: passes and the time spent in them, decode-only steps apart.
    assert m["deepinfer:engine_steps_total"] >= 2  # a prefill, then decode steps
    assert m["deepinfer:engine_forward_seconds_total"] > 0
    assert m["deepinfer:engine_overhead_seconds_total"] >= 0
    assert 0 < m["deepinfer:engine_decode_steps_total"] < m["deepinfer:engine_steps_total"]
    assert m["deepinfer:engine_decode_step_tokens_total"] >= m["deepinfer:engine_decode_steps_total"]
    assert 0 < m["deepinfer:engine_decode_step_seconds_total"] <= (m["deepinfer:engine_forward_seconds_total"] +
                                                                   m["deepinfer:engine_overhead_seconds_total"])
