"""A real ``jupyter server`` process: pools it launched stop when it shuts down cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpugeek_jupyter.store import get_registry
from support.net import free_port

TOKEN = "gpugeek-test-token"


class RunningServer:
    def __init__(self, tmp_path: Path) -> None:
        self.port = free_port()
        config_dir = tmp_path / "config"
        config_dir.mkdir()
        (config_dir / "jupyter_server_config.json").write_text(
            json.dumps({"ServerApp": {"jpserver_extensions": {"gpugeek_jupyter": True}}})
        )
        env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config_dir), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
        self.log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter_server",
                "--allow-root",
                "--no-browser",
                f"--port={self.port}",
                "--port-retries=0",
                f"--IdentityProvider.token={TOKEN}",
                f"--ServerApp.root_dir={tmp_path}",
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.log_path = tmp_path / "server.log"

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/gpugeek/{path}", data=data, method=method)
        request.add_header("Authorization", f"token {TOKEN}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def wait_until_answering(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.process.poll() is None, self.log_path.read_text()
            try:
                self.call("GET", "pools")
                return
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, self.log_path.read_text()
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self.log.close()


@pytest.fixture
def jupyter_server(tmp_path: Path) -> Any:
    server = RunningServer(tmp_path)
    yield server
    server.stop()


def test_sigterm_to_the_server_stops_the_pools_it_launched(jupyter_server: RunningServer) -> None:
    jupyter_server.wait_until_answering()
    status, body = jupyter_server.call("POST", "pools", {"gpu_type": "cpu", "count": 1, "name": "server-owned"})
    assert status == 201, body
    deadline = time.monotonic() + 120
    while get_registry().latest_pool("server-owned").status.value != "ready":
        assert get_registry().latest_pool("server-owned").status.is_live
        assert time.monotonic() < deadline
        time.sleep(0.1)
    record = get_registry().latest_pool("server-owned")
    pids = [i.pid for i in get_registry().worker_intervals(record.id) if i.pid]
    assert pids and all(psutil.pid_exists(p) for p in pids)

    jupyter_server.process.send_signal(signal.SIGTERM)
    assert jupyter_server.process.wait(timeout=60) == 0, jupyter_server.log_path.read_text()

    final = get_registry().pool_by_id(record.id)
    assert (final.status.value, final.reason) == ("stopped", "its owner exited"), jupyter_server.log_path.read_text()
    deadline = time.monotonic() + 30
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
        assert time.monotonic() < deadline, "worker processes outlived the server"
        time.sleep(0.1)
