"""The KV-cache store across processes, and its trace replay command.

Two `deepinfer serve` on one store directory, started together so that the second's index,
scanned at its start, knows none of the first's pages: a prompt the first computed is a store
hit in the second (cached tokens in usage) and gives the same greedy tokens. And `deepinfer
kvstore replay-trace` on a trace the test writes, with hits worked out by hand.
"""
import json
import subprocess
import time

import openai
import pytest

from conftest import API_KEY, MODEL, _binary, start_server, stop_server

PAGE_TOKENS = 16


def _client(srv):
    return openai.OpenAI(base_url=srv.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def _complete(srv, prompt):
    return _client(srv).completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0)


def _wait_for(predicate, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_two_servers_share_one_store(tmp_path):
    store = str(tmp_path / "kv")
    flags = ["--kv-store", store, "--kv-store-page-tokens", str(PAGE_TOKENS), "--threads", "1",
             "--max-num-seqs", "4", "--shutdown-timeout", "10"]
    servers = [start_server(*flags), start_server(*flags)]
    try:
        first, second = servers
        prompt = "".join(f"Line {i}: the committee counted {i * 7} ballots. " for i in range(12))
        # Each server's warm-up request (its own cache salt) writes pages of its own too.
        pages_before = first.metrics()["deepinfer:kv_store_pages"]
        hits_before = second.metrics()["deepinfer:kv_store_hit_pages_total"]
        a = _complete(first, prompt)
        n_prompt = a.usage.prompt_tokens
        n_pages = (n_prompt - 1) // PAGE_TOKENS  # the last prompt token is always computed
        assert n_pages >= 4, f"the prompt is too short for this test: {n_prompt} tokens"
        assert (a.usage.prompt_tokens_details.cached_tokens or 0) == 0
        # Pages are written behind the request: wait until the first server has them all. Each
        # page is fsynced twice (file, folder); on a runner whose disk is busy with a build,
        # nine pages took more than 20 s.
        assert _wait_for(lambda: first.metrics()["deepinfer:kv_store_pages"] >= pages_before + n_pages, 90), \
            f"the first server wrote {first.metrics()['deepinfer:kv_store_pages'] - pages_before} of {n_pages} pages"

        b = _complete(second, prompt)
        assert b.usage.prompt_tokens == n_prompt
        assert b.usage.prompt_tokens_details.cached_tokens == n_pages * PAGE_TOKENS
        assert b.choices[0].text == a.choices[0].text
        m = second.metrics()
        assert m["deepinfer:kv_store_hit_pages_total"] - hits_before == n_pages
        assert m["deepinfer:kv_store_checksum_failures_total"] == 0
    finally:
        for srv in servers:
            stop_server(srv)


def _replay(*args):
    return subprocess.run([_binary(), "kvstore", "replay-trace", *args], capture_output=True, text=True, timeout=60)


def test_replay_trace_reads_the_jsonl(tmp_path):
    trace = tmp_path / "trace.jsonl"
    # Blocks of 4 tokens. r1 repeats r0's first block and ends its second one with its last
    # token, so it may hit 4 tokens; r2 repeats r0's two full blocks: 8 tokens.
    rows = [{"timestamp": 0, "input_length": 9, "output_length": 3, "hash_ids": [1, 2, 3]},
            {"timestamp": 1000, "input_length": 8, "output_length": 3, "hash_ids": [1, 2]},
            {"timestamp": 2000, "input_length": 10, "output_length": 3, "hash_ids": [1, 2, 9]}]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    r = _replay("--block-tokens", "4", "--page-tokens", "4", "--bytes-per-token", "2", "--memory", "64",
                "--disk", "1K", "--dir", str(tmp_path / "scratch"), str(trace))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["requests"] == 3 and out["input_tokens"] == 27
    assert out["page_bytes"] == 8 and out["memory_pages"] == 8 and out["disk_pages"] == 128
    assert out["ids_with_two_parents"] == 0 and out["trace_seconds"] == 2.0
    modes = {m["mode"]: m for m in out["modes"]}
    assert set(modes) == {"prefix_cache", "store_memory", "store_memory_disk", "prefix_cache_store"}
    for m in modes.values():
        assert m["hit_tokens"] == 4 + 8, m
        assert m["hit_rate"] == pytest.approx(12 / 27)
    assert modes["store_memory_disk"]["pages_written"] == 2
    assert modes["store_memory_disk"]["bytes_written"] == 2 * 8
    assert not (tmp_path / "scratch" / "store_memory_disk").exists()


@pytest.mark.parametrize("line, why", [
    ('{"timestamp": 0, "input_length": 9, "hash_ids": [1, 2]}', "hash_ids has 2 ids"),
    ('{"timestamp": 0, "hash_ids": [1]}', "no 'input_length'"),
    ('{"timestamp": 0, "input_length": 4, "hash_ids": ["a"]}', "'hash_ids' must be an integer"),
    ('{"timestamp": 0, "input_length": 4, "hash_ids": [1]', "not a JSON object"),
])
def test_replay_trace_names_the_bad_line(tmp_path, line, why):
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 4, "hash_ids": [7]}\n' + line + "\n")
    r = _replay("--block-tokens", "4", "--dir", str(tmp_path / "scratch"), str(trace))
    assert r.returncode == 2
    assert f"trace.jsonl:2: {why}" in r.stderr, r.stderr


def test_replay_trace_refuses_bad_flags(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 4, "hash_ids": [7]}\n')
    r = _replay("--page-tokens", "100", str(trace))
    assert r.returncode == 2 and "page tokens (100) must divide" in r.stderr, r.stderr
    r = _replay(str(tmp_path / "missing.jsonl"))
    assert r.returncode == 2 and "cannot read the trace" in r.stderr, r.stderr
