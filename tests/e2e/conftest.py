"""The real server on loopback for the end-to-end tests.

One `deepinfer serve` per test session, serving the default model (SmolLM2-135M-Instruct from
the model cache) on a free port with an API key. DEEPINFER_BIN names the binary (ctest sets it);
otherwise build/bin/deepinfer of this checkout. The server's log goes to a file beside the test
run, so a full pipe never blocks it, and is printed when the server fails to start.
"""
import http.client
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
API_KEY = "e2e-test-key"
MODEL = "smollm2-135m-instruct"


class Server:
    def __init__(self, proc, port, log_path):
        self.proc = proc
        self.port = port
        self.log_path = log_path
        self.base_url = f"http://127.0.0.1:{port}"

    def log(self):
        return Path(self.log_path).read_text(errors="replace")

    def request(self, method, path, body=None, headers=None, timeout=60):
        """Plain HTTP, for what the official clients cannot send (bad JSON, wrong types)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        all_headers = {"Authorization": f"Bearer {API_KEY}"}
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            all_headers["Content-Type"] = "application/json"
        all_headers.update(headers or {})
        conn.request(method, path, body=body, headers=all_headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, dict(resp.getheaders()), data

    def metrics(self):
        status, _, data = self.request("GET", "/metrics")
        assert status == 200
        values = {}
        for line in data.decode().splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
        return values


def _binary():
    path = os.environ.get("DEEPINFER_BIN") or str(REPO / "build" / "bin" / "deepinfer")
    if not Path(path).exists():
        pytest.fail(f"deepinfer binary not found at {path}: build it first (scripts/setup) or set DEEPINFER_BIN")
    return path


def wait_listening(proc, log_path, what, timeout, hint=""):
    """The Server once `proc` logs the port it listens on; a test failure if it exits first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = Path(log_path).read_text(errors="replace")
        match = re.search(r"on http://127\.0\.0\.1:(\d+)", text)
        if match:
            return Server(proc, int(match.group(1)), log_path)
        if proc.poll() is not None:
            pytest.fail(f"deepinfer {what} exited with {proc.returncode} before listening{hint}:\n{text}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"deepinfer {what} did not start listening within {timeout} s:\n" + Path(log_path).read_text())


def start_server(*extra_args, model=MODEL):
    """Starts `deepinfer serve` on a free port; returns a Server once it listens."""
    log = tempfile.NamedTemporaryFile(prefix="deepinfer-serve-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [_binary(), "serve", "-m", str(model), "--port", "0", "--api-key", API_KEY, *extra_args],
        stdout=log, stderr=subprocess.STDOUT)
    return wait_listening(proc, log.name, "serve", 120, f" (is the model pulled? `deepinfer pull {model}`)")


def stop_server(srv):
    """Graceful shutdown is part of the contract: SIGTERM -> exit 0 within the timeout."""
    srv.proc.send_signal(signal.SIGTERM)
    try:
        code = srv.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        srv.proc.kill()
        pytest.fail("deepinfer serve did not exit within 30 s of SIGTERM")
    assert code == 0, f"deepinfer serve exited with {code} after SIGTERM:\n{srv.log()[-4000:]}"


@pytest.fixture(scope="session")
def server():
    srv = start_server("--max-num-seqs", "64", "--shutdown-timeout", "10", "--read-timeout", "5")
    yield srv
    stop_server(srv)


@pytest.fixture(scope="session")
def openai_client(server):
    import openai
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def anthropic_client(server):
    import anthropic
    return anthropic.Anthropic(base_url=server.base_url, api_key=API_KEY, max_retries=0, timeout=120)


def wait_idle(server, timeout=20.0):
    """Polls /metrics until no request runs or waits and no KV block is in use."""
    deadline = time.time() + timeout
    m = {}
    while time.time() < deadline:
        m = server.metrics()
        if (m.get("deepinfer:num_requests_running", -1) == 0 and m.get("deepinfer:num_requests_waiting", -1) == 0
                and m.get("deepinfer:kv_cache_blocks_used", -1) == 0):
            return m
        time.sleep(0.1)
    return m
