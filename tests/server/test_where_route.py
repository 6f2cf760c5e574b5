"""GET /gpugeek/jobs/<id>/where: where each rank of a running job is, as %gpugeek_where shows it."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from gpugeek_jupyter.jobs import run_cell
from gpugeek_jupyter.store import JobStatus, get_registry

from .conftest import Fetch
from .test_routes import registered_pool


async def test_where_refuses_a_request_without_credentials(api: Fetch) -> None:
    status, body = await api("GET", "jobs", "job-1", "where", headers={"Authorization": ""})
    assert status == 403 and "token" in body["message"]


async def test_where_of_an_unknown_job_is_404(api: Fetch) -> None:
    status, body = await api("GET", "jobs", "job-nope", "where")
    assert status == 404 and '"job-nope"' in body["message"]


async def test_where_of_a_job_that_ended_is_409_in_one_line_naming_it(api: Fetch) -> None:
    registry = get_registry()
    pool = registered_pool("dev")
    registry.add_job("job-done", pool.id, pool.name, "cell", "ab" * 32, ranks=2)
    registry.set_job_status("job-done", JobStatus.SUCCEEDED)
    status, body = await api("GET", "jobs", "job-done", "where")
    assert status == 409
    assert body["message"] == (
        'job "job-done" is not running (it is succeeded): its ranks can be shown only while it runs'
    )


async def test_where_of_a_job_whose_scheduler_is_gone_says_why_in_its_answer(api: Fetch) -> None:
    registry = get_registry()
    pool = registered_pool("dev")  # its scheduler address answers nothing
    registry.add_job("job-7", pool.id, pool.name, "cell", "ab" * 32, ranks=2)
    status, body = await api("GET", "jobs", "job-7", "where")
    assert status == 200, body
    where = body["where"]
    assert where["job_id"] == "job-7" and where["ranks"] == []
    assert where["text"].startswith(
        "job job-7 on pool 'dev': its ranks cannot be asked: its scheduler tcp://127.0.0.1:9"
    )


# rank 1 waits for a file on line 4; rank 0 reduces on line 5
CELL = """\
import os, time
print(f"rank {rank} ready", flush=True)
if rank == 1:
    while not os.path.exists(release): time.sleep(0.05)
dist.all_reduce(t := torch.ones(1))
t.item()
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_where_of_a_running_job_gives_each_rank_and_the_grouped_text(
    api: Fetch, cpu_pool: Any, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    ready: list[str] = []
    outcome: list[Any] = []

    def run() -> None:
        namespace = {"torch": torch, "release": str(release)}
        outcome.append(run_cell(cpu_pool, CELL, namespace, timeout=120, on_output=lambda r, s, t: ready.append(t)))

    job = threading.Thread(target=run, daemon=True)
    job.start()
    try:
        deadline = time.monotonic() + 90
        while sum("ready" in line for line in ready) < 2:
            assert job.is_alive() and time.monotonic() < deadline, (outcome, ready)
            await asyncio.sleep(0.05)
        (record,) = [j for j in get_registry().list_jobs(cpu_pool.id) if j.status is JobStatus.RUNNING]
        status, body = await api("GET", "jobs", record.id, "where")
    finally:
        release.touch()
    await asyncio.to_thread(job.join, 60)
    assert not job.is_alive() and outcome and outcome[0].ok, outcome

    assert status == 200, body
    where = body["where"]
    assert where["job_id"] == record.id and where["running"] is True
    assert where["summary"] == (
        f"job {record.id} on pool 'test-pool', 2 ranks: rank 0 waiting in dist.all_reduce at cell:5; rank 1 at cell:4"
    )
    assert where["text"].splitlines()[0] == where["summary"]
    by_rank = {entry["rank"]: entry for entry in where["ranks"]}
    assert by_rank[0]["collective"] == "dist.all_reduce()" and by_rank[1]["collective"] is None
    innermost_user = next(frame for frame in by_rank[1]["frames"] if frame["user"])
    assert (innermost_user["name"], innermost_user["line"]) == ("cell", 4)

    status, body = await api("GET", "jobs", record.id, "where")  # it has ended since
    assert status == 409 and f'job "{record.id}" is not running (it is succeeded)' in body["message"]
