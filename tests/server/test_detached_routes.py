"""Detached jobs through REST: POST /gpugeek/jobs on a kept pool, the event stream page by page
(?since=), DELETE to cancel, and one-line errors for bad bodies; with the real agent."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.agent import agent_stopped_afterwards

from .conftest import Fetch
from .test_launch import wait_for_pool

pytestmark = pytest.mark.slow


@pytest.fixture
def kept_pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import gpugeek_jupyter

    monkeypatch.setenv("GPUGEEK_AGENT_IDLE", "60")
    with agent_stopped_afterwards():
        pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="kept", keep=True)
        yield pool


async def _events_until_end(api: Fetch, job_id: str, timeout: float = 120) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    since, deadline = 0, time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, page = await api("GET", "jobs", job_id, "output", params={"since": str(since), "limit": "3"})
        assert status == 200, page
        events += page["events"]
        since = page["next"]
        if page["ended"]:
            return events
        await asyncio.sleep(0.2)
    raise AssertionError(f"no end event after {timeout} s: {events}")


async def test_a_script_job_submitted_through_rest_runs_detached_and_its_stream_pages_in_order(
    api: Fetch, kept_pool: Any, tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import os, sys\nfor i in range(4):\n    print('step', i, 'of rank', os.environ['RANK'], sys.argv[1:])\n"
    )
    status, body = await api("POST", "jobs", body={"pool": "kept", "script_path": str(script), "args": ["--lr", "0.1"]})
    assert status == 201, body
    job = body["job"]
    assert job["status"] in ("queued", "running") and job["submitter"] == "the Jupyter server, detached"

    events = await _events_until_end(api, job["id"])
    assert [e["seq"] for e in events] == list(range(len(events)))  # every page followed the last, none lost
    lines = "".join(e["text"] for e in events if e["kind"] == "out")
    for rank in (0, 1):
        assert f"step 3 of rank {rank} ['--lr', '0.1']" in lines
    assert events[-1] == {**events[-1], "kind": "end", "status": "succeeded", "failure": None}
    status, final = await api("GET", "jobs", job["id"])
    assert final["job"]["status"] == "succeeded"


async def test_delete_cancels_a_running_detached_job(api: Fetch, kept_pool: Any, tmp_path: Path) -> None:
    script = tmp_path / "forever.py"
    script.write_text("import time\nprint('started', flush=True)\ntime.sleep(600)\n")
    status, body = await api("POST", "jobs", body={"pool": "kept", "script_path": str(script)})
    assert status == 201, body
    job_id = body["job"]["id"]
    deadline = time.monotonic() + 60
    while (await api("GET", "jobs", job_id))[1]["job"]["status"] != "running" and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    status, body = await api("DELETE", "jobs", job_id)
    assert status == 200, body
    events = await _events_until_end(api, job_id, timeout=30)
    assert events[-1]["status"] == "cancelled" and "cancelled through the Jupyter server" in events[-1]["failure"]


BAD_BODIES = [
    ({"script_path": "train.py"}, 400, '"pool" must be given: the kept pool to run on (e.g. "pool": "train")'),
    ({"pool": "kept", "script_path": "t.py", "args": [1]}, 400, '"args" must be a list of strings, got [1]'),
    ({"pool": "kept", "script": "t.py"}, 400, 'unknown field "script" in the job submission'),
    ({"pool": "kept", "script_path": 3}, 400, '"script_path" must be a string or null'),
    (
        {"pool": "kept", "script_path": "t.py", "track": 1},
        400,
        '"track" must be a boolean or a string or null, got 1 (a number) (e.g. "track": "http://127.0.0.1:5000")',
    ),
]


@pytest.mark.parametrize(("body", "code", "start"), BAD_BODIES, ids=[str(b) for b, _, _ in BAD_BODIES])
async def test_a_bad_submission_is_one_line_naming_the_field(
    api: Fetch, body: dict[str, Any], code: int, start: str
) -> None:
    status, reply = await api("POST", "jobs", body=body)
    assert status == code and reply["message"].startswith(start.split(" or null")[0]), reply
    assert "\n" not in reply["message"]


async def test_a_job_on_a_pool_the_server_launched_makes_it_kept_and_on_anothers_pool_is_refused(
    api: Fetch, cpu_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugeek_jupyter.store import get_registry

    monkeypatch.setenv("GPUGEEK_AGENT_IDLE", "60")
    (tmp_path / "t.py").write_text("import os\nprint('rank', os.environ['RANK'])\n")
    status, reply = await api("POST", "jobs", body={"pool": "test-pool", "script_path": str(tmp_path / "t.py")})
    assert status == 409 and reply["message"] == (
        f'pool "test-pool" belongs to another process (pid {os.getpid()}) and ends with it, and a detached job '
        "with it; run detached jobs on a kept pool"
    ), reply
    with agent_stopped_afterwards():
        status, body = await api("POST", "pools", body={"gpu_type": "cpu", "count": 2, "name": "served"})
        assert status == 201, body
        await wait_for_pool(api, "served", "ready")
        served = get_registry().latest_pool("served")
        status, body = await api("POST", "jobs", body={"pool": "served", "script_path": str(tmp_path / "t.py")})
        assert status == 201, body
        events = await _events_until_end(api, body["job"]["id"])
        record = get_registry().latest_pool("served")
        assert record.id != served.id and record.owner.startswith("gpugeek agent (pid "), record
        assert get_registry().pool_by_id(served.id).status.value == "stopped"
    assert events[-1]["kind"] == "end" and events[-1]["status"] == "succeeded", events[-1]
    assert {"rank 0\n", "rank 1\n"} <= {e["text"] for e in events if e["kind"] == "out"}, events


async def test_a_pool_launched_with_keep_through_rest_belongs_to_the_agent(
    api: Fetch, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugeek_jupyter.store import get_registry

    monkeypatch.setenv("GPUGEEK_AGENT_IDLE", "60")
    with agent_stopped_afterwards():
        status, body = await api(
            "POST", "pools", body={"gpu_type": "cpu", "count": 1, "name": "kept-rest", "keep": True}
        )
        assert status == 201, body
        record = get_registry().latest_pool("kept-rest")
        assert record.owner.startswith("gpugeek agent (pid ") and record.owner_pid != os.getpid()
        status, body = await api("DELETE", "pools", "kept-rest")
        assert status == 200 and body["pool"]["status"] == "stopped", body
    status, reply = await api("POST", "pools", body={"gpu_type": "cpu", "count": 1, "keep": "yes"})
    assert (
        status == 400
        and reply["message"] == '"keep" must be a boolean or null, got "yes" (a string) (e.g. "keep": true)'
    )


async def test_a_detached_scripts_logged_metrics_are_in_its_stream_and_its_metrics_route(
    api: Fetch, kept_pool: Any, tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import os\nimport gpugeek_jupyter\nrank = int(os.environ['RANK'])\n"
        "for step in range(3):\n    gpugeek_jupyter.log(step=step, loss=10.0 * rank + step)\n"
    )
    status, body = await api("POST", "jobs", body={"pool": "kept", "script_path": str(script)})
    assert status == 201, body
    events = await _events_until_end(api, body["job"]["id"])
    assert events[-1]["status"] == "succeeded", events
    streamed = sorted((e["rank"], row[0], row[3]) for e in events if e["kind"] == "metrics" for row in e["rows"])
    expected = sorted((rank, step, 10.0 * rank + step) for rank in (0, 1) for step in range(3))
    assert streamed == expected
    status, kept = await api("GET", "jobs", body["job"]["id"], "metrics")
    assert status == 200 and kept["names"] == ["loss"]
    assert sorted((row["rank"], row["step"], row["value"]) for row in kept["metrics"]) == expected
