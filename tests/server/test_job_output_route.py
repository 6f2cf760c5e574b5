"""GET /gpugeek/jobs/<id>/output: each rank's state and the grouped tail of the ranks' logs.

The logs are written here as a job's driver writes them (through ``JobLogs``, into the server's
``GpugeekConfig.job_logs_dir``), the job rows through the registry's public methods.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpugeek_jupyter.jobs.logs import JobLogs
from gpugeek_jupyter.store import JobStatus, get_registry

from .conftest import Fetch
from .test_routes import registered_pool


@pytest.fixture
def logs_dir(tmp_path: Path) -> Path:
    return tmp_path / "job-logs"


@pytest.fixture
def jp_server_config(logs_dir: Path) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"gpugeek_jupyter": True}},
        "GpugeekConfig": {"job_logs_dir": str(logs_dir)},
    }


@pytest.fixture
def running_job(jp_serverapp: Any) -> Iterator[tuple[str, JobLogs]]:
    """Job ``job-7a`` running on a 2-worker pool, its logs open as its driver keeps them while it runs."""
    pool = registered_pool("dev")
    get_registry().add_job("job-7a", pool.id, pool.name, "cell", "ab" * 32, ranks=2)
    logs = JobLogs("job-7a")  # the server's config: its job_logs_dir
    logs.set_states({0: "running", 1: "running"})
    try:
        yield "job-7a", logs
    finally:
        logs.close()


def write_steps(logs: JobLogs, steps: int) -> None:
    """Both ranks print the same steps; rank 1 also a warning. One write per rank: on disk at once."""
    same = "".join(f"step {n}\n" for n in range(1, steps + 1))
    logs.write(0, same)
    logs.write(1, same + "warning: slow batch\n")


async def test_output_of_a_running_job_gives_each_ranks_state_and_the_grouped_tail(
    api: Fetch, running_job: tuple[str, JobLogs], logs_dir: Path
) -> None:
    job_id, logs = running_job
    write_steps(logs, 2)
    assert (logs_dir / job_id / "rank-0.log").exists()
    status, body = await api("GET", "jobs", job_id, "output")
    assert status == 200, body
    assert body == {
        "job": job_id,
        "status": "running",
        "ranks": [{"rank": 0, "state": "running"}, {"rank": 1, "state": "running"}],
        "tail": "[ranks 0-1] step 1\n[ranks 0-1] step 2\n[rank 1] warning: slow batch",
    }


async def test_output_keeps_the_last_lines_asked_for(api: Fetch, running_job: tuple[str, JobLogs]) -> None:
    job_id, logs = running_job
    write_steps(logs, 100)
    _, default = await api("GET", "jobs", job_id, "output")
    assert len(default["tail"].splitlines()) == 40
    assert default["tail"].splitlines()[-2:] == ["[ranks 0-1] step 100", "[rank 1] warning: slow batch"]
    status, body = await api("GET", "jobs", job_id, "output", params={"lines": "3"})
    assert status == 200
    assert body["tail"] == "[ranks 0-1] step 99\n[ranks 0-1] step 100\n[rank 1] warning: slow batch"


async def test_output_of_an_ended_job_gives_the_states_its_driver_recorded(
    api: Fetch, running_job: tuple[str, JobLogs]
) -> None:
    job_id, logs = running_job
    write_steps(logs, 2)
    logs.set_states({0: "done", 1: "failed"})
    logs.close()
    get_registry().set_job_status(job_id, JobStatus.FAILED, failure_reason="rank 1 failed")
    status, body = await api("GET", "jobs", job_id, "output")
    assert status == 200
    assert body["status"] == "failed"
    assert body["ranks"] == [{"rank": 0, "state": "done"}, {"rank": 1, "state": "failed"}]
    assert body["tail"].endswith("[rank 1] warning: slow batch")


async def test_a_rank_still_recorded_running_in_an_ended_job_is_lost(
    api: Fetch, running_job: tuple[str, JobLogs]
) -> None:
    job_id, logs = running_job
    logs.set_states({0: "done"})  # rank 1's state was never written: its driver went away
    get_registry().set_job_status(job_id, JobStatus.FAILED, failure_reason="its owner is gone")
    _, body = await api("GET", "jobs", job_id, "output")
    assert body["ranks"] == [{"rank": 0, "state": "done"}, {"rank": 1, "state": "lost"}]


async def test_output_of_a_job_without_logs_is_empty(api: Fetch) -> None:
    pool = registered_pool("dev")
    get_registry().add_job("job-quiet", pool.id, pool.name, "cell", "ab" * 32, ranks=2)
    status, body = await api("GET", "jobs", "job-quiet", "output")
    assert (status, body) == (200, {"job": "job-quiet", "status": "running", "ranks": [], "tail": ""})


async def test_output_of_an_unknown_job_is_404_as_the_job_itself(api: Fetch) -> None:
    status, body = await api("GET", "jobs", "job-nope", "output")
    job_status, job_body = await api("GET", "jobs", "job-nope")
    assert (status, body) == (job_status, job_body)
    assert status == 404 and '"job-nope"' in body["message"]


@pytest.mark.parametrize("lines", ["0", "501", "ten", "-1", "4.5"])
async def test_a_bad_lines_is_400_in_one_line_naming_the_value_and_an_example(
    api: Fetch, running_job: tuple[str, JobLogs], lines: str
) -> None:
    status, body = await api("GET", "jobs", running_job[0], "output", params={"lines": lines})
    assert status == 400
    assert body == {
        "message": f'"lines" must be a whole number from 1 to 500, got "{lines}" (e.g. ?lines=40)',
        "field": "lines",
    }


async def test_an_unknown_query_parameter_is_400_naming_it(api: Fetch, running_job: tuple[str, JobLogs]) -> None:
    status, body = await api("GET", "jobs", running_job[0], "output", params={"line": "3"})
    assert (status, body["field"]) == (400, "line")
    assert body["message"] == (
        'unknown query parameter "line" for GET /gpugeek/jobs/<id>/output (known: lines, since, limit); e.g. ?lines=40'
    )
