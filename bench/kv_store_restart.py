#!/usr/bin/env python3
"""Time to first token after a full process restart, with the KV-cache store warm, against cold.

A prompt of --prompt tokens (bench/ttft_replay.py's English-like text) is answered with
--max-tokens greedy tokens by `deepinfer generate --kv-store DIR`, twice, each a new process on
the same, first empty, store directory: the first run is cold (computes the whole prompt and
writes its pages behind), the second is a restarted server (its prefix cache empty, its store
warm: the full-attention layers' KV of every whole 128-token page before the last prompt token
comes from DIR; a sliding-window model then replays its last window). TTFT is the engine's own
figure, submission to first token (`metrics.first_token_seconds`): the model load and the
store's index scan come before the submission and are not counted, the page loads are (a
loading request has not been scheduled yet, so its wait shows as queue time, printed too).
The restarted run must report the store's tokens as cached and produce the tokens of an
in-process prefix hit on the same prompt (the cold process answers it a second time): the same
KV, the same replay. Models without sliding layers then give the cold run's tokens; with SWA
bounded replay greedy tokens may part from the cold run's at a near-tie (docs/benchmarks.md,
"SWA bounded replay"): the first difference is printed. The load average is printed around
each run: the machine may be shared.

    python3 bench/kv_store_restart.py --model smollm2 --prompt 6144
    python3 bench/kv_store_restart.py --model gemma3-270m --prompt 16384
"""

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ttft_replay import text_of, tokenize  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]


def generate(args, store, ids, copies):
    with tempfile.TemporaryDirectory() as d:
        inp, out = pathlib.Path(d) / "in.jsonl", pathlib.Path(d) / "out.jsonl"
        req = {"prompt_token_ids": ids, "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True}
        inp.write_text((json.dumps(req) + "\n") * copies)
        cmd = [args.bin, "generate", "-m", args.model, "-i", str(inp), "-o", str(out), "--max-num-seqs", "1",
               "--kv-store", str(store)]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        start = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed: {p.stderr}")
        return wall, [json.loads(line) for line in out.read_text().splitlines()]


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def load_average():
    return pathlib.Path("/proc/loadavg").read_text().split()[:3]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(REPO / "build" / "bin" / "deepinfer"))
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--prompt", type=int, default=6144, help="prompt tokens")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--store", help="store directory (default: a fresh temporary one, removed after)")
    args = ap.parse_args()

    ids = tokenize(args, text_of(0, args.prompt))
    if len(ids) < args.prompt:
        sys.exit(f"the text has {len(ids)} tokens, fewer than {args.prompt}")
    ids = ids[: args.prompt]
    store = pathlib.Path(args.store or tempfile.mkdtemp(prefix="deepinfer_kvstore_bench_"))
    try:
        print(f"load average before: {' '.join(load_average())}", flush=True)
        wall, (cold, local) = generate(args, store, ids, 2)
        t_cold = cold["metrics"]["first_token_seconds"]
        # The second request waited for the first: its own TTFT starts at its scheduling.
        t_local = local["metrics"]["first_token_seconds"] - local["metrics"]["queue_seconds"]
        print(f"cold: TTFT {t_cold:.3f} s, cached {cold['cached_prompt_tokens']}; then an in-process prefix hit: "
              f"TTFT {t_local:.3f} s, cached {local['cached_prompt_tokens']}; process {wall:.1f} s, "
              f"load average {' '.join(load_average())}", flush=True)
        wall, (warm,) = generate(args, store, ids, 1)
        t_warm = warm["metrics"]["first_token_seconds"]
        print(f"restart: TTFT {t_warm:.3f} s (of it waiting for the store's pages: "
              f"{warm['metrics']['queue_seconds']:.3f} s), cached {warm['cached_prompt_tokens']} of {args.prompt}; "
              f"process {wall:.1f} s, load average {' '.join(load_average())}", flush=True)
        if cold["cached_prompt_tokens"] != 0 or warm["cached_prompt_tokens"] == 0:
            sys.exit("the first run must be cold and the restart a store hit")
        tokens = {k: r["generated_token_ids"] for k, r in (("cold", cold), ("local", local), ("warm", warm))}
        pages = list(store.rglob("*.page"))
        diff = first_difference(tokens["cold"], tokens["warm"])
        print(f"{args.model}, {args.prompt}-token prompt: TTFT cold {t_cold:.2f} s, restart with warm store "
              f"{t_warm:.3f} s, ratio {t_cold / t_warm:.1f}x (in-process hit {t_local:.3f} s, "
              f"{t_cold / t_local:.1f}x); greedy tokens of the restart "
              f"{'equal the cold run' if diff is None else f'leave the cold run at token {diff}'}, "
              f"{'equal' if tokens['warm'] == tokens['local'] else 'DIFFER from'} the in-process hit's; "
              f"store {len(pages)} pages, {sum(p.stat().st_size for p in pages) / 2**20:.1f} MiB")
        # A store hit must be what an in-process hit is: the same KV, the same replay.
        if tokens["warm"] != tokens["local"]:
            sys.exit(1)
    finally:
        if not args.store:
            shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
