"""GET /gpugeek/jobs/<id>/metrics: the values a job's ranks logged with ``gg.log``, as kept on disk.

The metrics are written here as a job's driver writes them (``JobLogs.write_metrics``, into the
server's ``GpugeekConfig.job_logs_dir``); the job row through the registry's public methods.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpugeek_jupyter.jobs.logs import JobLogs
from gpugeek_jupyter.store import get_registry

from .conftest import Fetch
from .test_routes import registered_pool


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"gpugeek_jupyter": True}},
        "GpugeekConfig": {"job_logs_dir": str(tmp_path / "job-logs")},
    }


@pytest.fixture
def running_job(jp_serverapp: Any) -> Iterator[tuple[str, JobLogs]]:
    pool = registered_pool("dev")
    get_registry().add_job("job-7b", pool.id, pool.name, "cell", "ab" * 32, ranks=2)
    logs = JobLogs("job-7b")
    try:
        yield "job-7b", logs
    finally:
        logs.close()


async def test_metrics_of_a_running_job_are_listed_in_order_a_nan_as_null(
    api: Fetch, running_job: tuple[str, JobLogs]
) -> None:
    job_id, logs = running_job
    logs.write_metrics(0, [(0, 100.0, "loss", 2.5), (0, 100.0, "lr", 0.1)])
    logs.write_metrics(1, [(0, 100.5, "loss", float("nan"))])
    status, body = await api("GET", "jobs", job_id, "metrics")
    assert status == 200, body
    assert body == {
        "job": job_id,
        "status": "running",
        "names": ["loss", "lr"],
        "metrics": [
            {"attempt": 0, "rank": 0, "step": 0, "time": 100.0, "name": "loss", "value": 2.5},
            {"attempt": 0, "rank": 0, "step": 0, "time": 100.0, "name": "lr", "value": 0.1},
            {"attempt": 0, "rank": 1, "step": 0, "time": 100.5, "name": "loss", "value": None},
        ],
    }
    _, only_lr = await api("GET", "jobs", job_id, "metrics", params={"name": "lr"})
    assert [row["value"] for row in only_lr["metrics"]] == [0.1] and only_lr["names"] == ["loss", "lr"]


async def test_a_job_that_logged_nothing_has_no_metrics(api: Fetch, running_job: tuple[str, JobLogs]) -> None:
    status, body = await api("GET", "jobs", running_job[0], "metrics")
    assert (status, body["metrics"], body["names"]) == (200, [], [])


async def test_metrics_of_an_unknown_job_are_a_404_naming_it(api: Fetch, jp_serverapp: Any) -> None:
    status, body = await api("GET", "jobs", "job-nope", "metrics")
    assert status == 404
    assert "job-nope" in body["message"]


async def test_a_charts_points_thin_each_line_keep_its_spike_and_read_on_as_the_job_writes(
    api: Fetch, running_job: tuple[str, JobLogs]
) -> None:
    job_id, logs = running_job
    for rank in (0, 1):
        logs.write_metrics(rank, [(s, float(s), "loss", 9.0 if s == 777 else 1.0 / (1 + s)) for s in range(2000)])
    status, body = await api("GET", "jobs", job_id, "metrics", params={"points": "50"})
    assert status == 200, body
    for rank in (0, 1):
        line = [row for row in body["metrics"] if row["rank"] == rank]
        assert 10 < len(line) <= 50
        assert (line[0]["step"], line[-1]["step"], max(row["value"] for row in line)) == (0, 1999, 9.0)
    logs.write_metrics(0, [(2000, 2000.0, "loss", 0.0)])  # the job goes on: the next poll has it
    _, later = await api("GET", "jobs", job_id, "metrics", params={"points": "50", "name": "loss"})
    assert [row["step"] for row in later["metrics"] if row["rank"] == 0][-1] == 2000
    _, whole = await api("GET", "jobs", job_id, "metrics")
    assert len(whole["metrics"]) == 4001  # without points: every row kept


@pytest.mark.parametrize("points", ["3", "many", "-5", "100001"])
async def test_points_must_be_a_whole_number_in_range(
    api: Fetch, running_job: tuple[str, JobLogs], points: str
) -> None:
    status, body = await api("GET", "jobs", running_job[0], "metrics", params={"points": points})
    assert status == 400, body
    assert body["message"] == (f'"points" must be a whole number from 4 to 100000, got "{points}" (e.g. ?points=400)')
