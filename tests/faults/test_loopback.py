"""A local pool listens on loopback only, unless configured otherwise (``GPUGEEK_BIND_HOST``)."""

from __future__ import annotations

import os
from typing import Any

import psutil
import pytest

import gpugeek_jupyter

pytestmark = pytest.mark.slow

LOOPBACK = {"127.0.0.1", "::1"}


def _listening(pid: int) -> list[tuple[str, int]]:
    process = psutil.Process(pid)
    connections = (
        process.net_connections(kind="inet")
        if hasattr(process, "net_connections")
        else process.connections(kind="inet")
    )
    return [(c.laddr.ip, c.laddr.port) for c in connections if c.status == psutil.CONN_LISTEN]


def test_scheduler_workers_and_nannies_listen_on_loopback_only(scenario: Any) -> None:
    """Security: a local pool listens on loopback only"""
    before = set(_listening(os.getpid()))
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="loopback")
    try:
        worker_pids = list(pool.client.run(os.getpid).values())
        sockets = {"this process (scheduler, nannies)": sorted(set(_listening(os.getpid())) - before)}
        sockets.update({f"worker pid {pid}": _listening(pid) for pid in worker_pids})
    finally:
        pool.stop()
    exposed = {who: [s for s in found if s[0] not in LOOPBACK] for who, found in sockets.items()}
    exposed = {who: found for who, found in exposed.items() if found}
    # the check saw the pool's sockets: the scheduler's, and one per worker at least
    assert len(sockets["this process (scheduler, nannies)"]) >= 2, sockets
    assert all(sockets[f"worker pid {pid}"] for pid in worker_pids), sockets
    scenario.record(survived=not exposed)
    assert exposed == {}, f"listening beyond loopback: {exposed}"
