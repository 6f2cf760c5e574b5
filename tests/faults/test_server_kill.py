"""SIGKILL of the Jupyter server while the side panel launches a pool, at several moments.

After each kill: no process of the pool is left, and a server restarted on the same registry lists
the pool closed (``lost``, with why and when its cost stopped), with every worker interval closed;
the pool's name can be launched again from the panel.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpugeek_jupyter.store import PoolStatus, Registry
from support.lab_server import LabServer, start_lab

pytestmark = pytest.mark.slow

# seconds after the launch request was answered: while the workers start, as they register, once ready
KILL_AFTER_S = [0.0, 0.3, 0.8, 1.5, 3.0]
GONE_WITHIN_S = 30.0


def _request(server: LabServer, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"{server.url}/gpugeek/{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"token {server.token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _left_alive(processes: list[psutil.Process], within: float) -> list[int]:
    deadline = time.monotonic() + within
    while True:
        alive = []
        for process in processes:
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(process)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() >= deadline:
            for process in alive:  # reported below; never left behind
                try:
                    process.kill()
                except psutil.NoSuchProcess:
                    pass
            return [p.pid for p in alive]
        time.sleep(0.2)


@pytest.mark.timeout(600)
def test_server_sigkill_during_a_panel_launch_leaves_a_consistent_registry(tmp_path: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL the Jupyter server while the panel launches a pool"""
    registry_path = tmp_path / "gpugeek.sqlite"
    problems: list[str] = []
    for attempt, delay in enumerate(KILL_AFTER_S):
        name = f"panel-{attempt}"
        server = start_lab(tmp_path / f"home-{attempt}", registry_path)
        try:
            status, body = _request(server, "POST", "pools", {"gpu_type": "cpu", "count": 2, "name": name})
            assert status == 201, body
            time.sleep(delay)
            processes = _descendants(server.process.pid)
            os.kill(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=10)
            processes += [p for p in _descendants(server.process.pid) if p not in processes]
            left = _left_alive(processes, GONE_WITHIN_S)
        finally:
            server.stop(timeout=5)

        restarted = start_lab(tmp_path / f"home-{attempt}-again", registry_path)
        try:
            status, listing = _request(restarted, "GET", "pools")
            seen = next((p for p in listing["pools"] if p["name"] == name), None)
            status_again, again = _request(restarted, "POST", "pools", {"gpu_type": "cpu", "count": 1, "name": name})
            if status_again == 201:
                _request(restarted, "DELETE", f"pools/{name}")
        finally:
            restarted.stop()

        registry = Registry(registry_path)
        record = next((p for p in registry.list_pools() if p.name == name and p.owner == "server"), None)
        open_intervals = (
            sum(1 for w in registry.worker_intervals(record.id) if w.stopped_at is None) if record is not None else None
        )
        registry.close()

        lost_record = record is None
        consistent = (
            record is not None
            and record.status is PoolStatus.LOST
            and record.ended_at is not None
            and open_intervals == 0
            and seen is not None
            and seen["status"] == "lost"
        )
        survived = not left and consistent and status_again == 201
        scenario.record(survived=survived, data_lost=int(lost_record))
        if not survived:
            problems.append(
                f"kill {delay} s after the launch: processes left {left}, pool row {record}, "
                f"open worker intervals {open_intervals}, listed as {seen and seen['status']}, "
                f"relaunch answered {status_again} {again}"
            )
    assert problems == []
