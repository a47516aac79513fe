#!/usr/bin/env python3
"""deepinfer router's policies side by side on a prefix-heavy multi-tenant workload derived from
the Mooncake conversation trace: cache-aware, least-load and round-robin, each over the same
fresh replicas, in one run on one machine.

The workload (nothing of the trace is stored in the repository; the path is an argument):
  - conversations: requests of the trace grouped by their first two 512-token block ids (the
    shared system block 0, then the conversation's own first block); the first --conversations
    groups with at least --min-turns requests, their requests in trace order;
  - tenants: conversation i belongs to tenant i % --tenants, whose own system prompt (a few
    blocks of its own) starts every prompt of the tenant;
  - text: each 512-token block id becomes --block-words deterministic pseudo-words (the trace's
    blocks scaled down for a CPU), so equal block ids give equal text and prefixes stay
    prefixes; prompts are cut to --max-blocks blocks.
Each request is one streamed chat completion, max_tokens --max-tokens, sent by --concurrency
client threads in trace order. Per policy: two (--replicas) new `deepinfer serve` processes
with empty caches and a router in front; measured: TTFT p50/p99 (client side), throughput,
prefix hit rate (the replicas' own prefix_cache_hits / queries), each replica's share of
requests and its largest queue (num_requests_waiting, sampled every 0.2 s).

    python3 bench/router_policies.py --trace PATH/mooncake_conversation_trace.jsonl

The replicas' and routers' logs go to a temporary directory that is removed at the end;
ROUTER_BENCH_KEEP_LOGS=DIR writes them to DIR instead (to read a run's ejections or errors).
"""

import argparse
import collections
import os
import json
import pathlib
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m-instruct"


def load_workload(args):
    families = collections.OrderedDict()
    with open(args.trace) as f:
        for line in f:
            row = json.loads(line)
            ids = row["hash_ids"]
            if len(ids) < 2:
                continue
            families.setdefault((ids[0], ids[1]), []).append(row)
    chosen = [rows for rows in families.values() if len(rows) >= args.min_turns][: args.conversations]
    requests = []
    for i, rows in enumerate(chosen):
        for row in rows:
            requests.append((row["timestamp"], i % args.tenants, row["hash_ids"][: args.max_blocks]))
    requests.sort(key=lambda r: r[0])
    return requests


def block_text(block_id, n_words, salt):
    rng = random.Random(f"{salt}:{block_id}")
    syllables = ["ka", "lo", "mi", "ren", "tas", "vo", "shi", "da", "pel", "or", "un", "ex"]
    return " ".join("".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(n_words))


def prompt_of(tenant, ids, n_words):
    system = " ".join(block_text(b, n_words, f"tenant{tenant}") for b in range(3))
    body = " ".join(block_text(b, n_words, "trace") for b in ids)
    return [{"role": "system", "content": system}, {"role": "user", "content": body}]


def http_json(url, body=None, timeout=30):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def metrics(url):
    out = {}
    for line in http_json(url + "/metrics").splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def start(args_list, log_path, pattern, cpu=None):
    log = open(log_path, "w")
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    proc = subprocess.Popen(args_list, stdout=log, stderr=subprocess.STDOUT, preexec_fn=pin)
    deadline = time.time() + 180
    while time.time() < deadline:
        m = re.search(pattern, pathlib.Path(log_path).read_text(errors="replace"))
        if m:
            return proc, f"http://127.0.0.1:{m.group(1)}"
        if proc.poll() is not None:
            sys.exit(f"{args_list[1]} exited early:\n" + pathlib.Path(log_path).read_text())
        time.sleep(0.1)
    proc.kill()
    sys.exit(f"{args_list[1]} did not start")


def stream_one(router, messages, max_tokens):
    """TTFT in seconds, the usage chunk's prompt and cached token counts, and the replica and reason
    the router gives in its headers."""
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(router + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft = None
    usage = {}
    with urllib.request.urlopen(req, timeout=600) as r:
        routed = (r.headers.get("x-deepinfer-replica", ""), r.headers.get("x-deepinfer-route", ""))
        for raw in r:
            line = raw.decode().strip()
            if ttft is None and line.startswith("data:") and '"content"' in line:
                ttft = time.perf_counter() - t0
            if line.startswith("data:") and '"usage"' in line and line != "data: [DONE]":
                usage = json.loads(line[5:]).get("usage") or usage
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return (ttft if ttft is not None else time.perf_counter() - t0), usage.get("prompt_tokens", 0), cached, routed


def run_policy(args, policy, workload, tmp):
    # "cache-aware/tokens" is cache-aware with --load-unit tokens, so that both units run
    # side by side in one invocation.
    name, _, unit = policy.partition("/")
    unit_args = ["--load-unit", unit] if unit else []
    policy_label, policy = policy, name
    file_label = policy_label.replace("/", "-")
    replicas = []
    for i in range(args.replicas):
        cmd = [args.binary, "serve", "-m", MODEL, "--port", "0", "--threads", str(args.threads),
               "--max-num-seqs", "16", "--kv-cache-tokens", str(args.kv_cache_tokens)]
        cpu = i % os.cpu_count() if args.pin_replicas else None
        replicas.append(start(cmd, f"{tmp}/{file_label}-replica{i}.log", r"on http://127\.0\.0\.1:(\d+)", cpu))
    cmd = [args.binary, "router", "--port", "0", "--policy", policy, *unit_args, "--health-interval", "0.5", *args.router_args.split()]
    for _, url in replicas:
        cmd += ["--replica", url]
    router_proc, router = start(cmd, f"{tmp}/{file_label}-router.log", r"on http://127\.0\.0\.1:(\d+)")
    urls = [url for _, url in replicas]
    before = [metrics(u) for u in urls]
    max_waiting = [0.0] * len(urls)
    done = threading.Event()

    def sample():
        while not done.wait(0.2):
            for i, u in enumerate(urls):
                try:
                    max_waiting[i] = max(max_waiting[i], metrics(u).get("deepinfer:num_requests_waiting", 0))
                except OSError:
                    pass

    sampler = threading.Thread(target=sample)
    sampler.start()
    ttfts = [None] * len(workload)
    per_request = [None] * len(workload)
    cursor = [0]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                i = cursor[0]
                cursor[0] += 1
            if i >= len(workload):
                return
            _, tenant, ids = workload[i]
            started = time.perf_counter() - t0
            ttft, prompt_tokens, cached, (replica, route) = stream_one(router, prompt_of(tenant, ids, args.block_words),
                                                                       args.max_tokens)
            ttfts[i] = ttft
            per_request[i] = {"index": i, "tenant": tenant, "blocks": len(ids), "ttft_ms": ttft * 1000,
                              "prompt_tokens": prompt_tokens, "cached_tokens": cached,
                              "started_s": started, "finished_s": time.perf_counter() - t0, "replica": replica,
                              "route": route}

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    done.set()
    sampler.join()
    after = [metrics(u) for u in urls]
    rm = metrics(router)
    hits = sum(a["deepinfer:prefix_cache_hits_total"] - b["deepinfer:prefix_cache_hits_total"] for a, b in zip(after, before))
    queries = sum(a["deepinfer:prefix_cache_queries_total"] - b["deepinfer:prefix_cache_queries_total"]
                  for a, b in zip(after, before))
    share = [int(rm.get(f'deepinfer_router:requests_total{{replica="{u}"}}', 0)) for u in urls]
    estimated = sum(rm.get(f'deepinfer_router:estimated_hit_tokens_total{{replica="{u}"}}', 0) for u in urls)
    actual = sum(rm.get(f'deepinfer_router:actual_hit_tokens_total{{replica="{u}"}}', 0) for u in urls)
    decisions = {k.split('"')[1]: int(v) for k, v in rm.items() if k.startswith("deepinfer_router:decisions_total")}
    router_proc.terminate()
    router_proc.wait(timeout=30)
    for proc, _ in replicas:
        proc.terminate()
        proc.wait(timeout=60)
    q = statistics.quantiles(ttfts, n=100)
    return {"policy": policy_label, "requests": len(workload), "seconds": elapsed, "req_per_s": len(workload) / elapsed,
            "ttft_p50_ms": q[49] * 1000, "ttft_p99_ms": q[98] * 1000, "hit_rate": hits / queries if queries else 0.0,
            "requests_per_replica": share, "max_waiting_per_replica": max_waiting,
            "router_estimated_hit_tokens": estimated, "router_actual_hit_tokens": actual, "decisions": decisions,
            "per_request": per_request}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", required=True, help="the Mooncake conversation trace (JSONL)")
    p.add_argument("--binary", default=str(REPO / "build" / "bin" / "deepinfer"))
    p.add_argument("--policies", default="cache-aware,least-load,round-robin")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="engine threads per replica")
    p.add_argument("--pin-replicas", action="store_true",
                   help="replica i runs on CPU i mod the CPU count only (with --threads 1 and as many CPUs as "
                        "replicas, each replica has a core of its own; the router and clients are not pinned)")
    p.add_argument("--kv-cache-tokens", type=int, default=16384, help="per replica: small, so that caches compete")
    p.add_argument("--conversations", type=int, default=24)
    p.add_argument("--min-turns", type=int, default=3)
    p.add_argument("--tenants", type=int, default=4)
    p.add_argument("--max-blocks", type=int, default=12)
    p.add_argument("--block-words", type=int, default=24)
    p.add_argument("--max-tokens", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--router-args", default="", help="extra router flags, e.g. '--index-blocks 1024'")
    p.add_argument("--rounds", type=int, default=1, help="repeat the policies, interleaved, to show the noise")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args()
    workload = load_workload(args)
    print(f"workload: {len(workload)} requests, {args.conversations} conversations, {args.tenants} tenants", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="router-bench-") as tmp:
        if os.environ.get("ROUTER_BENCH_KEEP_LOGS"):
            tmp = os.environ["ROUTER_BENCH_KEEP_LOGS"]
        for policy in args.policies.split(",") * args.rounds:
            r = run_policy(args, policy, workload, tmp)
            results.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "per_request"}), flush=True)
    print("\n| policy | hit rate | req/s | TTFT p50 ms | TTFT p99 ms | requests per replica | max waiting per replica |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['policy']} | {r['hit_rate']:.1%} | {r['req_per_s']:.2f} | {r['ttft_p50_ms']:.0f} | "
              f"{r['ttft_p99_ms']:.0f} | {r['requests_per_replica']} | {[int(w) for w in r['max_waiting_per_replica']]} |")
    if args.out:
        recorded = {k: (str(pathlib.Path(v).relative_to(REPO)) if isinstance(v, str) and v.startswith(str(REPO) + "/") else v)
                    for k, v in vars(args).items()}  # no path of this machine in a result file
        pathlib.Path(args.out).write_text(json.dumps({"args": recorded, "results": results}, indent=1))


if __name__ == "__main__":
    main()
