"""Prefill/decode disaggregation: `deepinfer router --prefill P --decode D` over a prefill worker
and a decode worker sharing one KV store directory, against a single `both` process.

A request is prefilled on P (the router's x-deepinfer-prefill-only request, answered once P's
pages are in the store), then served by D, which finds the prompt's pages in the store: its
greedy output equals a single process's token for token: the cold run's on SmolLM2, and on Gemma 3
(sliding window: the full-attention pages travel, the window is replayed, which only approximates
the cold run) that of a single process serving the prompt from the same store. A killed prefill worker makes
the router fall back to prefill on the decode worker; the roles refuse what is not theirs.
"""
import signal
import subprocess

import openai
import pytest

from conftest import API_KEY, _binary, start_server, stop_server, wait_idle
from test_router import start_router, wait_for

PAGE_TOKENS = 16
WORKER_ARGS = ("--threads", "1", "--max-num-seqs", "4", "--shutdown-timeout", "5")


def _prompt(shelves):
    return ("Here is the inventory of the north warehouse, shelf by shelf. " +
            "".join(f"Shelf {i}: {i * 3} crates of apples and {i + 5} boxes of pears. " for i in range(shelves)) +
            "Which shelf holds the most pears?")


def _complete(base_url, prompt, stream=False):
    """(text, usage) of a greedy completion; /v1/completions, since the Gemma GGUF has no chat template."""
    client = openai.OpenAI(base_url=base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
    if not stream:
        r = client.completions.create(model="m", prompt=prompt, max_tokens=16, temperature=0)
        return r.choices[0].text, r.usage
    chunks = client.completions.create(model="m", prompt=prompt, max_tokens=16, temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    text, usage = "", None
    for c in chunks:
        if c.choices:
            text += c.choices[0].text or ""
        if c.usage:
            usage = c.usage
    return text, usage


# Gemma's prompt is longer than its window of 512: a shorter one is replayed whole after a hit.
@pytest.mark.parametrize("model,shelves", [("smollm2-135m-instruct", 14), ("gemma3-270m", 60)])
def test_prefill_and_decode_workers_equal_one_process(tmp_path, model, shelves):
    prompt = _prompt(shelves)
    store = str(tmp_path / "kv")
    common = (*WORKER_ARGS, "--served-model-name", "m")
    pd_args = (*common, "--kv-store", store, "--kv-store-page-tokens", str(PAGE_TOKENS))
    sliding = model == "gemma3-270m"

    def one_process(*extra):
        both = start_server(*common, *extra, model=model)
        try:
            return _complete(both.base_url, prompt)[0]
        finally:
            stop_server(both)

    # Without a window the decode worker's output is the cold output of one process. With one it
    # is what any process serving the prompt from the store computes (the full-attention pages
    # travel, the window is replayed: an approximation of the cold run, which can change a
    # greedy choice), so the reference is one process on the same store, after the prefill.
    want = None if sliding else one_process()

    prefill = start_server(*pd_args, "--role", "prefill", model=model)
    decode = start_server(*pd_args, "--role", "decode", model=model)
    router = start_router(extra=("--prefill", prefill.base_url, "--decode", decode.base_url, "--pd-min-tokens", "32"))
    try:
        assert wait_for(lambda: router.metrics().get('deepinfer_router:replica_healthy{replica="%s"}' % decode.base_url) == 1)
        text, usage = _complete(router.base_url, prompt)
        if sliding:
            want = one_process("--kv-store", store, "--kv-store-page-tokens", str(PAGE_TOKENS))
        assert text == want
        # The decode worker took the prompt's whole pages from the store: it computed only the
        # tail after the last whole page (and, for Gemma, the replayed window).
        n_pages = (usage.prompt_tokens - 1) // PAGE_TOKENS
        assert n_pages >= 8
        cached = usage.prompt_tokens_details.cached_tokens
        if model == "gemma3-270m":
            assert 0 < cached < n_pages * PAGE_TOKENS  # the window before the hit's end is replayed
        else:
            assert cached == n_pages * PAGE_TOKENS
        assert decode.metrics()["deepinfer:kv_store_hit_pages_total"] >= n_pages
        assert router.metrics()["deepinfer_router:remote_prefills_total"] == 1

        # Streamed, the same prompt again: the decode worker holds it in its own cache now, and
        # the router, which knows, prefills nowhere.
        streamed, usage = _complete(router.base_url, prompt, stream=True)
        assert streamed == want
        assert router.metrics()["deepinfer_router:remote_prefills_total"] == 1

        # The roles refuse what is not theirs, with a clear message.
        body = {"model": "m", "prompt": "hi", "max_tokens": 2}
        status, _, data = prefill.request("POST", "/v1/completions", body)
        assert status == 400 and b"prefill worker" in data
        status, _, data = decode.request("POST", "/v1/completions", body, headers={"x-deepinfer-prefill-only": "1"})
        assert status == 400 and b"decode worker" in data

        # The prefill worker dies: the decode worker computes prompts itself, nothing fails.
        prefill.proc.send_signal(signal.SIGKILL)
        prefill.proc.wait(timeout=10)
        third = prompt.replace("apples", "plums")
        text, usage = _complete(router.base_url, third)
        assert usage.completion_tokens >= 1 and usage.prompt_tokens > 100
        assert router.metrics()["deepinfer_router:remote_prefill_failures_total"] >= 1
        m = wait_idle(decode)
        assert m["deepinfer:kv_cache_blocks_used"] == 0, "a decode-side KV block leaked"
    finally:
        router.proc.send_signal(signal.SIGTERM)
        router.proc.wait(timeout=30)
        stop_server(decode)
        if prefill.proc.poll() is None:
            stop_server(prefill)


def test_roles_need_a_store():
    r = subprocess.run([_binary(), "serve", "--role", "decode"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--kv-store" in r.stderr, r.stderr
    r = subprocess.run([_binary(), "router", "--prefill", "http://127.0.0.1:1"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "--decode" in r.stderr, r.stderr
