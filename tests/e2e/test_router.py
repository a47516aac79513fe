"""`deepinfer router` in front of two real `deepinfer serve` replicas on loopback, driven by the
official OpenAI and Anthropic clients: pass-through (streamed and not), prefix affinity, and a
replica killed with SIGKILL under load (in-flight requests fail cleanly or are retried, the
others succeed, the replica is ejected and re-admitted when it returns)."""
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import API_KEY, MODEL, Server, _binary, start_server, stop_server, wait_listening

REPLICA_ARGS = ("--threads", "1", "--max-num-seqs", "8", "--shutdown-timeout", "5")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_router(*replica_urls, extra=()):
    log = tempfile.NamedTemporaryFile(prefix="deepinfer-router-", suffix=".log", delete=False)
    args = [_binary(), "router", "--port", "0", "--health-interval", "0.2", *extra]
    for url in replica_urls:
        args += ["--replica", url]
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    return wait_listening(proc, log.name, "router", 20)


def by_label(metrics, name):
    """{label value: number} of one labelled family."""
    out = {}
    for key, value in metrics.items():
        m = re.fullmatch(re.escape(name) + r'\{\w+="([^"]*)"\}', key)
        if m:
            out[m.group(1)] = value
    return out


def wait_for(predicate, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def cluster():
    ports = [free_port(), free_port()]
    replicas = [start_server(*REPLICA_ARGS, "--port", str(p)) for p in ports]
    router = start_router(*(r.base_url for r in replicas))
    state = {"replicas": replicas, "router": router, "ports": ports}
    yield state
    router.proc.send_signal(signal.SIGTERM)
    assert router.proc.wait(timeout=30) == 0, router.log()[-3000:]
    for r in state["replicas"]:
        if r.proc.poll() is None:
            stop_server(r)


def clients(base_url):
    import anthropic
    import openai
    return (openai.OpenAI(base_url=base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120),
            anthropic.Anthropic(base_url=base_url, api_key=API_KEY, max_retries=0, timeout=120))


def test_official_clients_through_the_router_match_a_replica(cluster):
    router, replica = cluster["router"], cluster["replicas"][0]
    oa_router, an_router = clients(router.base_url)
    oa_direct, an_direct = clients(replica.base_url)
    messages = [{"role": "user", "content": "Name three colours."}]
    direct = oa_direct.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, temperature=0)
    routed = oa_router.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, temperature=0)
    assert routed.choices[0].message.content == direct.choices[0].message.content
    pieces = [c.choices[0].delta.content or "" for c in oa_router.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=12, temperature=0, stream=True) if c.choices]
    assert len(pieces) > 2, "streamed chunk by chunk, not as one body"
    assert "".join(pieces) == direct.choices[0].message.content
    greedy = {"temperature": 0}  # this client version has no temperature argument
    whole = an_direct.messages.create(model=MODEL, max_tokens=12, messages=messages, extra_body=greedy)
    with an_router.messages.stream(model=MODEL, max_tokens=12, messages=messages, extra_body=greedy) as stream:
        text = "".join(stream.text_stream)
    assert text == whole.content[0].text
    import openai
    with pytest.raises(openai.NotFoundError) as e:  # the replica's error, in OpenAI's shape
        oa_router.chat.completions.create(model="no-such-model", messages=messages, max_tokens=2)
    assert "no-such-model" in str(e.value)


def test_a_conversation_follows_its_cache(cluster):
    router = cluster["router"]
    oa, _ = clients(router.base_url)
    system = "You are the support assistant of a bicycle shop. " * 12
    history = [{"role": "system", "content": system}]
    before = router.metrics()
    for turn in range(3):
        history.append({"role": "user", "content": f"Question {turn}: what should I check on my brakes?"})
        reply = oa.chat.completions.create(model=MODEL, messages=history, max_tokens=6, temperature=0)
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    after = router.metrics()
    hits = after['deepinfer_router:decisions_total{reason="cache_hit"}'] - before.get(
        'deepinfer_router:decisions_total{reason="cache_hit"}', 0)
    assert hits >= 2, "turns 2 and 3 go where turn 1 went"
    # The replicas confirm: the prefix was found in their cache (scraped each health interval).
    assert wait_for(lambda: sum(by_label(router.metrics(), "deepinfer_router:actual_hit_tokens_total").values()) > 100)
    # Each answer names the replica that served it and why; the next turn goes to the same one.
    served = []
    for stream in (False, True):
        history.append({"role": "user", "content": "And the chain?"})
        status, headers, _ = router.request("POST", "/v1/chat/completions", {
            "model": MODEL, "messages": history, "max_tokens": 4, "temperature": 0, "stream": stream})
        headers = {k.lower(): v for k, v in headers.items()}
        assert status == 200
        assert headers["x-deepinfer-route"] == "cache_hit", headers
        served.append(headers["x-deepinfer-replica"])
    assert served[0] == served[1] and served[0] in [r.base_url for r in cluster["replicas"]], served


def test_sigkill_under_load_fails_cleanly_and_the_replica_comes_back(cluster):
    import openai
    router = cluster["router"]
    oa, _ = clients(router.base_url)
    results = []
    progress = [0]  # streamed chunks so far, all requests together
    lock = threading.Lock()
    retries_before = router.metrics()["deepinfer_router:retries_total"]

    def one(i):
        try:
            stream = oa.chat.completions.create(
                model=MODEL, max_tokens=48, temperature=0, stream=True, extra_body={"ignore_eos": True},
                stream_options={"include_usage": True},
                messages=[{"role": "user", "content": f"Story number {i}: tell me a long story."}])
            n = 0
            for c in stream:
                if c.usage:
                    n = c.usage.completion_tokens
                if c.choices and c.choices[0].delta.content:
                    with lock:
                        progress[0] += 1
            outcome = ("ok", n)
        except openai.APIError as e:
            outcome = ("error", str(e))
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    victim_url = cluster["replicas"][0].base_url
    # Killed while streams run (so some of its requests are past their first byte) and while
    # it holds requests.
    assert wait_for(lambda: progress[0] >= 8 and by_label(
        router.metrics(), "deepinfer_router:replica_in_flight").get(victim_url, 0) > 0, 30)
    cluster["replicas"][0].proc.send_signal(signal.SIGKILL)
    cluster["replicas"][0].proc.wait(timeout=10)
    # New requests while the dead replica may still look healthy: all succeed (failover).
    for i in range(3):
        r = oa.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"hi {i}"}], max_tokens=2)
        assert r.choices[0].message.content is not None
    for t in threads:
        t.join(timeout=120)
    assert len(results) == 6
    errors = [detail for kind, detail in results if kind == "error"]
    m = router.metrics()
    # The victim's requests either failed with the router's error event (bytes had gone out) or
    # were retried on the survivor (none had); the survivor's own all succeeded.
    assert len(errors) + m["deepinfer_router:retries_total"] - retries_before >= 1, results
    assert len(errors) < 6, results
    for detail in errors:
        assert "failed mid-stream" in detail, detail
    assert all(n == 48 for kind, n in results if kind == "ok"), results
    assert by_label(m, "deepinfer_router:ejections_total")[victim_url] >= 1
    assert by_label(m, "deepinfer_router:replica_healthy")[victim_url] == 0
    assert by_label(m, "deepinfer_router:replica_in_flight")[victim_url] == 0, "no leaked in-flight count"
    # The replica returns on its port: re-admitted, and serving again.
    cluster["replicas"][0] = start_server(*REPLICA_ARGS, "--port", str(cluster["ports"][0]))
    assert wait_for(lambda: by_label(router.metrics(), "deepinfer_router:replica_healthy")[victim_url] == 1, 20)
    assert by_label(router.metrics(), "deepinfer_router:readmissions_total")[victim_url] >= 1
    before = by_label(router.metrics(), "deepinfer_router:requests_total")[victim_url]

    def victim_served():
        return by_label(router.metrics(), "deepinfer_router:requests_total")[victim_url] > before

    # Short prompts match nowhere, so they go to the least loaded replica, ties to
    # the one routed least so far. The module's earlier tests may have routed more to the victim
    # (in one CI run the victim had 11 and all 4 requests of an earlier version went to the survivor), so
    # the survivor may take several of these before the counts cross; 40 bounds that.
    for i in range(40):
        oa.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"again {i}"}], max_tokens=2)
        if victim_served():
            break
    assert victim_served(), by_label(router.metrics(), "deepinfer_router:requests_total")
