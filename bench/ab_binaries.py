#!/usr/bin/env python3
"""Two deepinfer binaries side by side: `bench model` prefill and decode speed of each, the two
alternating within every repetition so that a change in machine load hits both alike.

For "speed unchanged" claims (a refactor, a new code path): build the commit before and the
commit after into two build directories, then

    python3 bench/ab_binaries.py --a OLD/bin/deepinfer --b NEW/bin/deepinfer \\
        --model smollm2-135m-instruct --threads 1,2 --reps 7

prints, per model and thread count, the median tok/s of each binary, the ratio B / A and the
spread of B / A over the repetitions (the noise to read the ratio against). Each process runs
`bench model --reps 3` (--inner-reps) and reports its median. --json writes every repetition to
a file.
"""

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
import time

PREFILL = re.compile(r"^prefill: (\d+) tokens, ([\d.]+) tok/s", re.M)
DECODE = re.compile(r"^decode:\s+(\d+) tokens, ([\d.]+) tok/s", re.M)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def bench_once(binary: str, model: str, threads: int, prompt: int, gen: int, inner: int) -> tuple[float, float]:
    cmd = [binary, "bench", "model", "-m", model, "--threads", str(threads), "--reps", str(inner),
           "--prompt", str(prompt), "--gen", str(gen)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    pre, dec = PREFILL.search(out), DECODE.search(out)
    if not pre or not dec:
        sys.exit(f"ab_binaries: unexpected output of {' '.join(cmd)}:\n{out}")
    return float(pre.group(2)), float(dec.group(2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="the baseline binary")
    ap.add_argument("--b", required=True, help="the binary under test")
    ap.add_argument("--model", action="append", help="model name or path (repeatable)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--inner-reps", type=int, default=3,
                    help="bench model's own --reps per process (its median): the first request of a "
                         "fresh process pays first-touch costs that are not the steady speed")
    ap.add_argument("--json", help="write every repetition here")
    args = ap.parse_args()
    models = args.model or ["smollm2-135m-instruct", "gemma3-270m"]
    threads = [int(t) for t in args.threads.split(",")]
    runs = []
    print(f"CPU: {cpu_model()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| model | threads | prefill A | prefill B | B/A (min-max) | decode A | decode B | B/A (min-max) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for model in models:
        for t in threads:
            a_pre, b_pre, a_dec, b_dec = [], [], [], []
            for r in range(args.reps):
                order = [("a", args.a), ("b", args.b)] if r % 2 == 0 else [("b", args.b), ("a", args.a)]
                for name, binary in order:
                    pre, dec = bench_once(binary, model, t, args.prompt, args.gen, args.inner_reps)
                    (a_pre if name == "a" else b_pre).append(pre)
                    (a_dec if name == "a" else b_dec).append(dec)
                    runs.append({"model": model, "threads": t, "rep": r, "binary": name, "prefill": pre, "decode": dec})
            pre_ratio = [b / a for a, b in zip(a_pre, b_pre)]
            dec_ratio = [b / a for a, b in zip(a_dec, b_dec)]
            print(f"| {model} | {t} | {statistics.median(a_pre):.1f} | {statistics.median(b_pre):.1f} | "
                  f"{statistics.median(b_pre) / statistics.median(a_pre):.3f} ({min(pre_ratio):.2f}-{max(pre_ratio):.2f}) | "
                  f"{statistics.median(a_dec):.1f} | {statistics.median(b_dec):.1f} | "
                  f"{statistics.median(b_dec) / statistics.median(a_dec):.3f} ({min(dec_ratio):.2f}-{max(dec_ratio):.2f}) |",
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu_model(), "a": args.a, "b": args.b, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
