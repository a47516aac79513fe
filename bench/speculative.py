#!/usr/bin/env python3
"""Speculative decoding against plain decoding, side by side in one run (issue 17).

Workloads where drafts pay, each a set of chat requests (SmolLM2-135M-Instruct by default):
  code-edit   rename an identifier in a source file of this repository and return the whole file
  json        extract fields from a document as JSON, quoting its values
  summary     summarise a text, quoting sentences from it
  multi-turn  a conversation whose last turn asks for an earlier answer again, with a change
and a control where drafts seldom match:
  free        open-ended writing from a prompt with repeated filler (n-gram matches, wrong guesses)

Every (workload, concurrency, method, schedule) runs `deepinfer generate` on the same requests,
greedy, the engine's max_num_seqs set to the concurrency; configurations alternate within each
workload and concurrency point, so a change of machine load hits all of them. Reported per run:
per-user decode speed (each request's tokens after its first over the time from its first
token to its last, averaged), aggregate output throughput (tokens over the run's wall time,
model load excluded), draft acceptance, and whether the tokens equal plain decoding's.

    python3 bench/speculative.py --concurrency 1,8,32 --out bench/results/speculative.json

With --draft-model MODEL the draft-model method (a smaller model with the target's tokenizer)
joins, under both schedules; --methods none,draft keeps only some methods.
"""

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
BIN = REPO / "build" / "bin" / "deepinfer"

CONFIGS = [
    ("none", None),
    ("ngram", "fixed"),
    ("ngram", "confidence"),
    ("suffix", "fixed"),
    ("suffix", "confidence"),
]


def code_edit_requests(n):
    files = sorted((REPO / "bench").glob("*.py"))
    out = []
    for i in range(n):
        text = files[i % len(files)].read_text().splitlines()
        start = (i * 37) % max(1, len(text) - 40)
        snippet = "\n".join(text[start:start + 30])
        out.append(f"Rename the variable `args` to `options` everywhere in this code and return the whole "
                   f"code, unchanged otherwise:\n\n```python\n{snippet}\n```")
    return out


PEOPLE = [("Ada Lovelace", "London", "mathematician", 1815), ("Alan Turing", "Manchester", "computer scientist", 1912),
          ("Grace Hopper", "New York", "rear admiral", 1906), ("Edsger Dijkstra", "Rotterdam", "professor", 1930),
          ("Barbara Liskov", "Los Angeles", "professor", 1939), ("Donald Knuth", "Milwaukee", "author", 1938),
          ("Frances Allen", "Peru, New York", "researcher", 1932), ("John McCarthy", "Boston", "professor", 1927)]


def json_requests(n):
    out = []
    for i in range(n):
        name, city, job, year = PEOPLE[i % len(PEOPLE)]
        doc = (f"Record {i}. {name} was born in {year} in {city}. Known as a {job}, {name} worked for many years "
               f"on problems that others found too hard. Colleagues in {city} remember {name} as patient. "
               f"The archive lists {name}, {year}, {city}, {job} under entry {1000 + i}.")
        out.append(f"{doc}\n\nExtract from the text above a JSON object with the keys \"name\", \"born\", "
                   f"\"city\", \"occupation\" and \"entry\", copying the values exactly as written.")
    return out


STORY = ("The harbour town woke early. Fishermen carried nets to the boats while the baker opened his shutters. "
         "By noon the market was full of voices, and the smell of bread drifted down to the water. "
         "In the evening the lighthouse keeper climbed the stairs, lit the lamp, and watched the boats come home. ")


def summary_requests(n):
    return [f"Summarise this text in a few sentences, quoting its sentences word for word where you can:\n\n"
            f"{STORY * (1 + i % 3)}" for i in range(n)]


def multi_turn_requests(n):
    out = []
    for i in range(n):
        answer = (f"Here is the list you asked for:\n1. Buy {3 + i} apples.\n2. Call the plumber at nine.\n"
                  f"3. Send the report to Maria.\n4. Water the plants on the balcony.\n5. Book the train for Friday.")
        out.append([{"role": "user", "content": "Make me a to-do list for tomorrow with five items."},
                    {"role": "assistant", "content": answer},
                    {"role": "user", "content": "Thanks. Write the same list again, exactly as before, but with "
                                                "item 2 at ten instead of nine."}])
    return out


def free_requests(n):
    filler = "the of and a to in is that it was for on are as with his they at be this from "
    names = ["Ember", "Slate", "Moss", "Quill", "Brine", "Cinder", "Frost", "Thistle"]
    places = ["a desert", "the sea", "a city", "the mountains", "a forest", "an island", "the moon", "a library"]
    return [f"{filler * 3}\n\nWrite an original short story about a dragon named {names[i % 8]} who lives in "
            f"{places[(i // 8) % 8]}." for i in range(n)]


WORKLOADS = {
    "code-edit": code_edit_requests,
    "json": json_requests,
    "summary": summary_requests,
    "multi-turn": multi_turn_requests,
    "free": free_requests,
}


def write_input(path, prompts, max_tokens):
    with open(path, "w") as f:
        for p in prompts:
            messages = p if isinstance(p, list) else [{"role": "user", "content": p}]
            f.write(json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0}) + "\n")


def run(args, input_path, concurrency, method, schedule):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as out:
        cmd = [str(BIN), "generate", "-m", args.model, "--input", input_path, "--output", out.name,
               "-t", str(args.threads), "--max-num-seqs", str(concurrency)]
        if method != "none":
            cmd += ["--speculative-method", method, "--speculative-schedule", schedule,
                    "--num-speculative-tokens", str(args.num_tokens)]
        if method == "draft":
            cmd += ["--draft-model", args.draft_model]
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.monotonic() - start
        if proc.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
        results = [json.loads(line) for line in open(out.name)]
    # The run's time from the first submission to the last answer (model loading excluded).
    span = max(r["metrics"]["finish_seconds"] for r in results)
    speeds = []
    for r in results:
        m = r["metrics"]
        n = r["usage"]["completion_tokens"]
        if n > 1 and m["finish_seconds"] > m["first_token_seconds"]:
            speeds.append((n - 1) / (m["finish_seconds"] - m["first_token_seconds"]))
    drafted = sum(r.get("speculative", {}).get("draft_tokens", 0) for r in results)
    accepted = sum(r.get("speculative", {}).get("accepted_tokens", 0) for r in results)
    generated = sum(r["usage"]["completion_tokens"] for r in results)
    return {
        "tokens": [r["generated_token_ids"] for r in results],
        "per_user_tok_s": sum(speeds) / len(speeds) if speeds else 0.0,
        "throughput_tok_s": generated / span,
        "generated": generated,
        "draft_tokens": drafted,
        "accepted_tokens": accepted,
        "process_seconds": wall,
    }


def median_run(runs):
    """The rounds of one configuration: speeds are medians; tokens must agree across rounds."""
    out = dict(runs[0])
    for key in ("per_user_tok_s", "throughput_tok_s", "process_seconds"):
        out[key] = statistics.median(r[key] for r in runs)
    out["draft_tokens"] = sum(r["draft_tokens"] for r in runs)
    out["accepted_tokens"] = sum(r["accepted_tokens"] for r in runs)
    if any(r["tokens"] != runs[0]["tokens"] for r in runs):
        out["tokens"] = None  # differs from plain's: reported as TOKENS DIFFER
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--num-tokens", type=int, default=5, help="--num-speculative-tokens")
    ap.add_argument("--requests-per-slot", type=int, default=2,
                    help="requests per concurrency slot (at concurrency 1: this many requests, one at a time)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds of every configuration; speeds reported are the medians")
    ap.add_argument("--draft-model", help="a model with the target's tokenizer: adds the draft method")
    ap.add_argument("--methods", help="comma-separated methods to run (none always runs: it is the baseline)")
    ap.add_argument("--out", help="write every result as JSON here")
    args = ap.parse_args()
    configs = CONFIGS + ([("draft", "fixed"), ("draft", "confidence")] if args.draft_model else [])
    if args.methods:
        wanted = set(args.methods.split(",")) | {"none"}
        configs = [c for c in configs if c[0] in wanted]
    if not BIN.exists():
        sys.exit(f"{BIN} is missing: build first (scripts/setup)")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"# CPU: {cpu}, {os.cpu_count()} cores; model {args.model}; {args.threads} threads; "
          f"greedy, {args.max_tokens} tokens per request")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for workload in args.workloads.split(","):
            for c in [int(x) for x in args.concurrency.split(",")]:
                n = max(2, c * args.requests_per_slot) if c > 1 else args.requests_per_slot
                input_path = os.path.join(tmp, f"{workload}-{c}.jsonl")
                write_input(input_path, WORKLOADS[workload](n), args.max_tokens)
                # Rounds of every configuration in turn; each figure is the median over rounds,
                # so a burst of load on the machine moves one round of all, not one configuration.
                rounds = {cfg: [] for cfg in configs}
                for _ in range(args.repeats):
                    for method, schedule in configs:
                        rounds[(method, schedule)].append(run(args, input_path, c, method, schedule))
                results = {cfg: median_run(rs) for cfg, rs in rounds.items()}
                plain = results[("none", None)]
                for (method, schedule), r in results.items():
                    row = {k: v for k, v in r.items() if k != "tokens"}
                    row.update(workload=workload, concurrency=c, requests=n, method=method, schedule=schedule or "-",
                               equal_to_plain=r["tokens"] is not None and r["tokens"] == plain["tokens"],
                               per_user_speedup=r["per_user_tok_s"] / plain["per_user_tok_s"],
                               throughput_ratio=r["throughput_tok_s"] / plain["throughput_tok_s"],
                               acceptance=r["accepted_tokens"] / r["draft_tokens"] if r["draft_tokens"] else 0.0)
                    rows.append(row)
                    print(f"{workload:10s} c={c:<3d} {method:6s} {row['schedule']:10s} "
                          f"per-user {r['per_user_tok_s']:7.1f} tok/s ({row['per_user_speedup']:4.2f}x)  "
                          f"throughput {r['throughput_tok_s']:7.1f} tok/s ({row['throughput_ratio']:4.2f}x)  "
                          f"accepted {r['accepted_tokens']}/{r['draft_tokens']}  "
                          f"{'same tokens' if row['equal_to_plain'] else 'TOKENS DIFFER'}", flush=True)
    if args.out:
        meta = {"cpu": cpu, "cores": os.cpu_count(), "model": args.model, "threads": args.threads,
                "max_tokens": args.max_tokens, "num_speculative_tokens": args.num_tokens, "repeats": args.repeats,
                "draft_model": args.draft_model,
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "python": platform.python_version()}
        pathlib.Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    if not all(r["equal_to_plain"] for r in rows):
        sys.exit("some speculative run's tokens differ from plain decoding's")


if __name__ == "__main__":
    main()
