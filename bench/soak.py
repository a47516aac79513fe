#!/usr/bin/env python3
"""Soak test of `deepinfer serve`: steady streaming load from this separate process.

Keeps --concurrency clients busy for --minutes, each sending streamed chat completions one
after another (prompts vary, so the prefix cache sees hits and misses), and reports request
rate, TTFT and inter-token latency percentiles, errors (any non-200 answer, broken stream or
timeout), and the server's resident memory at start and end (VmRSS of --pid). Only the
standard library is used, so it runs from any Python 3.9+.

    build/bin/deepinfer serve --port 8000 &
    python3 bench/soak.py --url http://127.0.0.1:8000 --minutes 10 --concurrency 8 --pid $!
"""
import argparse
import http.client
import json
import random
import sys
import threading
import time
from urllib.parse import urlparse

WORDS = ("river mountain bread train winter music garden clock bee library rain chess lantern "
         "bridge harbor forest desert comet violin candle meadow glacier canyon orchard").split()


def rss_kib(pid):
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ttft, self.itl, self.e2e = [], [], []
        self.ok = 0
        self.errors = []
        self.tokens = 0


def one_request(url, args, rng, stats):
    topic = " ".join(rng.sample(WORDS, 3))
    body = json.dumps({
        "model": args.model,
        "messages": [{"role": "system", "content": "You are a concise assistant."},
                     {"role": "user", "content": f"Write a short note about {topic}."}],
        "max_tokens": args.max_tokens, "temperature": 0.8, "stream": True,
        "stream_options": {"include_usage": True}})
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"
    start = time.perf_counter()
    conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=args.timeout)
    try:
        conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
        first, last, gaps, n_chunks, done = None, None, [], 0, False
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            delta = chunk["choices"][0]["delta"] if chunk.get("choices") else {}
            if delta.get("content"):
                now = time.perf_counter()
                if first is None:
                    first = now
                else:
                    gaps.append(now - last)
                last = now
                n_chunks += 1
        if not done:
            raise RuntimeError("stream ended without [DONE]")
        end = time.perf_counter()
        with stats.lock:
            stats.ok += 1
            stats.tokens += n_chunks
            if first is not None:
                stats.ttft.append(first - start)
            stats.itl.extend(gaps)
            stats.e2e.append(end - start)
    except Exception as e:  # noqa: BLE001 - every failure is an error to count
        with stats.lock:
            stats.errors.append(f"{type(e).__name__}: {e}")
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--pid", type=int, default=0, help="server process id, for its resident memory")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    url = urlparse(args.url)

    stats = Stats()
    rss_start = rss_kib(args.pid)
    t0 = time.perf_counter()
    deadline = t0 + args.minutes * 60.0

    def client(seed):
        rng = random.Random(seed)
        while time.perf_counter() < deadline:
            one_request(url, args, rng, stats)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    rss_end = rss_kib(args.pid)

    ms = lambda v: round(v * 1000.0, 1)  # noqa: E731
    result = {
        "minutes": round(elapsed / 60.0, 2), "concurrency": args.concurrency, "max_tokens": args.max_tokens,
        "requests_ok": stats.ok, "errors": len(stats.errors),
        "requests_per_second": round(stats.ok / elapsed, 3),
        "output_chunks_per_second": round(stats.tokens / elapsed, 1),
        "ttft_ms": {p: ms(percentile(stats.ttft, p)) for p in (50, 90, 99)},
        "itl_ms": {p: ms(percentile(stats.itl, p)) for p in (50, 90, 99)},
        "e2e_ms": {p: ms(percentile(stats.e2e, p)) for p in (50, 90, 99)},
        "rss_mib_start": round(rss_start / 1024.0, 1) if rss_start else None,
        "rss_mib_end": round(rss_end / 1024.0, 1) if rss_end else None,
        "first_errors": stats.errors[:5],
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['minutes']} min, {args.concurrency} clients: {stats.ok} requests "
              f"({result['requests_per_second']}/s), {len(stats.errors)} errors")
        print(f"TTFT ms p50/p90/p99: {result['ttft_ms'][50]} / {result['ttft_ms'][90]} / {result['ttft_ms'][99]}")
        print(f"ITL  ms p50/p90/p99: {result['itl_ms'][50]} / {result['itl_ms'][90]} / {result['itl_ms'][99]}")
        print(f"RSS MiB start/end: {result['rss_mib_start']} / {result['rss_mib_end']}")
        for e in stats.errors[:5]:
            print("error:", e)
    return 1 if stats.errors else 0


if __name__ == "__main__":
    sys.exit(main())
