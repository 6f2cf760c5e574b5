"""The SQLite registry: concurrent writers, lifecycle rules, crash recovery."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpugeek_jupyter.errors import ConflictError, NotFoundError
from gpugeek_jupyter.store import JobStatus, PoolStatus, Registry

WRITES_PER_PROCESS = 150


def _hammer(path: str, writer: int, barrier) -> None:  # type: ignore[no-untyped-def]
    registry = Registry(path)
    barrier.wait()
    record = registry.add_pool(f"p{writer}", "local", {"count": 1}, {"on_demand": 1.0}, owner=f"writer {writer}")
    for i in range(WRITES_PER_PROCESS):
        interval = registry.open_worker_interval(record.id, str(i), "on_demand")
        registry.close_worker_interval(interval, "done")
        registry.heartbeat([record.id])
        registry.list_pools()


def test_eight_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "registry.sqlite")
    Registry(path)
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(8)
    writers = [context.Process(target=_hammer, args=(path, n, barrier)) for n in range(8)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(timeout=120)
    assert [w.exitcode for w in writers] == [0] * 8
    registry = Registry(path)
    assert sorted(p.name for p in registry.list_pools()) == [f"p{n}" for n in range(8)]
    intervals = registry.worker_intervals()
    assert len(intervals) == 8 * WRITES_PER_PROCESS
    assert all(i.stopped_at is not None and i.stop_reason == "done" for i in intervals)
    assert registry._read("PRAGMA integrity_check")[0][0] == "ok"


def test_a_live_name_cannot_be_taken_twice_but_is_free_after_stop(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "r.sqlite")
    first = registry.add_pool("dev", "local", {}, {}, owner="me")
    with pytest.raises(ConflictError, match="'dev' is already running"):
        registry.add_pool("dev", "local", {}, {}, owner="me")
    registry.set_pool_status(first.id, PoolStatus.STOPPED, reason="done")
    second = registry.add_pool("dev", "local", {}, {}, owner="me")
    assert second.id != first.id
    assert registry.latest_pool("dev").id == second.id


def test_final_status_closes_worker_intervals_and_running_jobs(tmp_path: Path) -> None:
    clock = iter(range(100, 1000, 10)).__next__
    registry = Registry(tmp_path / "r.sqlite", clock=lambda: float(clock()))
    pool = registry.add_pool("dev", "local", {}, {}, owner="me")
    registry.open_worker_interval(pool.id, "0", "spot")
    registry.add_job("j1", pool.id, "dev", "cell", "abc", ranks=1)
    registry.set_pool_status(pool.id, PoolStatus.FAILED, reason="boom")
    [interval] = registry.worker_intervals(pool.id)
    assert interval.stopped_at is not None and interval.stop_reason == "pool failed"
    job = registry.job("j1")
    assert job.status is JobStatus.FAILED and job.failure_reason == "boom"
    assert registry.events(pool.id)[-1]["message"] == "boom"


def test_a_stop_cancels_the_jobs_still_open_with_the_stops_reason(tmp_path: Path) -> None:
    clock = iter(range(100, 1000, 10)).__next__
    registry = Registry(tmp_path / "r.sqlite", clock=lambda: float(clock()))
    pool = registry.add_pool("dev", "local", {}, {}, owner="me")
    registry.add_job("j1", pool.id, "dev", "cell", "abc", ranks=1)
    registry.add_job("j2", pool.id, "dev", "cell", "abc", ranks=1)
    registry.finish_job("j2", status=JobStatus.SUCCEEDED, restarts=0, rank_exits=[0], failure_reason=None, summary={})
    registry.set_pool_status(pool.id, PoolStatus.STOPPED, reason="budget spent")
    assert (registry.job("j1").status, registry.job("j1").failure_reason) == (JobStatus.CANCELLED, "budget spent")
    assert registry.job("j2").status is JobStatus.SUCCEEDED  # an ended job keeps its status
    other = registry.add_pool("other", "local", {}, {}, owner="me")
    registry.add_job("j3", other.id, "other", "cell", "abc", ranks=1)
    registry.set_pool_status(other.id, PoolStatus.STOPPED)
    assert (registry.job("j3").status, registry.job("j3").failure_reason) == (JobStatus.CANCELLED, "pool stopped")


def test_pool_of_a_dead_owner_is_marked_lost_with_cost_ending_at_its_last_heartbeat(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    code = (
        "import sys; from gpugeek_jupyter.store import Registry; r = Registry(sys.argv[1]); "
        "p = r.add_pool('orphan', 'local', {}, {}, owner='doomed'); r.open_worker_interval(p.id, '0', 'on_demand')"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, env={**os.environ})
    registry = Registry(path)
    [lost] = registry.mark_lost_pools(lost_after_seconds=3600)
    assert lost.status is PoolStatus.LOST and "owner process exited" in (lost.reason or "")
    assert lost.ended_at == lost.heartbeat_at
    assert registry.worker_intervals(lost.id)[0].stopped_at == lost.heartbeat_at


def test_silent_owner_is_lost_after_the_heartbeat_deadline(tmp_path: Path) -> None:
    now = [1000.0]
    registry = Registry(tmp_path / "r.sqlite", clock=lambda: now[0])
    pool = registry.add_pool("quiet", "local", {}, {}, owner="me")
    assert registry.mark_lost_pools(lost_after_seconds=15) == []
    now[0] += 16
    [lost] = registry.mark_lost_pools(lost_after_seconds=15)
    assert lost.id == pool.id and "no heartbeat" in (lost.reason or "")


def test_unknown_names_say_what_is_running(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "r.sqlite")
    registry.add_pool("alpha", "local", {}, {}, owner="me")
    with pytest.raises(NotFoundError, match="running pools: alpha"):
        registry.live_pool("beta")
