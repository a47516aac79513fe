#!/usr/bin/env python3
"""What deepinfer router adds to a request: the same requests sent to one replica directly and
through a router in front of it, one at a time, alternating (so both see the same machine load).

  - per request: POST /tokenize (answered by the replica without the engine), client-side
    latency direct vs routed, p50 and p99, and their difference;
  - per streamed chunk: a greedy chat stream (--max-tokens, ignore_eos), the time from the
    request to each chunk, routed minus direct at the same chunk index (same tokens, so the
    engine's work is the same), p50 and p99 over all chunks.

    python3 bench/router_overhead.py --requests 200
"""

import argparse
import json
import pathlib
import re
import statistics
import subprocess
import sys
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m-instruct"


def start(cmd, log):
    f = open(log, "w")
    proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    for _ in range(1800):
        m = re.search(r"on http://127\.0\.0\.1:(\d+)", pathlib.Path(log).read_text(errors="replace"))
        if m:
            return proc, f"http://127.0.0.1:{m.group(1)}"
        if proc.poll() is not None:
            sys.exit(pathlib.Path(log).read_text())
        time.sleep(0.1)
    sys.exit("did not start")


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as r:
        r.read()
    return time.perf_counter() - t0


def stream_times(url, max_tokens):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "ignore_eos": True}
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    times = []
    with urllib.request.urlopen(req, timeout=120) as r:
        for raw in r:
            if raw.startswith(b"data:") and b'"content"' in raw:
                times.append(time.perf_counter() - t0)
    return times


def pct(xs, p):
    return statistics.quantiles(xs, n=100)[p - 1] if len(xs) > 1 else xs[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=str(REPO / "build" / "bin" / "deepinfer"))
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--streams", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    replica, direct = start([args.binary, "serve", "-m", MODEL, "--port", "0", "--threads", "1"], "/tmp/overhead-replica.log")
    router, routed = start([args.binary, "router", "--port", "0", "--replica", direct], "/tmp/overhead-router.log")
    try:
        body = {"model": MODEL, "prompt": "The quick brown fox jumps over the lazy dog."}
        d, r = [], []
        for _ in range(args.requests):
            d.append(post(direct, "/tokenize", body))
            r.append(post(routed, "/tokenize", body))
        chunk_delta = []
        for _ in range(args.streams):
            td, tr = stream_times(direct, args.max_tokens), stream_times(routed, args.max_tokens)
            chunk_delta += [b - a for a, b in zip(td, tr)]
        out = {
            "request_direct_ms": [pct(d, 50) * 1e3, pct(d, 99) * 1e3],
            "request_routed_ms": [pct(r, 50) * 1e3, pct(r, 99) * 1e3],
            "request_added_ms": [(pct(r, 50) - pct(d, 50)) * 1e3, (pct(r, 99) - pct(d, 99)) * 1e3],
            "chunk_added_ms": [pct(chunk_delta, 50) * 1e3, pct(chunk_delta, 99) * 1e3],
            "chunks": len(chunk_delta),
        }
        print(json.dumps(out))
    finally:
        router.terminate()
        replica.terminate()
        router.wait(timeout=30)
        replica.wait(timeout=60)


if __name__ == "__main__":
    main()
