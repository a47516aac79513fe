"""`deepinfer cluster up CONFIG`: one replica and the router from a config file, a request
through it, and a clean stop on SIGTERM; a config error (a prefill role without a store, a missing port) is refused by field."""
import json
import re
import signal
import subprocess
import time
import urllib.request

from conftest import MODEL, _binary
from test_router import free_port


def test_cluster_up_serves_and_stops_cleanly(tmp_path):
    replica_port, router_port = free_port(), free_port()
    config = {"model": MODEL, "store": str(tmp_path / "store"), "log_dir": str(tmp_path / "logs"),
              "replicas": [{"port": replica_port, "role": "both", "args": ["--threads", "1"]}],
              "router": {"port": router_port, "policy": "least-load"}}
    (tmp_path / "c.json").write_text(json.dumps(config))
    log = open(tmp_path / "up.log", "w")
    proc = subprocess.Popen([_binary(), "cluster", "up", str(tmp_path / "c.json")], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while "up; SIGINT" not in (tmp_path / "up.log").read_text() and time.time() < deadline:
            assert proc.poll() is None, (tmp_path / "up.log").read_text()
            time.sleep(0.1)
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        req = urllib.request.Request(f"http://127.0.0.1:{router_port}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            assert json.loads(r.read())["usage"]["completion_tokens"] >= 1
        assert (tmp_path / "logs" / "replica0.log").exists() and (tmp_path / "logs" / "router.log").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, (tmp_path / "up.log").read_text()
    assert "stopped" in (tmp_path / "up.log").read_text()
    # Every child went with it: the ports are free again.
    assert "deepinfer router: stopped" in (tmp_path / "logs" / "router.log").read_text()
    assert re.search(r"deepinfer serve: stopped", (tmp_path / "logs" / "replica0.log").read_text())


def test_cluster_config_errors_name_the_field(tmp_path):
    config = {"replicas": [{"port": 1, "role": "prefill"}], "router": {"port": 2}}
    (tmp_path / "c.json").write_text(json.dumps(config))
    r = subprocess.run([_binary(), "cluster", "up", str(tmp_path / "c.json")], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "replicas[0].role" in r.stderr
    (tmp_path / "c.json").write_text(json.dumps({"replicas": [{"role": "both"}], "router": {"port": 2}}))
    r = subprocess.run([_binary(), "cluster", "up", str(tmp_path / "c.json")], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "replicas[0].port" in r.stderr


def test_router_flag_and_config_errors(tmp_path):
    r = subprocess.run([_binary(), "router", "--replica", "http://127.0.0.1:1", "--policy", "random"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--policy" in r.stderr
    r = subprocess.run([_binary(), "router"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--replica" in r.stderr
    (tmp_path / "r.json").write_text(json.dumps({"replica": ["https://x:1"]}))
    r = subprocess.run([_binary(), "router", "--config", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "https" in r.stderr
    (tmp_path / "r.json").write_text(json.dumps({"replica": [{"url": "x"}]}))
    r = subprocess.run([_binary(), "router", "--config", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and '"replica"' in r.stderr
