"""Real pools through the routes: launched by the server, or by another process, and stopped by DELETE."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from typing import Any

import psutil
import pytest

from gpugeek_jupyter.catalog import load_catalog
from gpugeek_jupyter.nvml import discover_gpus
from gpugeek_jupyter.store import get_registry
from gpugeek_jupyter.telemetry._schema import NO_GPU

from .conftest import Fetch

START_TIMEOUT = 120.0


def worker_pids(name: str) -> list[int]:
    record = get_registry().latest_pool(name)
    return [i.pid for i in get_registry().worker_intervals(record.id) if i.pid is not None]


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def wait_for_pool(api: Fetch, name: str, status: str, timeout: float = START_TIMEOUT) -> dict[str, Any]:
    """Poll GET /gpugeek/pools as the panel does until pool ``name`` has ``status``."""
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        _, body = await api("GET", "pools")
        seen = next((p for p in body["pools"] if p["name"] == name), None)
        if seen is not None and seen["status"] == status:
            return seen
        assert seen is None or seen["status"] not in ("failed", "lost"), seen
        await asyncio.sleep(0.1)
    raise AssertionError(f"pool {name} did not become {status} within {timeout:.0f} s; last seen: {seen}")


async def wait_until_gone(pids: list[int], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while any(running(pid) for pid in pids):
        assert time.monotonic() < deadline, f"worker processes still running: {[p for p in pids if running(p)]}"
        await asyncio.sleep(0.1)


async def test_server_launched_pool_comes_up_and_delete_ends_its_worker_processes(api: Fetch) -> None:
    # every key the panel's launch form sends
    request = {"gpu_type": "cpu", "count": 1, "backend": "local", "spot_fraction": 0, "budget": None, "idle_timeout": 0}
    request["name"] = "from-panel"
    status, body = await api("POST", "pools", body=request)
    assert status == 201, body
    assert (body["pool"]["name"], body["pool"]["owner"]) == ("from-panel", "server")
    assert body["pool"]["status"] in ("starting", "ready")

    pool = await wait_for_pool(api, "from-panel", "ready")
    assert pool["workers_ready"] == 1 and pool["scheduler_address"].startswith("tls://")  # the pool's own certificates
    assert pool["usd_per_hour"] > 0
    pids = worker_pids("from-panel")
    assert len(pids) == 1 and running(pids[0])

    status, body = await api("DELETE", "pools", "from-panel")
    assert (status, body["pool"]["status"], body["pool"]["workers_ready"]) == (200, "stopped", 0)
    await wait_until_gone(pids)


async def test_delete_right_after_launch_stops_the_pool_once_it_has_started(api: Fetch) -> None:
    status, body = await api("POST", "pools", body={"gpu_type": "cpu", "count": 1, "name": "changed-my-mind"})
    assert status == 201, body
    status, body = await api("DELETE", "pools", "changed-my-mind", request_timeout=120)
    assert (status, body["pool"]["status"]) == (200, "stopped")
    await wait_until_gone(worker_pids("changed-my-mind"))
    _, listed = await api("GET", "pools")
    assert [(p["name"], p["status"]) for p in listed["pools"]] == [("changed-my-mind", "stopped")]


async def test_asking_for_gpus_this_machine_lacks_is_422_with_the_reason(api: Fetch) -> None:
    found = discover_gpus()
    absent = [
        gpu.name
        for gpu in load_catalog().gpus.values()
        if not gpu.is_cpu and not any(gpu.matches_nvml_name(d.name) for d in found.devices)
    ]
    request = {"gpu_type": absent[0], "count": 1, "backend": "local", "name": "no-such-gpu"}
    status, body = await api("POST", "pools", body=request)
    assert status == 422, body
    assert f"1 x {absent[0]}" in body["message"] and 'use "gpu_type": "cpu" here' in body["message"]
    assert "--" not in body["message"]  # no magic's flags in an answer to JSON
    _, listed = await api("GET", "pools")
    assert listed == {"pools": []}


LAUNCH_AND_WAIT = textwrap.dedent(
    """
    import time
    import gpugeek_jupyter

    gpugeek_jupyter.launch(gpu_type="cpu", count=1, name="from-kernel")
    time.sleep(600)
    """
)


async def test_pool_launched_by_another_process_is_listed_and_stopped_by_delete(api: Fetch) -> None:
    other = subprocess.Popen([sys.executable, "-c", LAUNCH_AND_WAIT], stderr=subprocess.PIPE)
    try:
        pool = await wait_for_pool(api, "from-kernel", "ready")
        assert pool["owner"] == f"pid {other.pid}"
        pids = worker_pids("from-kernel")
        assert len(pids) == 1 and running(pids[0])

        deadline = time.monotonic() + 20
        samples: list = []
        while not samples and time.monotonic() < deadline:  # read from the other process's workers
            status, metrics = await api("GET", "pools", "from-kernel", "metrics")
            samples = metrics["samples"]
            await asyncio.sleep(0.2)
        assert status == 200 and samples, metrics
        assert samples[0]["worker_name"] == "0" and samples[0]["cpu_pct"] is not None
        # a cpu pool's worker has no GPU, on any machine, and its row says why (no NVML here; on a GPU
        # machine, no GPU visible to the worker)
        assert samples[0]["gpu"] == NO_GPU and samples[0]["gpu_name"] is None, samples[0]
        assert "NVML" in samples[0]["no_gpu_reason"] or "no GPU visible" in samples[0]["no_gpu_reason"], samples[0]
        assert metrics["status"] == "ready"

        # ?since=: every sample the worker keeps after that time, oldest first (a monitor's window)
        first = samples[0]["time"]
        await asyncio.sleep(2.5)  # a sample a second
        status, window = await api("GET", "pools", "from-kernel", "metrics", params={"since": str(first - 60)})
        times = [row["time"] for row in window["samples"]]
        assert status == 200 and len(times) >= 3 and times == sorted(times), window
        assert first in times and all(row["worker_name"] == "0" for row in window["samples"])
        _, newer = await api("GET", "pools", "from-kernel", "metrics", params={"since": str(times[-2])})
        assert [row["time"] for row in newer["samples"]] == times[-1:] or newer["samples"][0]["time"] > times[-2]

        status, body = await api("DELETE", "pools", "from-kernel")
        assert (status, body["pool"]["status"]) == (200, "stopped")
        assert "another process" in body["pool"]["reason"]
        _, ended = await api("GET", "pools", "from-kernel", "metrics")
        assert (ended["samples"], ended["status"]) == ([], "stopped")  # the monitor can say so
        await wait_until_gone(pids)
        assert other.poll() is None  # its own heartbeat stopped the pool; the process lives on
    finally:
        other.kill()
        _, stderr = other.communicate(timeout=30)
    assert b"Traceback" not in stderr, stderr.decode()


@pytest.mark.gpu
async def test_gpu_pool_shows_nvml_utilization_in_percent(api: Fetch) -> None:
    device = discover_gpus().devices[0]
    gpu = load_catalog().identify_nvml_name(device.name)
    assert gpu is not None, f"the catalog does not know {device.name!r}"
    request = {"gpu_type": gpu.name, "count": 1, "backend": "local", "name": "gpu-pool"}
    status, body = await api("POST", "pools", body=request)
    assert status == 201, body
    try:
        await wait_for_pool(api, "gpu-pool", "ready")
        deadline = time.monotonic() + 30
        while True:  # the owner's cost watcher writes one utilization row per heartbeat after a baseline beat
            _, body = await api("GET", "pools", "gpu-pool")
            if body["pool"]["mean_sm_util"] is not None:
                break
            assert time.monotonic() < deadline, body
            await asyncio.sleep(0.2)
        assert 0.0 <= body["pool"]["mean_sm_util"] <= 100.0
        assert body["pool"]["sm_util_history"][-1] == body["pool"]["mean_sm_util"]
    finally:
        await api("DELETE", "pools", "gpu-pool", request_timeout=120)
