"""`deepinfer bench serve` against the real server, and against one that only answers errors."""
import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from conftest import API_KEY, MODEL, _binary

KEYS = ["date", "endpoint_type", "model_id", "num_prompts", "request_rate", "burstiness", "max_concurrency",
        "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
        "request_goodput", "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms",
        "std_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms",
        "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms", "input_lens",
        "output_lens", "ttfts", "itls", "errors"]


def bench(url, tmp_path, *extra):
    out = tmp_path / "result.json"
    env = dict(os.environ, OPENAI_API_KEY=API_KEY)
    proc = subprocess.run([_binary(), "bench", "serve", "--url", url, "--num-prompts", "4", "--random-input-len", "32",
                           "--random-output-len", "8", "--max-concurrency", "2", "--disable-tqdm",
                           "--result-filename", str(out), *extra],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return json.loads(out.read_text()), proc


def test_bench_serve_against_the_server(server, tmp_path):
    for endpoint in ("openai", "openai-chat"):
        result, proc = bench(server.base_url, tmp_path, "--model", MODEL, "--endpoint-type", endpoint,
                             "--goodput", "ttft:60000", "e2el:60000")
        assert "Serving Benchmark Result" in proc.stdout
        assert all(k in result for k in KEYS), [k for k in KEYS if k not in result]
        assert result["completed"] == 4 and result["failed"] == 0, result["errors"]
        assert result["input_lens"] == [32] * 4  # cut with the server's own tokenizer
        assert result["output_lens"] == [8] * 4  # ignore_eos + min_tokens
        assert result["exact_input_lengths"] is True
        assert all(len(itl) >= 7 for itl in result["itls"])
        assert 0 < result["mean_ttft_ms"] <= result["mean_e2el_ms"]
        assert result["request_goodput"] > 0


class ErrorHandler(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        status = 404 if self.path in ("/tokenize", "/detokenize") else 500
        body = json.dumps({"error": {"message": "engine on fire", "type": "server_error"}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_bench_serve_reports_a_failing_server(tmp_path):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), ErrorHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        result, proc = bench(f"http://127.0.0.1:{httpd.server_port}", tmp_path, "--model", "m")
    finally:
        httpd.shutdown()
    assert result["completed"] == 0 and result["failed"] == 4
    assert all(e == "HTTP 500: engine on fire" for e in result["errors"]), result["errors"]
    assert result["exact_input_lengths"] is False  # no /tokenize: the result says so
    assert "no usable /tokenize" in proc.stderr
