"""The lost-pool sweeper: one write transaction when something is lost, nothing written otherwise."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from gpugeek_jupyter.store import JobStatus, PoolStatus, Registry

LOST_AFTER = 15.0


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def commits_by_others(path: Path) -> sqlite3.Connection:
    """A connection whose ``PRAGMA data_version`` changes when any other connection commits."""
    return sqlite3.connect(path)


def data_version(watcher: sqlite3.Connection) -> int:
    return int(watcher.execute("PRAGMA data_version").fetchone()[0])


def dead_pid() -> int:
    """The pid of a process that has exited."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


def test_sweeping_while_every_owner_heart_beats_writes_nothing(tmp_path: Path) -> None:
    clock = Clock()
    registry = Registry(tmp_path / "r.sqlite", clock=clock)
    pools = [registry.add_pool(f"p{i}", "local", {}, {}, owner="me").id for i in range(5)]
    stopped = registry.add_pool("old", "local", {}, {}, owner="me")
    registry.set_pool_status(stopped.id, PoolStatus.STOPPED, reason="done")
    watcher = commits_by_others(registry.path)
    before = data_version(watcher)
    for _ in range(3):
        clock.now += 10
        registry.heartbeat(pools)
        after_beat = data_version(watcher)
        assert registry.mark_lost_pools(LOST_AFTER) == []
        assert data_version(watcher) == after_beat  # the sweep itself committed nothing
    assert data_version(watcher) != before  # while the heartbeats did


def test_silent_pools_are_lost_together_with_their_workers_and_jobs_at_each_last_heartbeat(tmp_path: Path) -> None:
    clock = Clock()
    registry = Registry(tmp_path / "r.sqlite", clock=clock)
    silent = []
    for i in range(40):
        pool = registry.add_pool(f"quiet-{i}", "local", {}, {}, owner="me")
        registry.open_worker_interval(pool.id, "0", "spot")
        registry.open_worker_interval(pool.id, "1", "on_demand")
        registry.add_job(f"job-{i}", pool.id, pool.name, "cell", "ab", ranks=2)
        silent.append(pool.id)
        clock.now += 1.0  # each pool's last heartbeat is a second after the previous one's
    alive = registry.add_pool("alive", "local", {}, {}, owner="me")
    registry.open_worker_interval(alive.id, "0", "spot")
    clock.now += 100.0
    registry.heartbeat([alive.id])

    lost = registry.mark_lost_pools(LOST_AFTER)

    assert [p.id for p in lost] == silent
    for record in lost:
        assert record.status is PoolStatus.LOST and record.ended_at == record.heartbeat_at
        assert record.reason is not None and record.reason.startswith("no heartbeat from its owner for ")
        assert {w.stopped_at for w in registry.worker_intervals(record.id)} == {record.heartbeat_at}
        assert {w.stop_reason for w in registry.worker_intervals(record.id)} == {"pool lost"}
        [job] = registry.list_jobs(pool_id=record.id)
        assert (job.status, job.ended_at, job.failure_reason) == (JobStatus.FAILED, record.heartbeat_at, "pool lost")
        assert [(e["kind"], e["message"]) for e in registry.events(record.id)] == [("lost", record.reason)]
    assert registry.pool_by_id(alive.id).status is PoolStatus.STARTING
    assert registry.worker_intervals(alive.id)[0].stopped_at is None
    assert registry.mark_lost_pools(LOST_AFTER) == []  # ended pools are never swept again


def test_a_silent_pool_says_how_long_it_was_silent(tmp_path: Path) -> None:
    clock = Clock()
    registry = Registry(tmp_path / "r.sqlite", clock=clock)
    registry.add_pool("quiet", "local", {}, {}, owner="me")
    clock.now += 16.0
    [lost] = registry.mark_lost_pools(LOST_AFTER)
    assert lost.reason == "no heartbeat from its owner for 16 s"


def test_a_pool_whose_owner_process_died_on_this_host_is_lost_before_its_heartbeat_deadline(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "r.sqlite")
    orphan = registry.add_pool("orphan", "local", {}, {}, owner="kernel gone")
    registry.open_worker_interval(orphan.id, "0", "on_demand")
    mine = registry.add_pool("mine", "local", {}, {}, owner="me")
    with registry._write() as db:  # as the exited process wrote it
        db.execute("UPDATE pools SET owner_pid = ? WHERE id = ?", (dead_pid(), orphan.id))
    [lost] = registry.mark_lost_pools(lost_after_seconds=3600)
    assert (lost.id, lost.reason) == (orphan.id, "its owner process exited without stopping it")
    assert lost.ended_at == lost.heartbeat_at == registry.worker_intervals(orphan.id)[0].stopped_at
    assert registry.pool_by_id(mine.id).status is PoolStatus.STARTING


def test_an_owner_on_another_host_is_judged_by_its_heartbeats_only(tmp_path: Path) -> None:
    clock = Clock()
    registry = Registry(tmp_path / "r.sqlite", clock=clock)
    remote = registry.add_pool("remote", "local", {}, {}, owner="kernel elsewhere")
    with registry._write() as db:  # a pid that means nothing here
        db.execute("UPDATE pools SET owner_pid = ?, owner_host = 'another-host' WHERE id = ?", (dead_pid(), remote.id))
    assert registry.mark_lost_pools(LOST_AFTER) == []
    clock.now += LOST_AFTER + 1
    [lost] = registry.mark_lost_pools(LOST_AFTER)
    assert lost.id == remote.id and "no heartbeat" in (lost.reason or "")


def test_a_pool_that_heart_beats_again_before_the_sweep_is_not_lost(tmp_path: Path) -> None:
    clock = Clock()
    registry = Registry(tmp_path / "r.sqlite", clock=clock)
    pool = registry.add_pool("late", "local", {}, {}, owner="me")
    clock.now += LOST_AFTER + 1
    registry.heartbeat([pool.id])
    assert registry.mark_lost_pools(LOST_AFTER) == []
    assert registry.pool_by_id(pool.id).status is PoolStatus.STARTING
