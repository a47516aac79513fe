#!/usr/bin/env python3
"""Soak of `deepinfer serve` with faults: good traffic mixed with bad requests, vanishing clients
and overload bursts, for --minutes. It passes (exit 0) only if

  - no answer is a 5xx, and every good request succeeds (200 and a complete stream, or 429
    while a burst overloads the queue),
  - every bad request gets the 4xx its fault calls for (400, 401, 411, 413, 415, ...),
  - once the load stops, the server holds no KV block (deepinfer:kv_cache_group_blocks_used
    sums to 0 in /metrics) and no request is running or waiting,
  - the server's resident memory at the end is within --rss-slack-mib of its value after the
    warm-up (the first --warmup-fraction of the run): memory stays flat under faults.

Only the standard library is used. Start the server with a small queue so that bursts reach it,
and a KV cache small enough to be touched whole during the warm-up (the cache's pages are
first touched as blocks are first used, which reads as growth otherwise):

    build/bin/deepinfer serve --port 8000 --api-key K --max-queue 16 --kv-cache-tokens 8192 &
    python3 bench/fault_soak.py --url http://127.0.0.1:8000 --api-key K --minutes 30 --pid $!
"""
import argparse
import http.client
import json
import random
import socket
import sys
import threading
import time
from collections import Counter
from urllib.parse import urlparse

from soak import WORDS, percentile, rss_kib


def chat_body(args, rng, stream, max_tokens=None):
    topic = " ".join(rng.sample(WORDS, 3))
    body = {"model": args.model,
            "messages": [{"role": "user", "content": f"Write a short note about {topic}."}],
            "max_tokens": max_tokens or args.max_tokens, "temperature": 0.8, "stream": stream}
    return json.dumps(body).encode()


class Client:
    """One HTTP exchange at a time, with the key unless told otherwise."""

    def __init__(self, url, args):
        self.url, self.args = url, args
        self.host = f"{url.hostname}:{url.port or 80}"  # the server checks Host on loopback

    def headers(self, key=True, content_type="application/json"):
        h = {}
        if content_type:
            h["Content-Type"] = content_type
        if key and self.args.api_key:
            h["Authorization"] = f"Bearer {self.args.api_key}"
        return h

    def request(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection(self.url.hostname, self.url.port or 80, timeout=self.args.timeout)
        try:
            conn.request(method, path, body=body, headers=headers if headers is not None else self.headers())
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def raw(self, data, read=True):
        """Sends raw bytes; returns the status line's code (0 if the server closed first)."""
        with socket.create_connection((self.url.hostname, self.url.port or 80), timeout=self.args.timeout) as s:
            s.sendall(data)
            if not read:
                return 0
            try:
                first = s.recv(64)
            except (ConnectionResetError, socket.timeout):
                return 0
            parts = first.split(b" ")
            return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


class Outcomes:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_kind = Counter()  # (kind, status) -> count
        self.failures = []
        self.e2e = []

    def record(self, kind, status, ok, detail=""):
        with self.lock:
            self.by_kind[(kind, status)] += 1
            if not ok:
                self.failures.append(f"{kind}: {status} {detail}"[:300])


def good_stream(c, rng, out, overloaded):
    start = time.perf_counter()
    conn = http.client.HTTPConnection(c.url.hostname, c.url.port or 80, timeout=c.args.timeout)
    try:
        conn.request("POST", "/v1/chat/completions", body=chat_body(c.args, rng, True), headers=c.headers())
        resp = conn.getresponse()
        if resp.status != 200:
            body = resp.read()
            out.record("good_stream", resp.status, resp.status == 429 and overloaded.is_set(), body[:200])
            return
        done = any(raw.strip() == b"data: [DONE]" for raw in resp)
        out.record("good_stream", 200, done, "stream ended without [DONE]")
        with out.lock:
            out.e2e.append(time.perf_counter() - start)
    finally:
        conn.close()


def good_completion(c, rng, out, overloaded):
    body = json.dumps({"model": c.args.model, "prompt": "The river " + " ".join(rng.sample(WORDS, 4)),
                       "max_tokens": 8, "temperature": 0}).encode()
    status, answer = c.request("POST", "/v1/completions", body)
    ok = (status == 200 and b'"choices"' in answer) or (status == 429 and overloaded.is_set())
    out.record("good_completion", status, ok, answer[:200])


def vanish_mid_stream(c, rng, out, overloaded):
    """Reads the first event, then drops the connection without a word."""
    with socket.create_connection((c.url.hostname, c.url.port or 80), timeout=c.args.timeout) as s:
        body = chat_body(c.args, rng, True, max_tokens=256)
        head = "".join(f"{k}: {v}\r\n" for k, v in c.headers().items())
        s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {c.host}\r\n{head}Content-Length: {len(body)}\r\n\r\n"
                  .encode() + body)
        first = s.recv(256)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
    status = int(first.split(b" ")[1]) if first.startswith(b"HTTP/1.1 ") else 0
    out.record("vanish_mid_stream", status, status in (200, 429), first[:100])


def vanish_mid_body(c, rng, out, overloaded):
    """Announces a body, sends half, leaves."""
    body = chat_body(c.args, rng, False)
    head = "".join(f"{k}: {v}\r\n" for k, v in c.headers().items())
    c.raw(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {c.host}\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode()
          + body[: len(body) // 2], read=False)
    out.record("vanish_mid_body", 0, True)


# Bad requests and the status each must get. A 400 must name what was wrong.
def bad_requests(args):
    m = args.model
    msgs = [{"role": "user", "content": "hi"}]
    bad = [
        ("bad_json", "/v1/chat/completions", b'{"model": "x", "messages": [', 400),
        ("bad_temperature", "/v1/completions", {"model": m, "prompt": "a", "temperature": "x"}, 400),
        ("bad_max_tokens", "/v1/chat/completions", {"model": m, "messages": msgs, "max_tokens": -5}, 400),
        ("huge_max_tokens", "/v1/completions", {"model": m, "prompt": "a", "max_tokens": 9223372036854775807},
         400),
        ("bad_top_k", "/v1/chat/completions", {"model": m, "messages": msgs, "top_k": 4294967296}, 400),
        ("bad_logit_bias", "/v1/chat/completions", {"model": m, "messages": msgs,
                                                    "logit_bias": {"4294967296": 5}}, 400),
        ("messages_no_max_tokens", "/v1/messages", {"model": m, "messages": msgs}, 400),
        ("bad_role", "/v1/chat/completions", {"model": m, "messages": [{"role": "wizard", "content": "x"}]}, 400),
        ("not_found", "/v1/nothing", {"model": m}, 404),
    ]
    return bad


def bad_request(c, rng, out, overloaded):
    kind, path, body, want = rng.choice(bad_requests(c.args))
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, answer = c.request("POST", path, data)
    out.record(kind, status, status == want or (status == 429 and overloaded.is_set()), answer[:200])


def keyless(c, rng, out, overloaded):
    if not c.args.api_key:
        return
    status, answer = c.request("POST", "/v1/chat/completions", chat_body(c.args, rng, False),
                               headers=c.headers(key=False))
    out.record("keyless", status, status == 401, answer[:200])


def wrong_content_type(c, rng, out, overloaded):
    status, answer = c.request("POST", "/v1/chat/completions", chat_body(c.args, rng, False),
                               headers=c.headers(content_type="text/plain"))
    out.record("wrong_content_type", status, status in (400, 415), answer[:200])


def smuggling(c, rng, out, overloaded):
    key = f"Authorization: Bearer {c.args.api_key}\r\n" if c.args.api_key else ""
    status = c.raw(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {c.host}\r\nTransfer-Encoding: gzip\r\n".encode()
                   + key.encode() + b"Content-Type: application/json\r\nContent-Length: 5\r\n\r\nhello")
    out.record("smuggling", status, 400 <= status < 500, "")


FAULTS = [(good_stream, 30), (good_completion, 20), (vanish_mid_stream, 8), (vanish_mid_body, 4),
          (bad_request, 20), (keyless, 6), (wrong_content_type, 4), (smuggling, 4)]


def burst(c, args, out, overloaded, stop):
    """Every --burst-every seconds, --burst-size streamed requests at once: the queue overflows."""
    rng = random.Random(7)
    while not stop.wait(args.burst_every):
        overloaded.set()
        threads = [threading.Thread(target=good_stream, args=(c, random.Random(rng.random()), out, overloaded))
                   for _ in range(args.burst_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        overloaded.clear()


def metric_sum(text, name):
    total = None
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--burst-every", type=float, default=60.0)
    ap.add_argument("--burst-size", type=int, default=96)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--pid", type=int, default=0, help="server process id, for its resident memory")
    ap.add_argument("--warmup-fraction", type=float, default=0.2)
    ap.add_argument("--rss-slack-mib", type=float, default=32.0)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    c = Client(urlparse(args.url), args)
    out = Outcomes()
    overloaded, stop = threading.Event(), threading.Event()
    t0 = time.perf_counter()
    deadline = t0 + args.minutes * 60.0
    rss_samples = []  # (seconds since start, KiB)

    def worker(seed):
        rng = random.Random(seed)
        kinds, weights = zip(*FAULTS)
        while time.perf_counter() < deadline:
            fault = rng.choices(kinds, weights)[0]
            try:
                fault(c, rng, out, overloaded)
            except Exception as e:  # noqa: BLE001 - a broken exchange is a failure to report
                out.record(fault.__name__, -1, False, f"{type(e).__name__}: {e}")

    def sampler():
        while not stop.wait(5.0):
            kib = rss_kib(args.pid)
            if kib:
                rss_samples.append((time.perf_counter() - t0, kib))

    helpers = [threading.Thread(target=burst, args=(c, args, out, overloaded, stop), daemon=True),
               threading.Thread(target=sampler, daemon=True)]
    workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(args.concurrency)]
    for t in helpers + workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    for t in helpers:
        t.join()
    elapsed = time.perf_counter() - t0

    # Idle: every request has ended; the server must hold nothing.
    leaked_blocks, running = None, None
    for _ in range(60):
        status, text = c.request("GET", "/metrics", headers=c.headers(content_type=None))
        text = text.decode()
        leaked_blocks = metric_sum(text, "deepinfer:kv_cache_group_blocks_used")
        running = (metric_sum(text, "deepinfer:num_requests_running") or 0) + \
                  (metric_sum(text, "deepinfer:num_requests_waiting") or 0)
        if leaked_blocks == 0 and running == 0:
            break
        time.sleep(1.0)

    warm = [kib for t, kib in rss_samples if t >= elapsed * args.warmup_fraction]
    rss_after_warmup = warm[0] / 1024.0 if warm else None
    rss_end = (rss_kib(args.pid) or 0) / 1024.0 or None
    rss_max = max(kib for _, kib in rss_samples) / 1024.0 if rss_samples else None
    n_5xx = sum(n for (kind, status), n in out.by_kind.items() if status >= 500)
    result = {
        "minutes": round(elapsed / 60.0, 2), "concurrency": args.concurrency,
        "exchanges": sum(out.by_kind.values()), "answers_5xx": n_5xx, "failures": len(out.failures),
        "by_kind": {f"{k} {s}": n for (k, s), n in sorted(out.by_kind.items())},
        "good_e2e_ms": {p: round(percentile(out.e2e, p) * 1000.0, 1) for p in (50, 99)},
        "kv_blocks_used_at_idle": leaked_blocks, "requests_in_flight_at_idle": running,
        "rss_mib_after_warmup": round(rss_after_warmup, 1) if rss_after_warmup else None,
        "rss_mib_end": round(rss_end, 1) if rss_end else None,
        "rss_mib_max": round(rss_max, 1) if rss_max else None,
        # RSS at the start of each tenth of the run: growth that stops is first touch, growth that
        # goes on is a leak.
        "rss_mib_by_tenth": [round(next((kib for t, kib in rss_samples if t >= elapsed * k / 10), 0) / 1024.0, 1)
                             for k in range(10)],
        "first_failures": out.failures[:10],
    }
    rss_flat = rss_after_warmup is None or rss_end is None or rss_end - rss_after_warmup <= args.rss_slack_mib
    passed = n_5xx == 0 and not out.failures and leaked_blocks == 0 and running == 0 and rss_flat
    result["passed"] = passed
    if args.json:
        print(json.dumps(result))
    else:
        print(json.dumps(result, indent=1))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
