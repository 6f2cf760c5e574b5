"""SIGKILL of the Jupyter server while the side panel launches a pool, at several moments.

After each kill: no process of the pool is left, and a server restarted on the same registry lists
the pool closed (``lost``, with why and when its cost stopped), with every worker interval closed;
the pool's name can be launched again from the panel.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from gpugeek_jupyter.store import PoolStatus, Registry
from support.lab_server import start_lab
from support.processes import kill, wait_until_gone

pytestmark = pytest.mark.slow

# seconds after the launch request was answered: while the workers start, as they register, once ready
KILL_AFTER_S = [0.0, 0.3, 0.8, 1.5, 3.0]
GONE_WITHIN_S = 30.0


def _descendants(pid: int) -> list[int]:
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


@pytest.mark.timeout(600)
def test_server_sigkill_during_a_panel_launch_leaves_a_consistent_registry(tmp_path: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL the Jupyter server while the panel launches a pool"""
    registry_path = tmp_path / "gpugeek.sqlite"
    problems: list[str] = []
    for attempt, delay in enumerate(KILL_AFTER_S):
        name = f"panel-{attempt}"
        server = start_lab(tmp_path / f"home-{attempt}", registry_path)
        try:
            status, body = server.call("POST", "gpugeek/pools", {"gpu_type": "cpu", "count": 2, "name": name})
            assert status == 201, body
            time.sleep(delay)
            pids = _descendants(server.process.pid)
            os.kill(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=10)
            left = wait_until_gone(pids, GONE_WITHIN_S)
            kill(left)  # reported below; never left behind
        finally:
            server.stop(timeout=5)

        restarted = start_lab(tmp_path / f"home-{attempt}-again", registry_path)
        try:
            status, listing = restarted.call("GET", "gpugeek/pools")
            seen = next((p for p in listing["pools"] if p["name"] == name), None)
            status_again, again = restarted.call("POST", "gpugeek/pools", {"gpu_type": "cpu", "count": 1, "name": name})
            if status_again == 201:
                restarted.call("DELETE", f"gpugeek/pools/{name}")
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
