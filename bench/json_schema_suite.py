#!/usr/bin/env python3
"""JSON-Schema-Test-Suite through deepinfer's grammar, as instance validation.

    python3 bench/json_schema_suite.py [--drafts draft2020-12,draft7] [--tokenizer MODEL] [--json OUT]

The suite ships inside the `jsonschema` source distribution on PyPI (json/tests/<draft>/); it
is fetched with pip into build/json-schema-suite/ at the first run and never committed. Every
test case becomes a MaskBench-format file of its own ({"description", "meta", "schema",
"tests": [{"data", "valid"}]}, one test each, so that a result names its instance), and
`deepinfer bench grammar --data` runs them all: the schema is compiled, the instance's compact
serialization is walked through the matcher token by token (a byte-level vocabulary spells any
text, so this is the byte walk plus the token masks), and must pass to the end (valid) or be
refused somewhere (invalid).

Per keyword file: groups (schemas) compiled, valid instances accepted, invalid ones refused and
invalid ones wrongly accepted (over compiled groups); then every wrongly accepted instance
with its schema. optional/format/ files are included for the formats the grammar checks.
"""

import argparse
import datetime
import json
import pathlib
import subprocess
import sys
import tarfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import grammar_stats  # noqa: E402

WORK = REPO / "build" / "json-schema-suite"
JSONSCHEMA_VERSION = "4.26.0"  # the suite revision the committed results were measured with
# The formats src/grammar checks (docs/structured-output.md); their optional/format tests assert.
CHECKED_FORMATS = ["date", "time", "date-time", "email", "uuid", "uri", "ipv4", "ipv6", "hostname"]


def fetch_suite() -> pathlib.Path:
    root = WORK / f"jsonschema-{JSONSCHEMA_VERSION}"
    if (root / "json" / "tests").is_dir():
        return root / "json" / "tests"
    WORK.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                    f"jsonschema=={JSONSCHEMA_VERSION}", "-d", str(WORK)], check=True)
    with tarfile.open(WORK / f"jsonschema-{JSONSCHEMA_VERSION}.tar.gz") as tar:
        members = [m for m in tar.getmembers() if "/json/tests/" in m.name and m.isfile()]
        tar.extractall(WORK, members=members, filter="data")
    return root / "json" / "tests"


def suite_files(tests: pathlib.Path, draft: str):
    """(keyword, path) for the draft's keyword files and the checked formats' optional tests."""
    for p in sorted((tests / draft).glob("*.json")):
        yield p.stem, p
    for name in CHECKED_FORMATS:
        p = tests / draft / "optional" / "format" / f"{name}.json"
        if p.exists():
            yield f"format-{name}", p


def convert(tests: pathlib.Path, drafts, out: pathlib.Path) -> dict:
    """One MaskBench file per test case; returns {file name: meta}."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.json"):
        old.unlink()
    manifest = {}
    for draft in drafts:
        for keyword, path in suite_files(tests, draft):
            for g, group in enumerate(json.loads(path.read_text(encoding="utf-8"))):
                for t, test in enumerate(group["tests"]):
                    name = f"{draft}~{keyword}~{g:03d}~{t:02d}.json"
                    meta = {"draft": draft, "keyword": keyword, "group": g, "test": t,
                            "group_description": group["description"], "test_description": test["description"]}
                    doc = {"description": f"{group['description']} / {test['description']}", "meta": meta,
                           "schema": group["schema"], "tests": [{"data": test["data"], "valid": test["valid"]}]}
                    (out / name).write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
                    manifest[name] = {**meta, "schema": group["schema"], "data": test["data"], "valid": test["valid"]}
    return manifest


def run_bench(deepinfer: str, cases: pathlib.Path, tokenizer, jsonl: pathlib.Path):
    cmd = [deepinfer, "bench", "grammar", "--data", str(cases), "--threads", "1", "--jsonl", str(jsonl)]
    if tokenizer:
        cmd += ["--tokenizer", tokenizer]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return grammar_stats.read_jsonl(jsonl)


def tally(rows, manifest):
    """Per (draft, keyword): groups, compiled groups, and instance counts over compiled groups."""
    per, wrong, refused_valid = {}, [], []
    for r in rows:
        m = manifest[r["file"]]
        k = per.setdefault((m["draft"], m["keyword"]), {"groups": set(), "compiled_groups": set(), "va": 0, "vt": 0,
                                                        "ir": 0, "it": 0, "errors": set()})
        k["groups"].add(m["group"])
        if not r["compiled"]:
            k["errors"].add(grammar_stats.error_key(r["error"]))
            continue
        k["compiled_groups"].add(m["group"])
        k["va"] += r["valid_accepted"]
        k["vt"] += r["valid_total"]
        k["ir"] += r["invalid_rejected"]
        k["it"] += r["invalid_total"]
        if r["invalid_total"] and not r["invalid_rejected"]:
            wrong.append(m)
        if r["valid_total"] and not r["valid_accepted"]:
            refused_valid.append(m)
    return per, wrong, refused_valid


def markdown(per) -> str:
    lines = ["| draft | keyword file | groups compiled | valid accepted | invalid refused | invalid wrongly accepted |",
             "|---|---|---:|---:|---:|---:|"]
    for (draft, keyword), k in sorted(per.items()):
        lines.append(f"| {draft} | {keyword} | {len(k['compiled_groups'])} / {len(k['groups'])} | {k['va']} / {k['vt']} "
                     f"| {k['ir']} / {k['it']} | {'**' + str(k['it'] - k['ir']) + '**' if k['it'] - k['ir'] else 0} |")
    return "\n".join(lines)


def case_line(m) -> str:
    return (f"- {m['draft']} {m['keyword']} #{m['group']}.{m['test']} ({m['group_description']} / "
            f"{m['test_description']}): schema `{json.dumps(m['schema'], sort_keys=True)}`, "
            f"instance `{json.dumps(m['data'], sort_keys=True)}`")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drafts", default="draft2020-12,draft7")
    ap.add_argument("--tokenizer", help="bench grammar --tokenizer (default: its default model)")
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "bin" / "deepinfer"))
    ap.add_argument("--suite", help="a json/tests directory to use instead of fetching one")
    ap.add_argument("--json", help="write the tallies and the listed cases here")
    args = ap.parse_args()
    tests = pathlib.Path(args.suite) if args.suite else fetch_suite()
    cases = WORK / "cases"
    manifest = convert(tests, args.drafts.split(","), cases)
    rows = run_bench(args.deepinfer, cases, args.tokenizer, WORK / "results.jsonl")
    per, wrong, refused_valid = tally(rows, manifest)
    print(markdown(per))
    print(f"\nInvalid instances wrongly accepted ({len(wrong)}):")
    for m in wrong:
        print(case_line(m))
    print(f"\nValid instances refused (stricter than the specification): {len(refused_valid)}")
    if args.json:
        summary = {f"{d}/{k}": {"groups": len(v["groups"]), "compiled_groups": len(v["compiled_groups"]),
                                "valid_accepted": v["va"], "valid_total": v["vt"], "invalid_refused": v["ir"],
                                "invalid_total": v["it"], "errors": sorted(v["errors"])}
                   for (d, k), v in sorted(per.items())}
        pathlib.Path(args.json).write_text(json.dumps(
            {"stamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ"),
             "jsonschema_sdist": JSONSCHEMA_VERSION, "per_keyword": summary, "wrongly_accepted": wrong,
             "valid_refused": refused_valid}, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
