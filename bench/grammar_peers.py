#!/usr/bin/env python3
"""llguidance and xgrammar measured exactly as `deepinfer bench grammar` measures itself.

    grammar_peers.py --engine llguidance|xgrammar --data DIR --tokenizer VOCAB [--jsonl OUT]

DIR holds MaskBench-format files ({"description", "meta", "schema", "tests": [{"data",
"valid"}]}); VOCAB is what `bench grammar --tokenizer` takes: a GGUF file or a Hugging Face
tokenizer directory (bench/grammar_vocab.py). Per schema, on one thread:

- the schema and each instance are serialized as bench grammar serializes them (nlohmann::json:
  keys sorted, compact, UTF-8 unescaped), so every engine sees the same text;
- TTFM: compile plus a matcher plus its first mask;
- each instance: a fresh matcher (not timed), then per token one TBM sample = the mask plus
  checking the token's bit plus consuming it; after the last token one more sample whose token
  is end-of-sequence. A valid instance must pass all of them, an invalid one fail one.

One JSON line per schema with bench grammar's fields (bench/grammar_stats.py FIELDS), then a
{"summary": ...} line on stdout. Each schema runs in a worker process watched by this one: a
schema past --timeout-s or a crash is recorded as not compiled, and the worker restarts at the
next file. llguidance and xgrammar are on PyPI; xgrammar needs torch (its own venv under build/).
"""

import argparse
import json
import os
import pathlib
import selectors
import subprocess
import sys
import time

for var in ("RAYON_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")  # one thread, as bench grammar --threads 1

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import grammar_stats  # noqa: E402
import grammar_vocab  # noqa: E402


def serialize(value) -> str:
    """nlohmann::ordered_json's dump(): keys in file order, no spaces, no \\u escapes."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class CompileError(Exception):
    pass


class LlguidanceEngine:
    """LLMatcher per instance, deep-copied from the compiled one (as MaskBench's llg engine)."""

    def __init__(self, vocab):
        import llguidance

        self.llg = llguidance
        self.version = _dist_version("llguidance")
        encode = vocab.encoder()

        class Source:  # what llguidance.TokenizerWrapper reads
            eos_token_id = vocab.eos_id
            bos_token_id = None
            tokens = vocab.token_bytes
            special_token_ids = vocab.special_ids

            def __call__(self, text):
                return encode(text)

        self.tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(Source()), n_vocab=len(vocab.token_bytes),
                                                eos_token=vocab.eos_id)
        self.eos = vocab.eos_id
        import ctypes

        self.mask = bytearray((len(vocab.token_bytes) + 31) // 32 * 4)
        self.mask_ptr = ctypes.addressof(ctypes.c_char.from_buffer(self.mask))

    def compile(self, schema_text):
        try:
            grammar = self.llg.LLMatcher.grammar_from_json_schema(schema_text)
        except ValueError as e:
            raise CompileError(str(e)) from None
        matcher = self.llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise CompileError(matcher.get_error())
        return matcher

    def first_mask(self, compiled):
        compiled.unsafe_compute_mask_ptr(self.mask_ptr, len(self.mask))

    def walk(self, compiled, ids, tbm):
        m = compiled.deep_copy()
        mask, ptr, n, clock = self.mask, self.mask_ptr, len(self.mask), time.perf_counter_ns
        for i in range(len(ids) + 1):
            t = clock()
            m.unsafe_compute_mask_ptr(ptr, n)
            tok = ids[i] if i < len(ids) else self.eos
            ok = (mask[tok >> 3] >> (tok & 7)) & 1 and m.consume_token(tok)
            tbm.append((clock() - t) / 1000.0)
            if not ok:
                return False
        return True


class XgrammarEngine:
    """JSON Schema compiled as MaskBench's "compliant" xgrammar (any whitespace, not strict)."""

    def __init__(self, vocab):
        import torch
        import xgrammar

        torch.set_num_threads(1)
        self.xgr = xgrammar
        self.version = _dist_version("xgrammar")
        # Control tokens as empty strings: xgrammar then treats them as special (never allowed),
        # as deepinfer's TokenIndex does.
        special = set(vocab.special_ids)
        encoded = [b"" if i in special else b for i, b in enumerate(vocab.token_bytes)]
        info = xgrammar.TokenizerInfo(encoded, vocab_type=xgrammar.VocabType.RAW, vocab_size=len(encoded),
                                      stop_token_ids=vocab.stop_ids, add_prefix_space=False)
        self.compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self.bitmask = xgrammar.allocate_token_bitmask(1, len(encoded))
        self.bits = self.bitmask.numpy().view("uint8")[0]
        self.eos = vocab.eos_id

    def compile(self, schema_text):
        try:
            return self.compiler.compile_json_schema(schema_text, any_whitespace=True, strict_mode=False)
        except Exception as e:  # xgrammar raises RuntimeError/ValueError with the reason
            raise CompileError(f"{type(e).__name__}: {e}") from None

    def first_mask(self, compiled):
        self.xgr.GrammarMatcher(compiled).fill_next_token_bitmask(self.bitmask)

    def walk(self, compiled, ids, tbm):
        m = self.xgr.GrammarMatcher(compiled)
        bitmask, bits, clock = self.bitmask, self.bits, time.perf_counter_ns
        for i in range(len(ids) + 1):
            t = clock()
            m.fill_next_token_bitmask(bitmask)
            tok = ids[i] if i < len(ids) else self.eos
            ok = (int(bits[tok >> 3]) >> (tok & 7)) & 1 and m.accept_token(tok)
            tbm.append((clock() - t) / 1000.0)
            if not ok:
                return False
        return True


ENGINES = {"llguidance": LlguidanceEngine, "xgrammar": XgrammarEngine}


def _dist_version(name):
    from importlib import metadata

    return metadata.version(name)


def run_file(engine, path, encode):
    name = path.name
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or "schema" not in doc or "tests" not in doc:
            raise ValueError
    except (ValueError, UnicodeDecodeError):
        return grammar_stats.schema_line(name, False, "not a MaskBench file (no schema or tests)", (0, 0, 0, 0), 0.0, [])
    t0 = time.perf_counter_ns()
    try:
        compiled = engine.compile(serialize(doc["schema"]))
        engine.first_mask(compiled)
    except CompileError as e:
        return grammar_stats.schema_line(name, False, str(e), (0, 0, 0, 0), 0.0, [])
    ttfm = (time.perf_counter_ns() - t0) / 1000.0
    va = vt = ir = it = 0
    tbm = []
    for test in doc["tests"]:
        accepted = engine.walk(compiled, encode(serialize(test["data"])), tbm)
        if test.get("valid", False):
            vt += 1
            va += accepted
        else:
            it += 1
            ir += not accepted
    return grammar_stats.schema_line(name, True, None, (va, vt, ir, it), ttfm, tbm)


def worker(args):
    """Reads file paths on stdin, writes one result line each; "ready" once the vocabulary is in."""
    vocab = grammar_vocab.load_vocab(args.tokenizer)
    engine = ENGINES[args.engine](vocab)
    encode = vocab.encoder()
    print(json.dumps({"ready": True, "version": engine.version, "n_vocab": len(vocab.token_bytes)}), flush=True)
    for line in sys.stdin:
        path = pathlib.Path(line.rstrip("\n"))
        print(json.dumps(run_file(engine, path, encode), ensure_ascii=False), flush=True)


class Worker:
    def __init__(self, args):
        cmd = [sys.executable, __file__, "--worker", "--engine", args.engine, "--tokenizer", args.tokenizer]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8")
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)

    def read(self, timeout_s):
        """The next line, or None past timeout_s or at the worker's end."""
        if not self.sel.select(timeout_s):
            return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def drive(args, files, out):
    results, version, i = [], None, 0
    while i < len(files):
        w = Worker(args)
        ready = w.read(600)
        if not ready or not ready.get("ready"):
            w.stop()
            raise SystemExit(f"{args.engine}: the worker did not start")
        version = ready["version"]
        while i < len(files):
            w.proc.stdin.write(str(files[i]) + "\n")
            w.proc.stdin.flush()
            row = w.read(args.timeout_s)
            if row is None:
                code = w.proc.poll()
                why = f"timeout ({args.timeout_s:g} s)" if code is None else f"crash (exit {code})"
                row = grammar_stats.schema_line(files[i].name, False, why, (0, 0, 0, 0), 0.0, [])
            results.append(row)
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            out.flush()
            i += 1
            if row.get("error", "") and row["error"].startswith(("timeout", "crash")):
                break
        w.stop()
    return results, version


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=sorted(ENGINES), required=True)
    ap.add_argument("--data", help="directory of MaskBench-format *.json files")
    ap.add_argument("--tokenizer", required=True, help="GGUF file or Hugging Face tokenizer directory")
    ap.add_argument("--jsonl", help="per-schema lines here (default: stdout)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N files (sorted by name)")
    ap.add_argument("--timeout-s", type=float, default=120.0, help="per schema (compile and all its instances)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if not args.data or not pathlib.Path(args.data).is_dir():
        ap.error("--data DIR is required and must be a directory")
    files = sorted(p for p in pathlib.Path(args.data).iterdir() if p.suffix == ".json" and p.is_file())
    if args.limit:
        files = files[: args.limit]
    if not files:
        ap.error(f"--data: no *.json files in {args.data}")
    out = open(args.jsonl, "w", encoding="utf-8") if args.jsonl else sys.stdout
    results, version = drive(args, files, out)
    if out is not sys.stdout:
        out.close()
    print(json.dumps({"summary": {"engine": args.engine, "version": version, **grammar_stats.summarize(results)}}))


if __name__ == "__main__":
    main()
