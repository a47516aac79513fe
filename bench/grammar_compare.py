#!/usr/bin/env python3
"""deepinfer's grammar engine beside llguidance and xgrammar on one MaskBench sample, one table.

    python3 bench/grammar_compare.py --setup                     # the peers' venvs under build/peers
    python3 bench/grammar_compare.py --data PATH/TO/maskbench --n 335 --seed 22

A seeded sample of N files of --data (symlinks under build/grammar-compare/, the data is never
copied) goes through `deepinfer bench grammar --threads 1` and bench/grammar_peers.py for each
peer, for each vocabulary (default: SmolLM2-135M's GGUF and the DeepSeek V4 tokenizer from the
model cache), the engines taking turns in a rotating order so that a change of machine load
falls on all of them. Before timing, the peers' encoder is checked against `deepinfer tokenize`
on --check-tokens instances. Prints a markdown table (schemas compiled and passing, valid
accepted, invalid wrongly accepted, TBM p50/p99/p99.9/max, TTFM p50/p99) with the load average
around every run, and writes the summaries to bench/results/grammar_compare-<time>.json; the
per-schema JSONL files stay under build/grammar-compare/.
"""

import argparse
import datetime
import json
import os
import pathlib
import platform
import random
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import grammar_stats  # noqa: E402
import grammar_vocab  # noqa: E402
from grammar_peers import serialize  # noqa: E402

WORK = REPO / "build" / "grammar-compare"
PEERS = REPO / "build" / "peers"
# The versions the committed results were measured with.
PEER_PACKAGES = {"llguidance": ["llguidance==1.9.1"], "xgrammar": ["xgrammar==0.2.9"]}
PEER_VENV = {"llguidance": PEERS / "venv-llg", "xgrammar": PEERS / "venv-xgr"}
DEFAULT_VOCABS = ["SmolLM2-135M-Instruct.Q4_1.gguf", "deepseek-v4-tokenizer"]


def model_cache_dir() -> pathlib.Path:
    """The same rule as deepinfer's model_cache_dir() (src/model/catalog.cpp)."""
    if os.environ.get("DEEPINFER_MODEL_DIR"):
        return pathlib.Path(os.environ["DEEPINFER_MODEL_DIR"])
    return pathlib.Path.home() / ".cache" / "deepinfer" / "models"


def setup():
    for engine, packages in PEER_PACKAGES.items():
        venv = PEER_VENV[engine]
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *packages, "tokenizers", "gguf"],
                       check=True)
        print(f"{engine}: {venv}")


def make_sample(data: pathlib.Path, n: int, seed: int) -> pathlib.Path:
    files = sorted(p for p in data.iterdir() if p.suffix == ".json")
    chosen = sorted(random.Random(seed).sample(files, min(n, len(files))))
    out = WORK / f"sample-{seed}-{len(chosen)}"
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    for f in chosen:
        (out / f.name).symlink_to(f.resolve())
    return out


def check_tokens(deepinfer: str, vocab_path: str, sample: pathlib.Path, count: int) -> str:
    """The peers' encoder against `deepinfer tokenize` on the first `count` instances."""
    vocab = grammar_vocab.load_vocab(vocab_path)
    encode = vocab.encoder()
    texts = []
    for f in sorted(sample.iterdir()):
        try:
            texts += [serialize(t["data"]) for t in json.loads(f.read_text(encoding="utf-8"))["tests"]]
        except (ValueError, KeyError, UnicodeDecodeError):
            continue
        if len(texts) >= count:
            break
    tmp = WORK / "tokens.txt"
    bad = 0
    for text in texts[:count]:
        tmp.write_text(text, encoding="utf-8")
        out = subprocess.run([deepinfer, "tokenize", "--tokenizer", vocab_path, "--file", str(tmp)],
                             capture_output=True, text=True, check=True).stdout.strip()
        bad += [int(x) for x in out.split(",") if x] != encode(text)
    return f"{min(count, len(texts)) - bad}/{min(count, len(texts))} instances tokenized alike"


def run_engine(engine, vocab_path, sample, args, stamp):
    jsonl = WORK / f"{stamp}-{engine}-{pathlib.Path(vocab_path).stem}.jsonl"
    if engine == "deepinfer":
        cmd = [args.deepinfer, "bench", "grammar", "--data", str(sample), "--tokenizer", vocab_path,
               "--threads", "1", "--jsonl", str(jsonl)]
    else:
        cmd = [str(PEER_VENV[engine] / "bin" / "python"), str(REPO / "bench" / "grammar_peers.py"), "--engine", engine,
               "--data", str(sample), "--tokenizer", vocab_path, "--jsonl", str(jsonl),
               "--timeout-s", str(args.timeout_s)]
    load_before = os.getloadavg()
    t0 = time.time()
    with open(jsonl.with_suffix(".log"), "w") as log:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    if proc.returncode != 0:
        return {"engine": engine, "error": f"exit {proc.returncode}, see {jsonl.with_suffix('.log')}"}
    summary = json.loads(proc.stdout.strip().splitlines()[-1])["summary"]
    rows = grammar_stats.read_jsonl(jsonl)
    return {"engine": engine, "version": summary.get("version"), "wall_s": round(time.time() - t0, 1),
            "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
            "summary": grammar_stats.summarize(rows), "jsonl": str(jsonl.relative_to(REPO))}


def sample_totals(sample):
    valid = invalid = 0
    for f in sample.iterdir():
        try:
            tests = json.loads(f.read_text(encoding="utf-8"))["tests"]
        except (ValueError, KeyError, UnicodeDecodeError):
            continue
        valid += sum(1 for t in tests if t.get("valid"))
        invalid += sum(1 for t in tests if not t.get("valid"))
    return valid, invalid


def fmt(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def ordered(runs):
    """Runs with a summary, grouped by vocabulary (in run order), engines in a fixed order."""
    vocabs = list(dict.fromkeys(r["vocab"] for r in runs))
    engines = ["deepinfer", "llguidance", "xgrammar"]
    cols = [r for r in runs if "summary" in r]
    return sorted(cols, key=lambda r: (vocabs.index(r["vocab"]), engines.index(r["engine"])
                                       if r["engine"] in engines else len(engines)))


def table(runs, totals):
    valid, invalid = totals
    cols = ordered(runs)
    head = "| | " + " | ".join(f"{r['engine']} {r['version'] or ''} · {r['vocab']}" for r in cols) + " |"
    lines = [head, "|---" + "|---:" * len(cols) + "|"]

    def row(label, f):
        lines.append(f"| {label} | " + " | ".join(f(r["summary"]) for r in cols) + " |")

    n = cols[0]["summary"]["schemas"] if cols else 0
    row("schemas compiled", lambda s: f"{s['compiled']} / {n}")
    row("schemas passing", lambda s: f"{s['passing']} / {n}")
    row("valid instances accepted", lambda s: f"{s['valid_accepted']} / {valid}")
    row("invalid instances wrongly accepted", lambda s: f"{s['invalid_accepted']} / {invalid}")
    for key, label in [("tbm_p50_us", "TBM p50"), ("tbm_p99_us", "TBM p99"), ("tbm_p999_us", "TBM p99.9"),
                       ("tbm_max_us", "TBM max"), ("tbm_mean_us", "TBM mean"), ("ttfm_p50_us", "TTFM p50"),
                       ("ttfm_p99_us", "TTFM p99")]:
        row(f"{label} (µs)", lambda s, k=key: fmt(s[k]))
    row("masks timed", lambda s: f"{s['n_masks']:,}")
    lines.append("| load average before → after (1 min) | " + " | ".join(
        f"{r['load_before'][0]} → {r['load_after'][0]}" for r in cols) + " |")
    return "\n".join(lines)


COLOURS = {"deepinfer": "#2b6cb0", "llguidance": "#333333", "xgrammar": "#d16626"}
CHART_METRICS = [("tbm_p50_us", "TBM p50"), ("tbm_p99_us", "TBM p99"), ("tbm_p999_us", "TBM p99.9"),
                 ("ttfm_p50_us", "TTFM p50"), ("ttfm_p99_us", "TTFM p99")]


def chart(runs) -> str:
    """Horizontal bars on a log scale (µs): one group per metric, one bar per engine and vocabulary."""
    import math
    from xml.sax.saxutils import escape

    cols = ordered(runs)
    bar, gap, left, width = 12, 14, 230, 520
    lo, hi = 1.0, max(max(r["summary"][k] for r in cols) for k, _ in CHART_METRICS) * 2

    def x(v):
        return left + width * (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))

    out, y = [], 30
    for key, label in CHART_METRICS:
        out.append(f'<text x="4" y="{y + 10}" font-size="13" font-weight="bold">{label}</text>')
        y += 16
        for r in cols:
            v = r["summary"][key]
            name = escape(f"{r['engine']} · {r['vocab']}")
            out.append(f'<text x="{left - 6}" y="{y + bar - 2}" font-size="10" text-anchor="end">{name}</text>')
            out.append(f'<rect x="{left}" y="{y}" width="{x(v) - left:.1f}" height="{bar - 2}" '
                       f'fill="{COLOURS.get(r["engine"], "#888")}"/>')
            out.append(f'<text x="{x(v) + 4:.1f}" y="{y + bar - 2}" font-size="10">{fmt(v)}</text>')
            y += bar
        y += gap
    ticks = []
    for e in range(0, int(math.log10(hi)) + 1):
        tx = x(10 ** e)
        ticks.append(f'<line x1="{tx:.1f}" y1="20" x2="{tx:.1f}" y2="{y}" stroke="#ddd"/>'
                     f'<text x="{tx:.1f}" y="{y + 14}" font-size="10" text-anchor="middle">1e{e}</text>')
    title = '<text x="4" y="14" font-size="13">Mask times (µs, log scale), one thread; lower is better</text>'
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 90}" height="{y + 24}" '
            f'font-family="sans-serif">{title}{"".join(ticks)}{"".join(out)}</svg>\n')


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setup", action="store_true", help="create the peers' venvs and exit")
    ap.add_argument("--data", help="the MaskBench-format directory to sample")
    ap.add_argument("--n", type=int, default=335)
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--vocabs", default=",".join(str(model_cache_dir() / v) for v in DEFAULT_VOCABS))
    ap.add_argument("--engines", default="deepinfer,llguidance,xgrammar")
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "bin" / "deepinfer"))
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--check-tokens", type=int, default=20)
    ap.add_argument("--plot", help="write an SVG chart of the mask times here")
    ap.add_argument("--from", dest="from_result", help="a bench/results/grammar_compare-*.json: print its table (and "
                    "--plot) without running")
    args = ap.parse_args()
    if args.setup:
        return setup()
    if args.from_result:
        result = json.loads(pathlib.Path(args.from_result).read_text())
        print(table(result["runs"], (result["sample"]["valid"], result["sample"]["invalid"])))
        if args.plot:
            pathlib.Path(args.plot).write_text(chart(result["runs"]))
        return None
    if not args.data:
        ap.error("--data is required")
    WORK.mkdir(parents=True, exist_ok=True)
    sample = make_sample(pathlib.Path(args.data), args.n, args.seed)
    engines = args.engines.split(",")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    runs, checks = [], {}
    for vi, vocab in enumerate(args.vocabs.split(",")):
        name = pathlib.Path(vocab).name  # no path of this machine goes into bench/results
        checks[name] = check_tokens(args.deepinfer, vocab, sample, args.check_tokens)
        print(f"{name}: {checks[name]}", file=sys.stderr)
        order = engines[vi % len(engines):] + engines[:vi % len(engines)]
        for engine in order:
            r = run_engine(engine, vocab, sample, args, stamp)
            r["vocab"] = pathlib.Path(vocab).stem.split("-Instruct")[0]
            print(f"{engine} on {r['vocab']}: {r.get('wall_s', r.get('error'))} s", file=sys.stderr)
            runs.append(r)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    for r in runs:
        if r["engine"] == "deepinfer":
            r["version"] = commit
    totals = sample_totals(sample)
    md = table(runs, totals)
    print(md)
    result = {"stamp": stamp, "sample": {"n": args.n, "seed": args.seed, "valid": totals[0], "invalid": totals[1]},
              "machine": platform.processor() or platform.machine(), "token_checks": checks, "runs": runs,
              "table": md}
    out = REPO / "bench" / "results" / f"grammar_compare-{stamp}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    if args.plot:
        pathlib.Path(args.plot).write_text(chart(runs))
    print(f"\n{out.relative_to(REPO)}", file=sys.stderr)


if __name__ == "__main__":
    main()
