"""bench/json_schema_suite.py and bench/grammar_stats.py against `deepinfer bench grammar`.

The suite converter must write files that bench grammar reads (MaskBench format, one test
case each), and the Python summary that bench/grammar_compare.py prints beside the peers must
be bench grammar's own. A made-up suite file of two cases, the default model's vocabulary:
seconds, no network.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import grammar_stats  # noqa: E402
import json_schema_suite  # noqa: E402

DEEPINFER = os.environ.get("DEEPINFER_BIN", str(REPO / "build" / "bin" / "deepinfer"))

SUITE_FILE = [
    {"description": "minimum on integers", "schema": {"type": "integer", "minimum": 2},
     "tests": [{"description": "above", "data": 3, "valid": True},
               {"description": "below", "data": 1, "valid": False}]},
    {"description": "not over required is refused by name", "schema": {"not": {"required": ["a"]}},
     "tests": [{"description": "an object without a", "data": {}, "valid": True}]},
]


def run_converted(tmp_path):
    tests = tmp_path / "tests"
    (tests / "draft2020-12").mkdir(parents=True)
    (tests / "draft2020-12" / "minimum.json").write_text(json.dumps(SUITE_FILE))
    manifest = json_schema_suite.convert(tests, ["draft2020-12"], tmp_path / "cases")
    jsonl = tmp_path / "out.jsonl"
    proc = subprocess.run([DEEPINFER, "bench", "grammar", "--data", str(tmp_path / "cases"), "--threads", "1",
                           "--jsonl", str(jsonl)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return manifest, grammar_stats.read_jsonl(jsonl), json.loads(proc.stdout.strip().splitlines()[-1])["summary"]


def test_suite_cases_are_read_by_bench_grammar(tmp_path):
    manifest, rows, _ = run_converted(tmp_path)
    assert sorted(manifest) == sorted(r["file"] for r in rows) and len(rows) == 3
    assert all(sorted(r) == sorted(grammar_stats.FIELDS) for r in rows)
    per, wrong, refused_valid = json_schema_suite.tally(rows, manifest)
    k = per[("draft2020-12", "minimum")]
    assert (len(k["groups"]), len(k["compiled_groups"])) == (2, 1)
    assert (k["va"], k["vt"], k["ir"], k["it"]) == (1, 1, 1, 1)
    assert wrong == [] and refused_valid == []
    assert any("not" in e for e in k["errors"])


def test_python_summary_is_bench_grammars(tmp_path):
    _, rows, summary = run_converted(tmp_path)
    ours = grammar_stats.summarize(rows)
    for key in ("schemas", "compiled", "passing", "valid_accepted", "valid_total", "invalid_rejected",
                "invalid_total", "invalid_accepted", "n_masks"):
        assert ours[key] == summary[key], key
    # bench grammar's JSONL rounds each mask time to 1 ns; its own summary does not.
    for key in ("tbm_p50_us", "tbm_p99_us", "tbm_p999_us", "tbm_max_us", "ttfm_p50_us", "ttfm_p99_us"):
        assert abs(ours[key] - summary[key]) <= 1e-3, key
