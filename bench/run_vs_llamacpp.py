#!/usr/bin/env python3
"""Prefill and decode speed of `deepinfer run` against llama.cpp on the same GGUF file.

Both engines get the same 512 prompt token ids (a fixed English text tokenized by llama.cpp,
repeated and cut), generate 128 tokens greedily without stopping at end-of-sequence, and use
the same thread count. Each measurement is a fresh process (model load not timed), and the two
engines alternate within every repetition so that a change in machine load hits both. The
table reports medians and the ratio ours / llama.cpp (above 1: deepinfer is faster).

The context is 1024 tokens in both engines, or prompt plus generated tokens where that is more
(--prompt-tokens 8192: llama.cpp's n_ctx and deepinfer's --kv-cache-tokens are 8320); a model
whose own context is shorter (SmolLM2: 8192) needs prompt plus generated tokens within it.

    bench/setup_peers.sh                                  # llama-cpp-python into build/bench-venv
    build/bench-venv/bin/python bench/run_vs_llamacpp.py --threads 1,2 --reps 5 --update-docs

Results go to bench/results/ (JSON with every repetition, CSV, and the markdown table that
--update-docs writes into docs/benchmarks.md).
"""

import argparse
import csv
import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"
DOCS = REPO / "docs" / "benchmarks.md"
DOCS_BEGIN = "<!-- run_vs_llamacpp:begin -->"
DOCS_END = "<!-- run_vs_llamacpp:end -->"

KNOWN_FILES = {
    "smollm2-135m-instruct": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
}

PROMPT_TEXT = (
    "The history of the printing press begins long before Gutenberg. In China, craftsmen carved "
    "whole pages into wooden blocks and pressed them onto paper, and later experimented with "
    "movable type made of baked clay. In Europe, the demand for books grew with the universities "
    "and the merchant towns, but every copy still had to be written by hand. Around 1450, a "
    "goldsmith in Mainz combined several ideas: metal type cast in a hand mould, an oil-based ink "
    "that stuck to metal, and a screw press adapted from the ones used to make wine. The result "
    "was a workshop that could produce hundreds of identical pages a day. Within fifty years, "
    "presses were running in more than two hundred cities, and the price of a book had fallen so "
    "far that students, priests and traders could own them. Scholars began to compare editions, "
    "correct errors and print tables of numbers that no scribe would have copied reliably. "
)


def model_cache_dir() -> pathlib.Path:
    """The same rule as deepinfer's model_cache_dir() (src/model/catalog.cpp)."""
    if os.environ.get("DEEPINFER_MODEL_DIR"):
        return pathlib.Path(os.environ["DEEPINFER_MODEL_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = pathlib.Path(xdg) if xdg.startswith("/") else pathlib.Path.home() / ".cache"
    return base / "deepinfer" / "models"


def resolve_model(arg: str) -> pathlib.Path:
    path = pathlib.Path(arg)
    if path.is_file():
        return path.resolve()
    if arg in KNOWN_FILES:
        cached = model_cache_dir() / KNOWN_FILES[arg]
        if cached.is_file():
            return cached
        sys.exit(f"model '{arg}' is not in the cache; run `build/bin/deepinfer pull {arg}`")
    sys.exit(f"model '{arg}' is neither a file nor one of {', '.join(KNOWN_FILES)}")


def make_prompt_ids(model_path: pathlib.Path, n_tokens: int) -> list[int]:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(model_path), vocab_only=True, verbose=False)
    add_bos = bool(llm._model.add_bos_token())
    body = llm.tokenize(PROMPT_TEXT.encode("utf-8"), add_bos=False, special=False)
    ids = [llm.token_bos()] if add_bos else []
    while len(ids) < n_tokens:
        ids.extend(body)
    return ids[:n_tokens]


# ---- the llama.cpp half: runs in its own process (python bench/run_vs_llamacpp.py --peer ...) ----

def peer_worker(model_path: str, ids: list[int], n_gen: int, threads: int, flash_attn: bool,
                n_ctx: int = 1024) -> dict:
    import numpy as np
    import llama_cpp

    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=model_path, n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=threads,
                          n_threads_batch=threads, logits_all=False, flash_attn=flash_attn, verbose=False)
    load_ms = (time.perf_counter() - t0) * 1e3
    ctx = llm._ctx.ctx
    n_vocab = llm.n_vocab()

    def greedy() -> int:
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
        return int(np.argmax(logits))

    llama_cpp.llama_perf_context_reset(ctx)
    t0 = time.perf_counter()
    llm.eval(ids)
    token = greedy()
    prompt_wall_ms = (time.perf_counter() - t0) * 1e3
    generated = []
    t0 = time.perf_counter()
    for _ in range(n_gen):
        generated.append(token)
        llm.eval([token])
        token = greedy()
    generate_wall_ms = (time.perf_counter() - t0) * 1e3
    perf = llama_cpp.llama_perf_context(ctx)
    # llama.cpp's own counters time llama_decode alone (batches of one token count as eval);
    # they are the primary figures, the wall-clock ones add the Python binding's overhead.
    return {
        "generated_token_ids": generated,
        "timings": {
            "load_ms": load_ms,
            "prompt_tokens": len(ids),
            "prompt_ms": perf.t_p_eval_ms,
            "prompt_tokens_per_second": perf.n_p_eval / perf.t_p_eval_ms * 1e3,
            "generated_tokens": perf.n_eval,
            "generate_ms": perf.t_eval_ms,
            "generate_tokens_per_second": perf.n_eval / perf.t_eval_ms * 1e3,
            "prompt_wall_ms": prompt_wall_ms,
            "generate_wall_ms": generate_wall_ms,
        },
    }


# ---- the driver ----

def run_llamacpp(model: pathlib.Path, ids: list[int], n_gen: int, threads: int, flash_attn: bool) -> dict:
    req = json.dumps({"model": str(model), "ids": ids, "n_gen": n_gen, "threads": threads, "flash_attn": flash_attn,
                      "n_ctx": context_tokens(len(ids), n_gen)})
    proc = subprocess.run([sys.executable, __file__, "--peer"], input=req, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"llama.cpp worker failed (exit {proc.returncode}):\n{proc.stderr}")
    return json.loads(proc.stdout)


def context_tokens(n_prompt: int, n_gen: int) -> int:
    """The context both engines get: 1024 tokens (as always) unless the prompt and generation need more."""
    return max(1024, n_prompt + n_gen)


def run_deepinfer(binary: pathlib.Path, model: pathlib.Path, ids: list[int], n_gen: int, threads: int) -> dict:
    cmd = [str(binary), "run", "-m", str(model), "--prompt-tokens", ",".join(map(str, ids)), "-n", str(n_gen),
           "--threads", str(threads), "--temp", "0", "--json", "--ignore-eos"]
    if len(ids) + n_gen > 1024:
        cmd += ["--kv-cache-tokens", str(context_tokens(len(ids), n_gen))]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"deepinfer failed (exit {proc.returncode}):\n{proc.stderr}")
    out = json.loads(proc.stdout)
    t = out["timings"]
    if t["prompt_tokens"] != len(ids) or t["generated_tokens"] != n_gen:
        sys.exit(f"deepinfer ran {t['prompt_tokens']} prompt / {t['generated_tokens']} generated tokens, "
                 f"expected {len(ids)} / {n_gen}")
    return out


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_idle_percent(seconds: float = 3.0) -> float | None:
    """Share of CPU time idle over the next few seconds (Linux), to show how quiet the machine was."""
    def sample():
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)
    try:
        idle0, total0 = sample()
        time.sleep(seconds)
        idle1, total1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return 100.0 * (idle1 - idle0) / max(1, total1 - total0)


def git_commit() -> str:
    proc = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if proc.returncode != 0:
        return "uncommitted"
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return proc.stdout.strip() + ("-dirty" if dirty else "")


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def idle_text(machine: dict) -> str:
    idle = machine.get("cpu_idle_percent_before")
    return "" if idle is None else f"CPUs {idle:.0f}% idle just before the run, "


def markdown_table(res: dict) -> str:
    m = res["machine"]
    lines = [
        f"Model `{res['model_file']}`, {res['prompt_tokens']} prompt tokens, {res['gen_tokens']} generated "
        f"(greedy, end-of-sequence ignored), median of {res['reps']} alternating repetitions, each in a fresh "
        f"process. Machine: {m['cpu']}, {m['cores']} cores, {m['date']}; {idle_text(m)}load average "
        f"{m['loadavg_before']} before, {m['loadavg_after']} after. "
        f"{'deepinfer ' + res['deepinfer_commit'] + ', ' if res['deepinfer_commit'] else ''}"
        f"llama-cpp-python {res['versions'].get('llama_cpp_python')} (llama.cpp "
        f"{res['versions'].get('llama_cpp')}, ggml {res['versions'].get('ggml_commit')}, "
        f"built from source with GGML_NATIVE=ON, flash attention {'on' if res['flash_attn'] else 'off'}).",
        "",
        f"Command: `{res['command']}`",
        "",
        "| threads | engine | prefill tok/s | decode tok/s |",
        "|---:|---|---:|---:|",
    ]
    for row in res["summary"]:
        t = row["threads"]
        lines.append(f"| {t} | llama.cpp | {row['llamacpp_prefill']:.1f} | {row['llamacpp_decode']:.1f} |")
        if row.get("deepinfer_prefill") is not None:
            lines.append(f"| {t} | deepinfer | {row['deepinfer_prefill']:.1f} | {row['deepinfer_decode']:.1f} |")
            lines.append(f"| {t} | **ratio deepinfer / llama.cpp** | **{row['ratio_prefill']:.2f}** | "
                         f"**{row['ratio_decode']:.2f}** |")
    if any(r.get("greedy_agreement") is not None for r in res["summary"]):
        agree = ", ".join(f"{r['threads']} thread(s): {r['greedy_agreement']}" for r in res["summary"])
        lines += ["", f"Greedy continuations, tokens identical to llama.cpp's before the first difference "
                      f"(first repetition): {agree}."]
    return "\n".join(lines) + "\n"


def update_docs(block: str) -> None:
    text = DOCS.read_text(encoding="utf-8") if DOCS.exists() else ""
    if DOCS_BEGIN in text and DOCS_END in text:
        head, rest = text.split(DOCS_BEGIN, 1)
        _, tail = rest.split(DOCS_END, 1)
        text = f"{head}{DOCS_BEGIN}\n{block}{DOCS_END}{tail}"
    else:
        text += f"\n{DOCS_BEGIN}\n{block}{DOCS_END}\n"
    DOCS.write_text(text, encoding="utf-8")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--peer":
        req = json.loads(sys.stdin.read())
        json.dump(peer_worker(req["model"], req["ids"], req["n_gen"], req["threads"], req["flash_attn"],
                              req.get("n_ctx", 1024)), sys.stdout)
        return

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct", help="GGUF file or known model name")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--deepinfer", type=pathlib.Path, default=REPO / "build" / "bin" / "deepinfer")
    ap.add_argument("--llamacpp-only", action="store_true", help="measure llama.cpp alone")
    ap.add_argument("--flash-attn", action="store_true", help="llama.cpp with flash attention")
    ap.add_argument("--update-docs", action="store_true", help="write the table into docs/benchmarks.md")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    model = resolve_model(args.model)
    ours = not args.llamacpp_only
    if ours and not args.deepinfer.is_file():
        sys.exit(f"{args.deepinfer} not found; build it first (scripts/setup) or pass --llamacpp-only")

    import llama_cpp

    ids = make_prompt_ids(model, args.prompt_tokens)
    loadavg_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    idle_before = cpu_idle_percent()
    runs = []
    for rep in range(args.reps):
        for t in threads:
            # Alternate which engine goes first, so neither always runs on a cooler machine.
            order = ["llamacpp", "deepinfer"] if rep % 2 == 0 else ["deepinfer", "llamacpp"]
            for engine in order:
                if engine == "deepinfer" and not ours:
                    continue
                if engine == "llamacpp":
                    out = run_llamacpp(model, ids, args.gen_tokens, t, args.flash_attn)
                else:
                    out = run_deepinfer(args.deepinfer, model, ids, args.gen_tokens, t)
                tm = out["timings"]
                runs.append({"rep": rep, "threads": t, "engine": engine,
                             "prefill_tps": tm["prompt_tokens_per_second"],
                             "decode_tps": tm["generate_tokens_per_second"],
                             "generated_token_ids": out["generated_token_ids"], "timings": tm})
                print(f"rep {rep} threads {t} {engine:9s} prefill {tm['prompt_tokens_per_second']:8.1f} tok/s  "
                      f"decode {tm['generate_tokens_per_second']:7.1f} tok/s", file=sys.stderr)

    summary = []
    for t in threads:
        def med(engine, key):
            vals = [r[key] for r in runs if r["threads"] == t and r["engine"] == engine]
            return statistics.median(vals) if vals else None
        row = {"threads": t, "llamacpp_prefill": med("llamacpp", "prefill_tps"),
               "llamacpp_decode": med("llamacpp", "decode_tps"),
               "deepinfer_prefill": med("deepinfer", "prefill_tps"), "deepinfer_decode": med("deepinfer", "decode_tps")}
        if ours:
            row["ratio_prefill"] = row["deepinfer_prefill"] / row["llamacpp_prefill"]
            row["ratio_decode"] = row["deepinfer_decode"] / row["llamacpp_decode"]
            first = {r["engine"]: r["generated_token_ids"] for r in runs if r["threads"] == t and r["rep"] == 0}
            row["greedy_agreement"] = f"{common_prefix(first['deepinfer'], first['llamacpp'])}/{args.gen_tokens}"
        summary.append(row)

    now = datetime.datetime.now(datetime.timezone.utc)
    res = {
        "model_file": model.name,
        "prompt_tokens": args.prompt_tokens,
        "gen_tokens": args.gen_tokens,
        "reps": args.reps,
        "threads": threads,
        "flash_attn": args.flash_attn,
        "command": "build/bench-venv/bin/python bench/run_vs_llamacpp.py " + " ".join(sys.argv[1:]),
        "deepinfer_commit": git_commit() if ours else None,
        "versions": {"llama_cpp_python": llama_cpp.__version__, "llama_cpp": llama_cpp.llama_version().decode(),
                     **ggml_versions(llama_cpp)},
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "date": now.strftime("%Y-%m-%d"),
                    "loadavg_before": loadavg_before, "cpu_idle_percent_before": idle_before,
                    "loadavg_after": " ".join(f"{x:.2f}" for x in os.getloadavg())},
        "prompt_ids": ids,
        "summary": summary,
        "runs": runs,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stem = f"run_vs_llamacpp-{model.stem}-{now.strftime('%Y%m%dT%H%M%SZ')}"
    (RESULTS_DIR / f"{stem}.json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    with open(RESULTS_DIR / f"{stem}.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["rep", "threads", "engine", "prefill_tok_s", "decode_tok_s"])
        for r in runs:
            w.writerow([r["rep"], r["threads"], r["engine"], f"{r['prefill_tps']:.2f}", f"{r['decode_tps']:.2f}"])
    block = markdown_table(res)
    (RESULTS_DIR / f"{stem}.md").write_text(block, encoding="utf-8")
    print(block)
    print(f"wrote bench/results/{stem}.{{json,csv,md}}", file=sys.stderr)
    if args.update_docs:
        update_docs(block)
        print("updated docs/benchmarks.md", file=sys.stderr)


def ggml_versions(llama_cpp) -> dict:
    import ctypes

    out = {}
    try:
        lib = ctypes.CDLL(str(pathlib.Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
        for name in ("ggml_version", "ggml_commit"):
            fn = getattr(lib, name)
            fn.restype = ctypes.c_char_p
            out[name] = fn().decode()
    except (OSError, AttributeError):
        pass
    return out


if __name__ == "__main__":
    main()
