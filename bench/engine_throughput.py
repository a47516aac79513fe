#!/usr/bin/env python3
"""Engine throughput: many concurrent requests against one, on the same model and machine.

Runs `deepinfer generate` (the engine: continuous batching, paged KV cache) four ways in one
run, alternating, each in a fresh process:
  single     - one request, prompt P tokens, G generated tokens (greedy, end-of-sequence ignored);
  batch      - N such requests with distinct prompts, submitted together;
  batch-sync - the same without asynchronous scheduling (--no-async-scheduling), to compare
               the engine overhead with the bookkeeping overlapped and not;
  shared     - N requests whose prompts share their first half (prefix cache hits).
It reports generated tokens per second over the wall clock (prefill included) and over the
decode-only steps (every sequence decoding: the batch's steady generation speed, which the
issue's "3 times the single-request decode speed" compares), the median time to first token,
the engine's own overhead (time the model stood idle between forward passes), and the prompt
tokens served from the prefix cache.

    python3 bench/engine_throughput.py --requests 64 --prompt 256 --gen 128 --reps 3 --update-docs
"""

import argparse
import datetime
import json
import pathlib
import random
import re
import statistics
import subprocess
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "benchmarks.md"
BEGIN, END = "<!-- engine_throughput:begin -->", "<!-- engine_throughput:end -->"
SUMMARY = re.compile(r"(\d+) requests: (\d+) prompt tokens \((\d+) from the prefix cache\), (\d+) generated in "
                     r"([\d.]+) s: ([\d.]+) generated tokens/s; (\d+) steps, engine overhead ([\d.]+)% of step time")
DECODE = re.compile(r"decode-only steps: (\d+), (\d+) tokens in ([\d.]+) s: ([\d.]+) tokens/s")


def requests_file(n: int, prompt: int, gen: int, shared: bool, seed: int) -> str:
    rng = random.Random(seed)
    prefix = [rng.randrange(1000, 40000) for _ in range(prompt // 2)]
    lines = []
    for _ in range(n):
        ids = [rng.randrange(1000, 40000) for _ in range(prompt)]
        if shared:
            ids[: len(prefix)] = prefix
        lines.append(json.dumps({"prompt_token_ids": ids, "max_tokens": gen, "temperature": 0, "ignore_eos": True}))
    f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
    f.write("\n".join(lines) + "\n")
    f.close()
    return f.name


def run(binary: str, model: str, path: str, threads: int, seqs: int, extra: list) -> dict:
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as results:
        out = subprocess.run([binary, "generate", "-m", model, "--input", path, "--threads", str(threads),
                              "--max-num-seqs", str(seqs), "--output", results.name, *extra],
                             capture_output=True, text=True, check=True)
        ttft = [json.loads(line)["metrics"]["first_token_seconds"] for line in results if line.strip()]
    m = SUMMARY.search(out.stderr)
    if not m:
        raise SystemExit("unexpected output from deepinfer generate:\n" + out.stderr)
    d = DECODE.search(out.stderr)
    return {"requests": int(m[1]), "prompt_tokens": int(m[2]), "cached_tokens": int(m[3]), "generated": int(m[4]),
            "seconds": float(m[5]), "tok_per_s": float(m[6]), "steps": int(m[7]), "overhead_pct": float(m[8]),
            "decode_tok_per_s": float(d[4]) if d else 0.0, "ttft": statistics.median(ttft)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=str(REPO / "build" / "bin" / "deepinfer"))
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--kv-cache-tokens", type=int, default=0,
                    help="KV capacity; default: every request's prompt and output plus a block each, so that "
                         "nothing is preempted (the engine's own default, 1 GiB, is smaller for 64 x 384 tokens)")
    ap.add_argument("--update-docs", action="store_true")
    args = ap.parse_args()

    batch = requests_file(args.requests, args.prompt, args.gen, False, 2)
    files = {
        "single": requests_file(1, args.prompt, args.gen, False, 1),
        "batch": batch,
        "batch-sync": batch,
        "shared": requests_file(args.requests, args.prompt, args.gen, True, 3),
    }
    extra = {"batch-sync": ["--no-async-scheduling"]}
    kv_tokens = args.kv_cache_tokens or args.requests * (args.prompt + args.gen + 16)
    results = {k: [] for k in files}
    for rep in range(args.reps):
        for kind, path in files.items():
            r = run(args.binary, args.model, path, args.threads, args.requests,
                    ["--kv-cache-tokens", str(kv_tokens), *extra.get(kind, [])])
            results[kind].append(r)
            print(f"rep {rep + 1} {kind}: {r['tok_per_s']:.1f} tok/s, decode-only {r['decode_tok_per_s']:.1f} tok/s, "
                  f"TTFT {r['ttft']:.2f} s, {r['seconds']:.1f} s, overhead {r['overhead_pct']:.1f}%, "
                  f"cached {r['cached_tokens']}", flush=True)

    def med(kind, key):
        return statistics.median(r[key] for r in results[kind])

    single = med("single", "decode_tok_per_s")
    rows = []
    for kind in files:
        rows.append(f"| {kind} | {results[kind][0]['requests']} | {med(kind, 'tok_per_s'):.1f} | "
                    f"{med(kind, 'decode_tok_per_s'):.1f} | {med(kind, 'decode_tok_per_s') / single:.2f} | "
                    f"{med(kind, 'ttft'):.2f} | {med(kind, 'seconds'):.1f} | "
                    f"{med(kind, 'overhead_pct'):.1f}% | {results[kind][0]['cached_tokens']} |")
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    block = "\n".join([
        BEGIN,
        f"Model `{args.model}`, prompts of {args.prompt} tokens, {args.gen} generated tokens each (greedy, "
        f"end-of-sequence ignored), {args.threads} threads, KV cache of {kv_tokens} tokens, median of {args.reps} "
        f"repetitions; "
        f"deepinfer {commit}, {datetime.date.today().isoformat()}.",
        "",
        f"Command: `python3 bench/engine_throughput.py --requests {args.requests} --prompt {args.prompt} "
        f"--gen {args.gen} --threads {args.threads} --reps {args.reps}`",
        "",
        "| run | requests | generated tok/s (wall) | decode-only tok/s | × single decode | median TTFT s | wall s "
        "| engine overhead | prompt tokens from cache |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        END,
    ])
    print(block)
    if args.update_docs:
        text = DOCS.read_text()
        if BEGIN in text:
            text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END):]
        else:
            text += "\n## Engine: concurrent requests\n\n" + block + "\n"
        DOCS.write_text(text)


if __name__ == "__main__":
    main()
