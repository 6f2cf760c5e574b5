"""Schedules and their runs as registry rows: a file of the previous schema upgrades with its rows
kept, a live name is unique, failures in a row pause, an ended run never moves back."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from gpugeek_jupyter.errors import ConflictError, NotFoundError
from gpugeek_jupyter.store import MIGRATIONS, Registry, RunStatus, ScheduleStatus


def _fields(name: str = "daily", **changes: Any) -> dict[str, Any]:
    return {
        "id": f"sched-{name}",
        "name": name,
        "kind": "script",
        "request": b"pickled request",
        "every_s": 86400.0,
        "cron": None,
        "timezone": "UTC",
        "resume": "latest",
        "checkpoints": "/tmp/ckpts",
        "pool_name": None,
        "pool_spec_json": '{"gpu_type": "cpu", "count": 2}',
        "overlap": "skip",
        "max_failures": 2,
        "next_run_at": 1000.0,
        "created_by": "tests",
        **changes,
    }


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    return Registry(tmp_path / "schedules.sqlite")


def test_a_file_of_the_schema_before_schedules_upgrades_and_keeps_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "v4.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    for step in MIGRATIONS[:4]:
        for statement in step.statements:
            db.execute(statement)
    db.execute("PRAGMA user_version = 4")
    db.execute(
        "INSERT INTO pools (name, backend, spec_json, prices_json, status, owner, owner_pid, owner_host,"
        " owner_started_at, created_at, heartbeat_at) VALUES ('p', 'local', '{}', '{}', 'stopped', 'o', 1, 'h', 0, 0, 0)"
    )
    db.execute(
        "INSERT INTO jobs (id, pool_id, pool_name, kind, code_sha256, ranks, status, started_at)"
        " VALUES ('job-00000001', 1, 'p', 'script', 'x', 2, 'succeeded', 5)"
    )
    db.close()

    registry = Registry(path)
    assert registry.job("job-00000001").status.value == "succeeded"
    record = registry.add_schedule(**_fields())
    assert (record.status, record.failures, record.request) == (ScheduleStatus.ACTIVE, 0, b"pickled request")
    assert registry.add_run(record.id, 1000.0, RunStatus.RUNNING).status is RunStatus.RUNNING


def test_a_live_schedule_name_is_unique_and_free_again_once_deleted(registry: Registry) -> None:
    first = registry.add_schedule(**_fields())
    with pytest.raises(ConflictError) as raised:
        registry.add_schedule(**_fields(id="sched-other"))
    assert str(raised.value) == "a schedule named 'daily' exists (delete it first, or pick another name)"
    registry.set_schedule_status(first.id, ScheduleStatus.DELETED)
    second = registry.add_schedule(**_fields(id="sched-other"))
    assert registry.schedule("daily").id == second.id
    assert registry.schedule(first.id).status is ScheduleStatus.DELETED  # kept, unlisted
    assert [s.id for s in registry.list_schedules()] == [second.id]


def test_an_unknown_schedule_is_named(registry: Registry) -> None:
    with pytest.raises(NotFoundError) as raised:
        registry.schedule("nightly")
    assert str(raised.value) == "no schedule 'nightly' (gpugeek_jupyter.schedules.list_schedules() lists them)"


def test_failures_in_a_row_pause_the_schedule_and_a_success_between_them_starts_the_count_again(
    registry: Registry,
) -> None:
    record = registry.add_schedule(**_fields())  # max_failures 2
    assert registry.count_outcome(record.id, failed=True, why="exit code 1").status is ScheduleStatus.ACTIVE
    assert registry.count_outcome(record.id, failed=False).failures == 0
    registry.count_outcome(record.id, failed=True, why="exit code 1")
    paused = registry.count_outcome(record.id, failed=True, why="rank 0 exited with code 3")
    assert paused.status is ScheduleStatus.PAUSED
    assert paused.reason == "paused after 2 failed runs in a row (the last: rank 0 exited with code 3)"
    resumed = registry.set_schedule_status(record.id, ScheduleStatus.ACTIVE)
    assert (resumed.status, resumed.failures, resumed.reason) == (ScheduleStatus.ACTIVE, 0, None)


def test_an_ended_run_never_moves_back(registry: Registry) -> None:
    record = registry.add_schedule(**_fields())
    run = registry.add_run(record.id, 1000.0, RunStatus.WAITING)
    registry.start_run(run.id)
    registry.run_submitted(run.id, "job-0000abcd", "daily-1", "/tmp/ckpts/step-4.pt")
    assert registry.end_run(run.id, RunStatus.SUCCEEDED)
    assert not registry.end_run(run.id, RunStatus.LOST, "the agent stopped")
    ended = registry.run(run.id)
    assert (ended.status, ended.job_id, ended.resumed_from) == (
        RunStatus.SUCCEEDED,
        "job-0000abcd",
        "/tmp/ckpts/step-4.pt",
    )
    skipped = registry.add_run(record.id, 2000.0, RunStatus.SKIPPED, reason="run 1 still went on")
    assert skipped.ended_at is not None and registry.open_runs() == []
    assert [r.id for r in registry.schedule_runs(record.id)] == [skipped.id, run.id]
