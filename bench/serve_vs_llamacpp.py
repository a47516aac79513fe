#!/usr/bin/env python3
"""Serving comparison: `deepinfer serve` against llama.cpp's `llama-server`, measured with
`deepinfer bench serve` (vLLM's metric definitions) on the same GGUF file.

llama-server is built once from the llama.cpp sources inside the llama-cpp-python source
distribution (vendor/llama.cpp), fetched with pip, compiled with CMake for this machine's CPU
(GGML_NATIVE=ON, as bench/setup_peers.sh builds the Python peer) and cached in build/peers/.
Both servers get the same threads, context per sequence and parallel slots; the sweep runs the
same concurrency points on each, alternating server by server at every point (a change of
machine load then hits both), with --num-prompts scaled to the concurrency.

    python3 bench/serve_vs_llamacpp.py --build-only                  # compile llama-server (minutes)
    python3 bench/serve_vs_llamacpp.py --models smollm2-135m-instruct,gemma3-270m \\
        --concurrency 1,4,16,64 --datasets random,prefix-repetition --update-docs

Results: bench/results/serve_vs_llamacpp-<timestamp>.json (every run's bench serve result),
the markdown table that --update-docs writes into docs/benchmarks.md, and the chart
docs/img/serve_vs_llamacpp.svg.
"""

import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
from xml.sax.saxutils import escape

REPO = pathlib.Path(__file__).resolve().parents[1]
PEERS = REPO / "build" / "peers"
RESULTS_DIR = REPO / "bench" / "results"
DOCS = REPO / "docs" / "benchmarks.md"
CHART = REPO / "docs" / "img" / "serve_vs_llamacpp.svg"
DOCS_BEGIN = "<!-- serve_vs_llamacpp:begin -->"
DOCS_END = "<!-- serve_vs_llamacpp:end -->"
LLAMA_CPP_PYTHON_VERSION = os.environ.get("LLAMA_CPP_PYTHON_VERSION", "0.3.36")
# GGML_NATIVE compiles for this CPU. AMX kernels are left out: on a machine that exposes AMX,
# llama.cpp's AMX path crashed in a native build (issue 23); without AMX the flag changes nothing.
CMAKE_FLAGS = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF",
               "-DGGML_AMX_BF16=OFF", "-DLLAMA_CURL=OFF", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF",
               "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON"]
KNOWN_FILES = {
    "smollm2-135m-instruct": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
}
NAMES = {"deepinfer": "deepinfer", "llamacpp": "llama-server"}
COLOURS = {"deepinfer": "#2b6cb0", "llamacpp": "#a0a0a0"}


def model_cache_dir() -> pathlib.Path:
    """The same rule as deepinfer's model_cache_dir() (src/model/catalog.cpp)."""
    if os.environ.get("DEEPINFER_MODEL_DIR"):
        return pathlib.Path(os.environ["DEEPINFER_MODEL_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = pathlib.Path(xdg) if xdg.startswith("/") else pathlib.Path.home() / ".cache"
    return base / "deepinfer" / "models"


# ---- building llama-server ----

def llama_server_path() -> pathlib.Path:
    return PEERS / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}" / "build" / "bin" / "llama-server"


def build_llama_server(jobs: int) -> pathlib.Path:
    binary = llama_server_path()
    if binary.exists():
        return binary
    PEERS.mkdir(parents=True, exist_ok=True)
    sdist = PEERS / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    if not sdist.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
                        "--no-binary", ":all:", f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", str(PEERS)],
                       check=True)
    src = PEERS / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"
    if not (src / "CMakeLists.txt").exists():
        prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp/"
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
            for m in members:
                m.name = m.name[len(prefix):]
            tar.extractall(src, members=[m for m in members if m.name], filter="data")
    build = src / "build"
    subprocess.run(["cmake", "-S", str(src), "-B", str(build), *CMAKE_FLAGS], check=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "llama-server", "-j", str(jobs)], check=True)
    return binary


# ---- the servers ----

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, log: pathlib.Path, timeout: float = 180) -> None:
    import urllib.request
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.3)
    proc.kill()
    sys.exit(f"server at {url} not ready within {timeout} s")


def start_server(kind: str, model: pathlib.Path, threads: int, ctx_per_seq: int, slots: int, log: pathlib.Path):
    port = free_port()
    if kind == "deepinfer":
        cmd = [str(REPO / "build" / "bin" / "deepinfer"), "serve", "-m", str(model), "--port", str(port),
               "-t", str(threads), "--max-num-seqs", str(slots), "--kv-cache-tokens", str(ctx_per_seq * slots),
               "--served-model-name", "m"]
    else:
        # -np slots with a total context of slots x ctx_per_seq: each slot gets ctx_per_seq, as
        # deepinfer's sequences share a KV cache of the same size. Continuous batching is on by default.
        cmd = [str(llama_server_path()), "-m", str(model), "--port", str(port), "-t", str(threads), "-tb", str(threads),
               "-np", str(slots), "-c", str(ctx_per_seq * slots), "--alias", "m", "--no-webui"]
    f = open(log, "w")
    proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, proc, log)
    return proc, url, cmd


def stop_server(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def first_request_ms(url: str) -> list[float]:
    """Time to the first streamed token of the first three requests after start (cold start)."""
    import http.client
    out = []
    host, port = url.removeprefix("http://").split(":")
    for i in range(3):
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        body = json.dumps({"model": "m", "prompt": f"Tell me about the river number {i}.", "max_tokens": 4,
                           "stream": True})
        t0 = time.perf_counter()
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        first = None
        while True:
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data:") and first is None:
                first = (time.perf_counter() - t0) * 1e3
        conn.close()
        out.append(first if first is not None else float("nan"))
    return out


def bench_point(url: str, dataset: str, concurrency: int, prompts: int, seed: int, args) -> dict:
    out = PEERS / "last_result.json"
    cmd = [str(REPO / "build" / "bin" / "deepinfer"), "bench", "serve", "--url", url, "--model", "m",
           "--dataset-name", dataset, "--num-prompts", str(prompts), "--max-concurrency", str(concurrency),
           "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
           "--prefix-repetition-prefix-len", str(args.input_len // 2),
           "--prefix-repetition-suffix-len", str(args.input_len - args.input_len // 2),
           "--prefix-repetition-num-prefixes", "4", "--prefix-repetition-output-len", str(args.output_len),
           "--seed", str(seed), "--disable-tqdm", "--result-filename", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench serve failed ({proc.returncode}):\n{proc.stderr}\n{proc.stdout}")
    result = json.loads(out.read_text())
    for key in ("input_lens", "output_lens", "ttfts", "itls", "errors"):
        result.pop(key, None)
    result["command"] = " ".join(cmd[1:]).replace(str(REPO) + "/", "")
    return result


# ---- the report ----

def cpu_model() -> str:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def cpu_flags() -> str:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            return " ".join(sorted(f for f in flags if re.match(r"avx512|amx|avx2|avx_vnni|fma", f)))
    return ""


def markdown(report: dict) -> str:
    lines = [DOCS_BEGIN, "",
             f"Measured {report['date']} on {report['cpu']} ({report['cpu_flags']}), {report['threads']} threads each, "
             f"{report['slots']} parallel slots, {report['ctx_per_seq']} tokens of context per slot; load average "
             f"before/after: {report['load_before']} / {report['load_after']}. llama-server from llama-cpp-python "
             f"{LLAMA_CPP_PYTHON_VERSION}'s sources, built with `{' '.join(CMAKE_FLAGS)}`; deepinfer {report['deepinfer_version']}. "
             f"Each point: `deepinfer bench serve --dataset-name D --max-concurrency C --num-prompts "
             f"max({report['min_prompts']}, {report['prompts_per_concurrency']}C)` with {report['input_len']}-token prompts and "
             f"{report['output_len']} output tokens (ignore_eos), streamed completions; the servers alternate at every point, and every point has its own seed (prompts no earlier point sent).",
             "",
             "| model | dataset | concurrency | output tok/s deepinfer | llama-server | ratio | TTFT p50 ms deepinfer | llama-server | TTFT p99 ms deepinfer | llama-server | TPOT p50 ms deepinfer | llama-server |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in report["rows"]:
        d, l = row["deepinfer"], row["llamacpp"]
        ratio = d["output_throughput"] / l["output_throughput"] if l["output_throughput"] else float("nan")
        lines.append(f"| {row['model']} | {row['dataset']} | {row['concurrency']} | {d['output_throughput']:.1f} | "
                     f"{l['output_throughput']:.1f} | {ratio:.2f} | {d['median_ttft_ms']:.0f} | {l['median_ttft_ms']:.0f} | "
                     f"{d['p99_ttft_ms']:.0f} | {l['p99_ttft_ms']:.0f} | {d['median_tpot_ms']:.1f} | {l['median_tpot_ms']:.1f} |")
    lines.append("")
    for model, cold in report["cold_start"].items():
        lines.append(f"First three requests after start, time to first token (ms), {model}: deepinfer "
                     f"{', '.join(f'{v:.0f}' for v in cold['deepinfer'])}; llama-server "
                     f"{', '.join(f'{v:.0f}' for v in cold['llamacpp'])}.")
    lines += ["", "![serving: deepinfer against llama-server](img/serve_vs_llamacpp.svg)", "", DOCS_END]
    return "\n".join(lines)


def chart(report: dict) -> str:
    """Output throughput and TTFT p50 against concurrency, one pair of panels per (model, dataset)."""
    groups = []
    for row in report["rows"]:
        key = (row["model"], row["dataset"])
        if key not in [g[0] for g in groups]:
            groups.append((key, []))
        next(g for g in groups if g[0] == key)[1].append(row)
    pw, ph, left, top, gap_x, gap_y = 360, 180, 70, 40, 90, 80
    width = left + 2 * pw + gap_x + 30
    height = top + len(groups) * (ph + gap_y) + 10
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="Helvetica, Arial, sans-serif">',
         '<rect width="100%" height="100%" fill="white"/>',
         f'<text x="{left}" y="20" font-size="15" font-weight="bold">deepinfer serve vs llama-server, {report["threads"]} threads '
         f'({escape(report["cpu"])})</text>']
    import math
    for gi, ((model, dataset), rows) in enumerate(groups):
        y0 = top + gi * (ph + gap_y) + 20
        conc = [r["concurrency"] for r in rows]
        lx = [math.log2(c) for c in conc]
        lo, hi = min(lx), max(lx) if max(lx) > min(lx) else min(lx) + 1
        for pi, (metric, unit) in enumerate([("output_throughput", "output tok/s"), ("median_ttft_ms", "TTFT p50 ms")]):
            x0 = left + pi * (pw + gap_x)
            vmax = max(r[k][metric] for r in rows for k in ("deepinfer", "llamacpp")) or 1
            p10 = 10 ** math.floor(math.log10(vmax))
            vmax = next(m * p10 for m in (1, 2, 5, 10) if m * p10 >= vmax)
            s.append(f'<text x="{x0}" y="{y0 - 8}" font-size="12">{escape(model)}, {escape(dataset)}: {unit}</text>')
            s.append(f'<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
            for i in range(5):
                v = vmax * i / 4
                y = y0 + ph - ph * i / 4
                s.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{v:g}</text>')
            for c, l in zip(conc, lx):
                x = x0 + (l - lo) / (hi - lo) * pw
                s.append(f'<text x="{x:.1f}" y="{y0 + ph + 14}" font-size="10" text-anchor="middle">{c}</text>')
            for k in ("llamacpp", "deepinfer"):
                pts = " ".join(f'{x0 + (l - lo) / (hi - lo) * pw:.1f},{y0 + ph - r[k][metric] / vmax * ph:.1f}'
                               for r, l in zip(rows, lx))
                s.append(f'<polyline fill="none" stroke="{COLOURS[k]}" stroke-width="2" points="{pts}"/>')
            for j, k in enumerate(("deepinfer", "llamacpp")):
                s.append(f'<text x="{x0 + 8}" y="{y0 + 14 + 13 * j}" font-size="10" fill="{COLOURS[k]}">{NAMES[k]}</text>')
            s.append(f'<text x="{x0 + pw / 2}" y="{y0 + ph + 28}" font-size="10" text-anchor="middle">concurrency</text>')
    s.append("</svg>")
    return "\n".join(s) + "\n"


def update_docs(text: str) -> None:
    doc = DOCS.read_text()
    if DOCS_BEGIN in doc:
        start = doc.index(DOCS_BEGIN)
        end = doc.index(DOCS_END) + len(DOCS_END)
        doc = doc[:start] + text + doc[end:]
    else:
        doc = doc.rstrip("\n") + "\n\n## Serving\n\n" + text + "\n"
    DOCS.write_text(doc)


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="compile jobs for llama-server")
    ap.add_argument("--models", default="smollm2-135m-instruct,gemma3-270m")
    ap.add_argument("--datasets", default="random,prefix-repetition")
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--ctx-per-seq", type=int, default=512)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--min-prompts", type=int, default=8)
    ap.add_argument("--prompts-per-concurrency", type=int, default=2)
    ap.add_argument("--update-docs", action="store_true")
    args = ap.parse_args()

    build_llama_server(args.jobs)
    if args.build_only:
        print(llama_server_path())
        return
    if not (REPO / "build" / "bin" / "deepinfer").exists():
        sys.exit("build deepinfer first (cmake --build build --target deepinfer)")
    version = subprocess.run([str(REPO / "build" / "bin" / "deepinfer"), "version"], capture_output=True, text=True).stdout.strip()
    report = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cpu": cpu_model(),
              "cpu_flags": cpu_flags(), "threads": args.threads, "slots": args.slots, "ctx_per_seq": args.ctx_per_seq,
              "input_len": args.input_len, "output_len": args.output_len, "min_prompts": args.min_prompts,
              "prompts_per_concurrency": args.prompts_per_concurrency, "deepinfer_version": version,
              "llama_cpp_python": LLAMA_CPP_PYTHON_VERSION, "cmake_flags": CMAKE_FLAGS, "load_before": load_average(),
              "rows": [], "cold_start": {}}
    concurrency = [int(c) for c in args.concurrency.split(",")]
    for name in args.models.split(","):
        model = model_cache_dir() / KNOWN_FILES.get(name, name)
        servers = {}
        for kind in ("deepinfer", "llamacpp"):
            log = PEERS / f"{kind}-{name}.log"
            servers[kind] = start_server(kind, model, args.threads, args.ctx_per_seq, args.slots, log)
        try:
            report["cold_start"][name] = {k: first_request_ms(servers[k][1]) for k in servers}
            for dataset in args.datasets.split(","):
                for c in concurrency:
                    prompts = max(args.min_prompts, args.prompts_per_concurrency * c)
                    row = {"model": name, "dataset": dataset, "concurrency": c}
                    # Both servers get the same prompts at a point, and every point new ones: with
                    # one seed for all, a point's prompts were the earlier points' again, and each
                    # server's prefix or slot cache answered them (llama-server's slots keep a whole
                    # prompt; a Gemma 3 hit in deepinfer replays its 512-token window, all of it).
                    seed = 1 + len(report["rows"])
                    for kind in ("deepinfer", "llamacpp"):
                        print(f"{name} {dataset} c={c} {kind} ({prompts} prompts, seed {seed})", flush=True)
                        row[kind] = bench_point(servers[kind][1], dataset, c, prompts, seed, args)
                    report["rows"].append(row)
        finally:
            for proc, _, _ in servers.values():
                stop_server(proc)
    report["load_after"] = load_average()
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    (RESULTS_DIR / f"serve_vs_llamacpp-{stamp}.json").write_text(json.dumps(report, indent=1) + "\n")
    text = markdown(report)
    print(text)
    if args.update_docs:
        CHART.write_text(chart(report))
        update_docs(text)


if __name__ == "__main__":
    main()
