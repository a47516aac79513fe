#!/usr/bin/env python3
"""Time to first token after a prefix-cache hit with SWA bounded replay, on Gemma 3 270M.

A prompt of --prompt tokens (English-like text, distinct per repetition from its first line,
so repetitions never hit each other) is answered with max_tokens 1. Each repetition is one
`deepinfer generate --max-num-seqs 1` run over [P, P x K]: the first P is cold (nothing of it
cached, the whole prompt is computed), the K later ones are hits (the global layers' KV comes from
the prefix cache, only the last sliding window, 512 tokens block-rounded, is recomputed). TTFT
of each request is the engine's own figure from generate's output: first token minus first
scheduling (`metrics.first_token_seconds - metrics.queue_seconds`), so the queue behind the
earlier requests and the model load are not counted. The hits are checked to have taken the
cache (cached_prompt_tokens). Medians over repetitions (cold) and over all hits, and their ratio.

    python3 bench/ttft_replay.py --prompt 16384 --reps 3 --hits 4
"""

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def text_of(rep, n_tokens):
    subjects = ["The river", "A small town", "The old library", "Our neighbour", "The committee",
                "A tired traveller", "The museum", "My grandmother"]
    verbs = ["remembered", "described", "argued about", "discovered", "painted", "counted", "forgot",
             "wrote about"]
    objects = ["the winter of the storm", "a letter from the coast", "seventeen red boats", "the price of bread",
               "an unfinished bridge", "the first day of school", "a map with no names", "the sound of the market"]
    lines = [f"Notebook {rep}, kept by reader number {rep * 7919 % 1000}."]
    for i in range(n_tokens // 8 + 16):  # each line is more than 8 tokens
        lines.append(f"{subjects[(i * 3 + rep) % 8]} {verbs[(i * 5 + 1) % 8]} {objects[(i * 7 + 2) % 8]} "
                     f"in the year {1700 + (i * 37 + rep) % 300}.")
    return " ".join(lines)


def generate(args, requests):
    """Runs deepinfer generate on `requests`; returns (wall seconds, result objects)."""
    with tempfile.TemporaryDirectory() as d:
        inp, out = pathlib.Path(d) / "in.jsonl", pathlib.Path(d) / "out.jsonl"
        inp.write_text("".join(json.dumps(r) + "\n" for r in requests))
        cmd = [args.bin, "generate", "-m", args.model, "-i", str(inp), "-o", str(out), "--max-num-seqs", "1"]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        start = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed: {p.stderr}")
        return wall, [json.loads(line) for line in out.read_text().splitlines()]


def request(prompt_ids):
    return {"prompt_token_ids": prompt_ids, "max_tokens": 1, "temperature": 0, "ignore_eos": True}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(REPO / "build" / "bin" / "deepinfer"))
    ap.add_argument("--model", default="gemma3-270m")
    ap.add_argument("--prompt", type=int, default=16384, help="prompt tokens")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--hits", type=int, default=4, help="hits per repetition (K)")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()

    cold, hit = [], []
    for rep in range(args.reps):
        ids = tokenize(args, text_of(rep, args.prompt))
        if len(ids) < args.prompt:
            sys.exit(f"the text has {len(ids)} tokens, fewer than {args.prompt}")
        ids = ids[: args.prompt]
        wall, out = generate(args, [request(ids)] * (1 + args.hits))
        cached = [r["cached_prompt_tokens"] for r in out]
        if cached[0] != 0 or min(cached[1:]) == 0:
            sys.exit(f"unexpected cache use {cached}: the first request must be cold and the rest hits")
        ttft = [r["metrics"]["first_token_seconds"] - r["metrics"]["queue_seconds"] for r in out]
        cold.append(ttft[0])
        hit.extend(ttft[1:])
        print(f"rep {rep}: cold {ttft[0]:.3f} s, hits " + ", ".join(f"{t:.3f}" for t in ttft[1:]) +
              f" s (a hit computes {args.prompt - cached[1]} of {args.prompt} tokens); run {wall:.1f} s", flush=True)
    mc, mh = statistics.median(cold), statistics.median(hit)
    print(f"{args.model}, {args.prompt}-token prompt, {args.reps} reps x {args.hits} hits: median TTFT cold {mc:.2f} s, "
          f"hit with replay {mh:.3f} s, ratio {mc / mh:.1f}x")


def tokenize(args, text):
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(text)
        f.flush()
        p = subprocess.run([args.bin, "tokenize", "-m", args.model, "--bos", "--file", f.name],
                           capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("deepinfer tokenize failed: " + p.stderr)
    return [int(t) for t in p.stdout.strip().split(",")]


if __name__ == "__main__":
    main()
