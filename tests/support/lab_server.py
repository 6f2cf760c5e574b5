"""A real ``jupyter lab`` server in a subprocess, isolated from the user's Jupyter state.

Everything it reads or writes (config, runtime files, workspaces, the gpugeek registry, the
notebook root) lives under one temporary directory, so a test never touches ``~/.jupyter``.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from support.net import free_port

VENV_BIN = Path(sys.executable).parent
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


@dataclass
class LabServer:
    """A started ``jupyter lab``; ``stop()`` ends it and its children."""

    process: subprocess.Popen[bytes]
    port: int
    token: str
    home: Path
    registry: Path
    log_path: Path
    _children: list[psutil.Process] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def lab_url(self) -> str:
        return f"{self.url}/lab?token={self.token}"

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError as e:
            return f"(no server log: {e})"

    def api(self, path: str, method: str = "GET", timeout: float = 5.0) -> bytes:
        """An authenticated request to the server; raises ``urllib.error.URLError`` on failure."""
        request = urllib.request.Request(
            f"{self.url}/{path.lstrip('/')}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()  # type: ignore[no-any-return]

    def call(self, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
        """A JSON request to the server (``body``: an object, or a str sent as it is); returns the
        HTTP status and the decoded answer, also for error statuses. ``token`` overrides the server's."""
        data = None if body is None else (body if isinstance(body, str) else json.dumps(body)).encode()
        request = urllib.request.Request(
            f"{self.url}/{path.lstrip('/')}",
            method=method,
            data=data,
            headers={"Authorization": f"token {token or self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            return status, json.loads(raw or b"null")
        except ValueError:
            return status, raw.decode(errors="replace")

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                self.api("api/status", timeout=2.0)
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                last_error = e
            time.sleep(0.2)
        raise TimeoutError(
            f"jupyter lab did not answer /api/status within {timeout:.0f} s ({last_error}):\n{self.log_tail()}"
        )

    def children(self) -> list[psutil.Process]:
        """The server's descendants now (kernels, pool workers), remembered for ``stop``."""
        try:
            found = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            found = []
        known = {child.pid for child in self._children}
        self._children += [child for child in found if child.pid not in known]
        return found

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> list[int]:
        """SIGTERM, then SIGKILL after ``timeout``; returns pids of descendants still alive after it."""
        self.children()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        deadline = time.monotonic() + timeout
        alive = self._alive_children()
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = self._alive_children()
        for child in alive:  # leave nothing behind, but report it
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        return [child.pid for child in alive]

    def _alive_children(self) -> list[psutil.Process]:
        alive = []
        for child in self._children:
            try:
                if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                    alive.append(child)
            except psutil.NoSuchProcess:
                pass
        return alive


def isolated_env(home: Path, registry: Path) -> dict[str, str]:
    """The environment of a server or kernel that must not see the user's Jupyter state."""
    env = dict(os.environ)
    env.update(
        {
            "PATH": os.pathsep.join([str(VENV_BIN), env.get("PATH", "")]),
            "JUPYTER_CONFIG_DIR": str(home / "config"),
            "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
            "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
            "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
            "GPUGEEK_REGISTRY": str(registry),
            "GPUGEEK_HEARTBEAT": "0.5",
            "GPUGEEK_PRELOAD_TORCH": "0",  # these pools run no torch jobs
        }
    )
    return env


def write_quiet_lab_settings(settings_dir: Path) -> None:
    """No "get notified about Jupyter news?" toast over the page (and no request to the internet)."""
    notification = settings_dir / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True, exist_ok=True)
    notification.write_text('{"fetchNews": "false", "checkForUpdates": false}\n')


def start_lab(
    home: Path, registry: Path, timeout: float = START_TIMEOUT_S, extra_args: tuple[str, ...] = ()
) -> LabServer:
    """Start ``jupyter lab`` with its state under ``home`` and wait until it answers."""
    root = home / "notebooks"
    home.mkdir(mode=0o700, parents=True, exist_ok=True)  # the user's own, like a home: the registry may be in it
    for folder in ("config", "runtime", "workspaces", "settings", "notebooks"):
        (home / folder).mkdir(parents=True, exist_ok=True)
    write_quiet_lab_settings(home / "settings")
    port, token = free_port(), secrets.token_hex(16)
    log_path = home / "jupyter-lab.log"
    command = [
        str(VENV_BIN / "jupyter"),
        "lab",
        "--allow-root",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        *extra_args,
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, env=isolated_env(home, registry), stdout=log, stderr=subprocess.STDOUT, cwd=root
        )
    server = LabServer(process=process, port=port, token=token, home=home, registry=registry, log_path=log_path)
    try:
        server.wait_ready(timeout)
    except BaseException:
        server.stop(timeout=5)
        raise
    return server
