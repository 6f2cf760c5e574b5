"""A slurm pool launched and stopped through the server's routes, as the side panel does."""

from __future__ import annotations

import asyncio
import time

import pytest
from server.conftest import Fetch, api, jp_server_config, jp_serverapp  # noqa: F401  (the Jupyter server fixtures)
from server.test_launch import wait_for_pool

from slurm.one_host import OneHostSlurm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


async def test_post_launches_slurm_jobs_and_delete_cancels_them(slurm: OneHostSlurm, api: Fetch) -> None:  # noqa: F811
    status, body = await api(
        "POST",
        "pools",
        body={"gpu_type": "cpu", "count": 2, "backend": "slurm", "name": "panel", "walltime": "30", "prologue": "true"},
    )
    assert status == 201, body
    pool = await wait_for_pool(api, "panel", "ready")
    assert (pool["backend"], pool["workers_ready"]) == ("slurm", 2)
    names = slurm.run("squeue", "-h", "-n", "gpugeek-panel", "-o", "%i").stdout.split()
    assert len(names) == 2
    status, body = await api("DELETE", "pools", "panel", request_timeout=120)
    assert (status, body["pool"]["status"]) == (200, "stopped")
    deadline = time.monotonic() + 30
    while slurm.job_ids() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert slurm.job_ids() == []


async def test_an_unknown_partition_is_400_naming_the_field(slurm: OneHostSlurm, api: Fetch) -> None:  # noqa: F811
    status, body = await api("POST", "pools", body={"backend": "slurm", "count": 1, "partition": "gpu"})
    assert (status, body["field"]) == (400, "partition"), body
    assert body["message"].startswith('"partition" "gpu": Slurm has no such partition (sbatch: invalid partition')
    assert body["message"].endswith('e.g. "partition": "debug"')
