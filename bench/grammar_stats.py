"""Per-schema results of a grammar engine on MaskBench-format files, and their summary.

The fields and the percentile rule are those of `deepinfer bench grammar`
(src/cli/cmd_bench_grammar.cpp), so that its JSONL and the peers' (bench/grammar_peers.py) are
read and summarized by the same code here.
"""

import json
import math

FIELDS = ["file", "compiled", "error", "valid_accepted", "valid_total", "invalid_rejected", "invalid_total",
          "ttfm_us", "tbm_p50_us", "tbm_p99_us", "tbm_max_us", "n_masks", "tbm_us"]


def percentile(values, p):
    """Nearest rank: the ceil(p% * n)-th smallest, as bench grammar computes it."""
    if not values:
        return 0.0
    v = sorted(values)
    k = math.ceil(p / 100.0 * len(v))
    return v[min(len(v) - 1, max(k, 1) - 1)]


def schema_line(file, compiled, error, counts, ttfm_us, tbm_us):
    """One JSONL line with exactly FIELDS; counts = (valid_accepted, valid_total, invalid_rejected, invalid_total)."""
    va, vt, ir, it = counts
    return {
        "file": file, "compiled": compiled, "error": None if compiled else error,
        "valid_accepted": va, "valid_total": vt, "invalid_rejected": ir, "invalid_total": it,
        "ttfm_us": ttfm_us, "tbm_p50_us": percentile(tbm_us, 50), "tbm_p99_us": percentile(tbm_us, 99),
        "tbm_max_us": max(tbm_us) if tbm_us else 0.0, "n_masks": len(tbm_us),
        "tbm_us": [round(t, 3) for t in tbm_us],
    }


def passing(r):
    return r["compiled"] and r["valid_accepted"] == r["valid_total"] and r["invalid_rejected"] == r["invalid_total"]


def error_key(error):
    """The part of a compile error that names the construct (deepinfer: before " at /")."""
    first = (error or "").splitlines()[0] if error else ""
    return first.split(" at /")[0][:120]


def summarize(results):
    compiled = [r for r in results if r["compiled"]]
    tbm = [t for r in compiled for t in r["tbm_us"]]
    ttfm = [r["ttfm_us"] for r in compiled]
    errors = {}
    for r in results:
        if not r["compiled"]:
            errors[error_key(r["error"])] = errors.get(error_key(r["error"]), 0) + 1
    top = sorted(((n, e) for e, n in errors.items()), reverse=True)[:12]
    it = sum(r["invalid_total"] for r in compiled)
    ir = sum(r["invalid_rejected"] for r in compiled)
    return {
        "schemas": len(results), "compiled": len(compiled), "passing": sum(passing(r) for r in results),
        "valid_accepted": sum(r["valid_accepted"] for r in compiled),
        "valid_total": sum(r["valid_total"] for r in compiled),
        "invalid_rejected": ir, "invalid_total": it, "invalid_accepted": it - ir, "n_masks": len(tbm),
        "tbm_mean_us": sum(tbm) / len(tbm) if tbm else 0.0,
        "tbm_p50_us": percentile(tbm, 50), "tbm_p99_us": percentile(tbm, 99), "tbm_p999_us": percentile(tbm, 99.9),
        "tbm_max_us": max(tbm) if tbm else 0.0,
        "ttfm_p50_us": percentile(ttfm, 50), "ttfm_p99_us": percentile(ttfm, 99),
        "top_errors": [{"count": n, "error": e} for n, e in top],
    }


def read_jsonl(path):
    """The per-schema lines of a bench grammar / grammar_peers JSONL file (a summary line is skipped)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                row = json.loads(line)
                if "summary" not in row:
                    out.append(row)
    return out
