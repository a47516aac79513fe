#!/usr/bin/env python3
"""Draw the CPU comparison of deepinfer against llama.cpp as an SVG bar chart.

Reads the result files that bench/run_vs_llamacpp.py writes into bench/results/ and draws two
panels, prefill and decode tokens per second: one group of bars per (model, threads), llama.cpp
in grey and deepinfer in colour, each bar the median over the repetitions, with the ratio
deepinfer / llama.cpp above every group. Standard library only; same input, same bytes.

    python3 bench/plot_vs_llamacpp.py                       # newest result file of every model
    python3 bench/plot_vs_llamacpp.py bench/results/run_vs_llamacpp-X-20261201T071633Z.json ...
    python3 bench/plot_vs_llamacpp.py --out /tmp/chart.svg

Without paths it takes, for each model, the result file with the newest timestamp in its name
(the .json one; the .csv one only where no .json exists). The default output is
docs/img/cpu_vs_llamacpp.svg.
"""

import argparse
import csv
import json
import math
import pathlib
import re
import statistics
import sys
from xml.sax.saxutils import escape

REPO = pathlib.Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"
DEFAULT_OUT = REPO / "docs" / "img" / "cpu_vs_llamacpp.svg"
FILE_RE = re.compile(r"^run_vs_llamacpp-(?P<model>.+)-(?P<ts>\d{8}T\d{6}Z)\.(?P<ext>json|csv)$")

WIDTH = 900
FONT = "font-family=\"Helvetica, Arial, sans-serif\""
COLOURS = {"llamacpp": "#a0a0a0", "deepinfer": "#2b6cb0"}
NAMES = {"llamacpp": "llama.cpp", "deepinfer": "deepinfer"}
METRICS = [("prefill_tps", "prefill"), ("decode_tps", "decode")]


# ---- reading the result files ----

def newest_files(results_dir: pathlib.Path) -> list[pathlib.Path]:
    """For each model, the result file with the newest timestamp (.json before .csv)."""
    best: dict[str, tuple[str, int, pathlib.Path]] = {}
    for path in sorted(results_dir.glob("run_vs_llamacpp-*")):
        m = FILE_RE.match(path.name)
        if not m:
            continue
        key = (m["ts"], 1 if m["ext"] == "json" else 0, path)
        if m["model"] not in best or key[:2] > best[m["model"]][:2]:
            best[m["model"]] = key
    return [best[model][2] for model in sorted(best)]


def load_json(path: pathlib.Path) -> dict:
    res = json.loads(path.read_text(encoding="utf-8"))
    runs = [{"threads": int(r["threads"]), "engine": r["engine"], "prefill_tps": float(r["prefill_tps"]),
             "decode_tps": float(r["decode_tps"])} for r in res.get("runs", [])]
    machine = res.get("machine", {})
    return {"model": pathlib.Path(res.get("model_file", "")).stem or model_from_name(path), "runs": runs,
            "prompt_tokens": res.get("prompt_tokens"), "gen_tokens": res.get("gen_tokens"),
            "commit": res.get("deepinfer_commit"), "date": machine.get("date"),
            "cpu": machine.get("cpu"), "cores": machine.get("cores"),
            "llamacpp": res.get("versions", {}).get("llama_cpp_python")}


def load_csv(path: pathlib.Path) -> dict:
    with open(path, newline="", encoding="utf-8") as f:
        runs = [{"threads": int(r["threads"]), "engine": r["engine"], "prefill_tps": float(r["prefill_tok_s"]),
                 "decode_tps": float(r["decode_tok_s"])} for r in csv.DictReader(f)]
    m = FILE_RE.match(path.name)
    date = f"{m['ts'][0:4]}-{m['ts'][4:6]}-{m['ts'][6:8]}" if m else None
    return {"model": model_from_name(path), "runs": runs, "prompt_tokens": None, "gen_tokens": None,
            "commit": None, "date": date, "cpu": None, "cores": None, "llamacpp": None}


def model_from_name(path: pathlib.Path) -> str:
    m = FILE_RE.match(path.name)
    return m["model"] if m else path.stem


def load(path: pathlib.Path) -> dict:
    res = load_json(path) if path.suffix == ".json" else load_csv(path)
    if not res["runs"]:
        sys.exit(f"{path}: no repetitions in it")
    res["path"] = path
    return res


# ---- from repetitions to bar groups ----

def model_label(stem: str) -> str:
    """'SmolLM2-135M-Instruct.Q4_1' -> 'SmolLM2-135M Q4_1', 'gemma-3-270m-q4_k_m' -> 'gemma-3-270m Q4_K_M'."""
    m = re.match(r"^(?P<name>.+?)[.\-_](?P<quant>(?:i?q\d[\w]*|f16|bf16|f32))$", stem, re.IGNORECASE)
    name, quant = (m["name"], m["quant"].upper()) if m else (stem, "")
    name = re.sub(r"[-_.](instruct|it|chat)$", "", name, flags=re.IGNORECASE)
    return f"{name} {quant}".strip()


def model_size(label: str) -> float:
    """Parameter count read from the name ('135M', '1.5B'), to put small models first."""
    m = re.search(r"(\d+(?:\.\d+)?)([mb])(?![a-z])", label, re.IGNORECASE)
    if not m:
        return math.inf
    return float(m[1]) * (1e9 if m[2].lower() == "b" else 1e6)


def median_of(runs: list[dict], threads: int, engine: str, key: str) -> float | None:
    vals = [r[key] for r in runs if r["threads"] == threads and r["engine"] == engine]
    return statistics.median(vals) if vals else None


def groups_of(res: dict) -> list[dict]:
    """One bar group per thread count: the medians of both engines for prefill and decode."""
    out = []
    for t in sorted({r["threads"] for r in res["runs"]}):
        group = {"model": res["label"], "threads": t,
                 "reps": len([r for r in res["runs"] if r["threads"] == t and r["engine"] == "llamacpp"])}
        for key, _ in METRICS:
            group[key] = {e: median_of(res["runs"], t, e, key) for e in COLOURS}
        out.append(group)
    return out


def label_results(results: list[dict]) -> None:
    """Short model names; runs of the same model told apart by commit or file timestamp."""
    for res in results:
        res["label"] = model_label(res["model"])
    for res in results:
        if sum(r["label"] == res["label"] for r in results) > 1:
            m = FILE_RE.match(res["path"].name)
            res["label"] += f" ({res['commit'] or (m['ts'] if m else res['path'].name)})"


# ---- SVG pieces ----

def fmt(x: float) -> str:
    s = f"{x:.1f}"
    return s[:-2] if s.endswith(".0") else s


def text(x: float, y: float, s: str, size: int = 12, anchor: str = "middle", extra: str = "") -> str:
    return (f'<text x="{fmt(x)}" y="{fmt(y)}" font-size="{size}" text-anchor="{anchor}"{extra}>'
            f"{escape(s)}</text>")


def rect(x: float, y: float, w: float, h: float, fill: str, tooltip: str = "") -> str:
    inner = f"<title>{escape(tooltip)}</title>" if tooltip else ""
    return (f'<rect x="{fmt(x)}" y="{fmt(y)}" width="{fmt(w)}" height="{fmt(h)}" fill="{fill}">'
            f"{inner}</rect>")


def line(x1: float, y1: float, x2: float, y2: float, stroke: str, width: float = 1) -> str:
    return (f'<line x1="{fmt(x1)}" y1="{fmt(y1)}" x2="{fmt(x2)}" y2="{fmt(y2)}" stroke="{stroke}" '
            f'stroke-width="{fmt(width)}"/>')


def nice_step(top: float, max_ticks: int = 5) -> float:
    """A round tick step (1, 2, 2.5 or 5 times a power of ten) giving at most max_ticks intervals."""
    raw = top / max_ticks
    power = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 2.5, 5, 10):
        if mult * power >= raw:
            return mult * power
    return 10 * power


def threads_text(n: int) -> str:
    return f"{n} thread" if n == 1 else f"{n} threads"


def tick_label(v: float) -> str:
    return f"{v:,.0f}" if v >= 1 or v == 0 else f"{v:g}"


# ---- the figure ----

PLOT_TOP, PLOT_BOTTOM = 78, 326


def panel(x0: float, width: float, title: str, key: str, groups: list[dict]) -> list[str]:
    """One panel: y axis with round ticks, bar pairs per group, ratio above, group labels below."""
    left, right = x0 + 48, x0 + width
    vals = [v for g in groups for v in g[key].values() if v is not None]
    top = max(vals) * 1.1 if vals else 1.0
    step = nice_step(top)
    axis_max = math.ceil(top / step) * step
    y_of = lambda v: PLOT_BOTTOM - (PLOT_BOTTOM - PLOT_TOP) * v / axis_max  # noqa: E731
    out = [text((left + right) / 2, PLOT_TOP - 22, title, 14, extra=' font-weight="bold"')]
    for i in range(round(axis_max / step) + 1):
        v, y = i * step, y_of(i * step)
        out.append(line(left, y, right, y, "#e2e2e2" if i else "#555555"))
        out.append(text(left - 6, y + 4, tick_label(v), 11, "end", ' fill="#444444"'))
    gw = (right - left) / max(1, len(groups))
    bw = min(34.0, gw * 0.32)
    for i, g in enumerate(groups):
        cx = left + gw * (i + 0.5)
        out += bars(cx, bw, g, key, y_of)
        out.append(text(cx, PLOT_BOTTOM + 16, threads_text(g["threads"]), 11))
    out += model_labels(left, gw, groups)
    return out


def bars(cx: float, bw: float, g: dict, key: str, y_of) -> list[str]:
    """The two bars of a group (llama.cpp left, deepinfer right) and the ratio above them."""
    out = []
    for j, engine in enumerate(COLOURS):
        v = g[key][engine]
        if v is None:
            continue
        x = cx - bw - 1 + j * (bw + 2)
        tip = f"{g['model']}, {threads_text(g['threads'])}, {NAMES[engine]}: {v:.1f} tok/s (median of {g['reps']})"
        out.append(rect(x, y_of(v), bw, PLOT_BOTTOM - y_of(v), COLOURS[engine], tip))
    ours, theirs = g[key]["deepinfer"], g[key]["llamacpp"]
    if ours is not None and theirs:
        y = y_of(max(ours, theirs)) - 6
        out.append(text(cx, y, f"{ours / theirs:.2f}x", 12, extra=' font-weight="bold" fill="#222222"'))
    return out


def model_labels(left: float, gw: float, groups: list[dict]) -> list[str]:
    """The model name once under its run of adjacent groups, with a bracket line above it."""
    out, start = [], 0
    for i in range(1, len(groups) + 1):
        if i == len(groups) or groups[i]["model"] != groups[start]["model"]:
            x1, x2 = left + gw * start + 6, left + gw * i - 6
            out.append(line(x1, PLOT_BOTTOM + 24, x2, PLOT_BOTTOM + 24, "#999999"))
            out.append(text((x1 + x2) / 2, PLOT_BOTTOM + 38, groups[start]["model"], 12))
            start = i
    return out


def legend(x: float, y: float) -> list[str]:
    out = []
    for engine, colour in COLOURS.items():
        out.append(rect(x, y - 10, 12, 12, colour))
        out.append(text(x + 17, y, NAMES[engine], 12, "start"))
        x += 95
    return out


def caption(results: list[dict], groups: list[dict]) -> list[str]:
    """What the bars are, then provenance: deepinfer commit and date, llama.cpp version, machine."""
    reps = sorted({g["reps"] for g in groups})
    what = f"median of {reps[0]} repetitions" if len(reps) == 1 else "median over the repetitions"
    lines = [f"Bar height: {what}, each in a fresh process; higher is better. "
             "Above each pair: deepinfer / llama.cpp."]
    runs = []
    for res in results:
        if not any(r["engine"] == "deepinfer" for r in res["runs"]):
            continue
        s = ", ".join(p for p in (res["commit"] or "commit unknown", res["date"]) if p)
        if s not in runs:
            runs.append(s)
    parts = ["deepinfer " + "; ".join(runs)] if runs else []
    versions = sorted({r["llamacpp"] for r in results if r["llamacpp"]})
    if versions:
        parts.append("llama-cpp-python " + ", ".join(versions))
    parts += sorted({f"{r['cpu']}, {r['cores']} cores" for r in results if r["cpu"]})
    return lines + (wrap(". ".join(parts) + ".", 150) if parts else [])


def wrap(s: str, width: int) -> list[str]:
    lines, cur = [], ""
    for word in s.split(" "):
        if cur and len(cur) + 1 + len(word) > width:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    return lines + [cur] if cur else lines


def common(results: list[dict], key: str, default: int) -> int | None:
    vals = {r[key] for r in results if r[key] is not None}
    return vals.pop() if len(vals) == 1 else (default if not vals else None)


def svg(results: list[dict]) -> str:
    groups = [g for res in results for g in groups_of(res)]
    prompt, gen = common(results, "prompt_tokens", 512), common(results, "gen_tokens", 128)
    titles = [f"prefill tok/s ({prompt}-token prompt)" if prompt else "prefill tok/s",
              f"decode tok/s ({gen} tokens)" if gen else "decode tok/s"]
    notes = caption(results, groups)
    height = PLOT_BOTTOM + 62 + 15 * len(notes)
    body = [text(20, 26, "deepinfer vs llama.cpp on CPU", 16, "start", ' font-weight="bold"')]
    body += legend(WIDTH - 215, 26)
    for i, ((key, _), title) in enumerate(zip(METRICS, titles)):
        body += panel(10 + i * (WIDTH - 10) / 2, (WIDTH - 10) / 2 - 20, title, key, groups)
    for i, note in enumerate(notes):
        body.append(text(20, PLOT_BOTTOM + 64 + 15 * i, note, 10, "start", ' fill="#555555"'))
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" {FONT}>')
    return "\n".join(['<?xml version="1.0" encoding="UTF-8"?>', head,
                      f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>', *body, "</svg>"]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=pathlib.Path,
                    help="result files (.json or .csv); default: the newest one of every model")
    ap.add_argument("--results", type=pathlib.Path, default=RESULTS_DIR, help="where to look without files")
    ap.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    paths = args.files or newest_files(args.results)
    if not paths:
        sys.exit(f"no run_vs_llamacpp-*.json/.csv files in {args.results}")
    results = [load(p) for p in paths]
    label_results(results)
    if not args.files:
        results.sort(key=lambda r: (model_size(r["label"]), r["label"].lower()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(svg(results).encode("utf-8"))
    for p in paths:
        print(f"read {p}", file=sys.stderr)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
