"""The owner's other processes still reach a TLS pool: a second kernel attaches and runs a
``%%gpugeek_run`` cell, and the Jupyter server (same user) lists it, reads its workers and stops it.
Nothing of the credentials' contents reaches a kernel message or a REST answer."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from server.conftest import Fetch

from support.kernel import KernelSession

pytestmark = pytest.mark.slow

POOL_NAME = "owned"
PEM_MARKERS = ("BEGIN CERTIFICATE", "PRIVATE KEY")


@pytest.fixture
def owner_kernel(isolated_registry: Path) -> Iterator[KernelSession]:
    """A kernel that launched a 2-worker local pool (TLS by default), shut down afterwards."""
    session = KernelSession(env={"GPUGEEK_PRELOAD_TORCH": "0"})
    try:
        session.run("%load_ext gpugeek_jupyter")
        launched = session.run(f"%gpugeek_launch --gpu-type cpu --count 2 --name {POOL_NAME}", timeout=180)
        assert launched.error is None, launched.text
        yield session
    finally:
        session.shutdown()


def _key_material(isolated_registry: Path) -> list[str]:
    """The credentials' PEM bodies, line by line (a line of one anywhere would be a leak)."""
    lines: list[str] = []
    for pem in (isolated_registry.parent / "gpugeek-credentials").rglob("*.pem"):
        lines += [line for line in pem.read_text().splitlines() if line and not line.startswith("-----")]
    assert lines, "the pool has no credentials to look for"
    return lines


def test_the_owners_second_kernel_attaches_to_the_tls_pool_and_runs_a_cell(
    owner_kernel: KernelSession, isolated_registry: Path
) -> None:
    second = KernelSession(env={"GPUGEEK_PRELOAD_TORCH": "0"})
    try:
        second.run("%load_ext gpugeek_jupyter")
        used = second.run(
            f"%gpugeek_use {POOL_NAME}\nimport gpugeek_jupyter\n"
            "pool = gpugeek_jupyter.current_pool()\nprint(pool.owned, pool.scheduler_address.split(':')[0])"
        )
        assert used.error is None, used.text
        assert "False tls" in used.stdout
        cell = second.run(
            "%%gpugeek_run --output all\nimport torch.distributed as dist\ndist.barrier()\n"
            "print('rank', dist.get_rank(), 'of', dist.get_world_size())",
            timeout=180,
        )
        assert cell.error is None, cell.text
        assert "rank 0 of 2" in cell.text and "rank 1 of 2" in cell.text, cell.text
        material = _key_material(isolated_registry)
        messages = json.dumps(second.messages + owner_kernel.messages, default=str)
        assert not any(marker in messages for marker in PEM_MARKERS)
        assert not any(line in messages for line in material)
    finally:
        second.shutdown()


async def _wait_for(api: Fetch, *parts: str, until: object, seconds: float = 60.0) -> dict[str, object]:
    deadline = time.monotonic() + seconds
    while True:
        status, body = await api("GET", *parts)
        assert status == 200, body
        if until(body) or time.monotonic() > deadline:  # type: ignore[operator]
            return body
        await asyncio.sleep(0.5)


async def test_the_server_lists_reads_and_stops_a_kernels_tls_pool(
    owner_kernel: KernelSession, isolated_registry: Path, api: Fetch
) -> None:
    listing = await _wait_for(api, "pools", until=lambda b: any(p["name"] == POOL_NAME for p in b["pools"]))
    pool = next(p for p in listing["pools"] if p["name"] == POOL_NAME)  # type: ignore[attr-defined]
    assert pool["status"] == "ready" and pool["scheduler_address"].startswith("tls://"), pool
    assert pool["owner"] != "server"

    # the server connects to the pool's scheduler with the pool's certificates to read its workers
    metrics = await _wait_for(api, "pools", POOL_NAME, "metrics", until=lambda b: b["samples"])
    assert metrics["samples"], metrics
    material = _key_material(isolated_registry)
    answers = json.dumps([listing, metrics])

    status, body = await api("DELETE", "pools", POOL_NAME)
    assert (status, body["pool"]["status"]) == (200, "stopped"), body
    assert list((isolated_registry.parent / "gpugeek-credentials").iterdir()) == []  # removed with the pool
    answers += json.dumps(body)
    assert not any(marker in answers for marker in PEM_MARKERS)
    assert not any(line in answers for line in material)
