"""Bounded reads for the panel, typed updates, and the running total of bytes sent."""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import pytest

from gpugeek_jupyter.store import KEEP, JobStatus, PoolStatus, Registry

DAY = 86_400.0


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def registry(tmp_path: Path, clock: Clock) -> Registry:
    return Registry(tmp_path / "r.sqlite", clock=clock)


def ended_pool(registry: Registry, clock: Clock, name: str, ended_at: float, namespace: str | None = None) -> int:
    saved = clock.now
    clock.now = ended_at - 60
    pool = registry.add_pool(name, "local", {}, {}, owner="me", namespace=namespace)
    clock.now = ended_at
    registry.set_pool_status(pool.id, PoolStatus.STOPPED, reason="done")
    clock.now = saved
    return pool.id


def test_recent_pools_are_the_live_ones_and_those_that_ended_since_the_cutoff(registry: Registry, clock: Clock) -> None:
    old = ended_pool(registry, clock, "old", clock.now - 2 * DAY)
    recent = ended_pool(registry, clock, "recent", clock.now - 3600)
    live = registry.add_pool("live", "local", {}, {}, owner="me").id
    assert [p.id for p in registry.recent_pools(ended_since=clock.now - DAY)] == [recent, live]
    assert [p.id for p in registry.recent_pools(ended_since=clock.now - 3 * DAY)] == [old, recent, live]


def test_recent_pools_keep_the_last_ended_ones_when_limited(registry: Registry, clock: Clock) -> None:
    ended = [ended_pool(registry, clock, f"p{i}", clock.now - 1000 + i) for i in range(6)]
    live = registry.add_pool("live", "local", {}, {}, owner="me").id
    assert [p.id for p in registry.recent_pools(clock.now - DAY, ended_limit=2)] == [*ended[-2:], live]


def test_recent_pools_filter_by_namespace(registry: Registry, clock: Clock) -> None:
    ended_pool(registry, clock, "a-old", clock.now - 60, namespace="team-a")
    wanted = ended_pool(registry, clock, "b-old", clock.now - 60, namespace="team-b")
    registry.add_pool("a-live", "local", {}, {}, owner="me", namespace="team-a")
    live = registry.add_pool("b-live", "local", {}, {}, owner="me", namespace="team-b").id
    assert [p.id for p in registry.recent_pools(clock.now - DAY, namespace="team-b")] == [wanted, live]


def test_ended_pools_come_in_pages_newest_first(registry: Registry, clock: Clock) -> None:
    ended = [ended_pool(registry, clock, f"p{i}", clock.now - 10 * DAY + i) for i in range(5)]
    registry.add_pool("live", "local", {}, {}, owner="me")  # not history
    first = registry.ended_pools(limit=2)
    second = registry.ended_pools(before_id=first[-1].id, limit=2)
    last = registry.ended_pools(before_id=second[-1].id, limit=2)
    assert [[p.id for p in page] for page in (first, second, last)] == [ended[:2:-1], ended[2:0:-1], ended[:1]]


def test_open_worker_intervals_are_the_running_workers_of_the_given_pools_only(registry: Registry) -> None:
    a = registry.add_pool("a", "local", {}, {}, owner="me").id
    b = registry.add_pool("b", "local", {}, {}, owner="me").id
    running = registry.open_worker_interval(a, "0", "spot")
    registry.close_worker_interval(registry.open_worker_interval(a, "1", "spot"), "done")
    registry.open_worker_interval(b, "0", "spot")
    assert [w.id for w in registry.open_worker_intervals([a])] == [running]
    assert registry.open_worker_intervals([]) == []


def test_latest_utilization_is_the_newest_samples_oldest_first(registry: Registry, clock: Clock) -> None:
    pool = registry.add_pool("busy", "local", {}, {}, owner="me").id
    for i in range(100):
        registry.add_utilization(pool, i / 100, gpus=2, at=clock.now + i)
    latest = registry.latest_utilization(pool, 3)
    assert [s.mean_util for s in latest] == [0.97, 0.98, 0.99]
    assert latest == registry.utilization(pool)[-3:]


def test_bytes_sent_in_any_window_are_those_of_the_samples_in_it_whatever_the_insert_order(registry: Registry) -> None:
    pools = [registry.add_pool(f"p{i}", "local", {}, {}, owner="me").id for i in range(2)]
    rng = random.Random(7)
    for _ in range(300):  # out of order, with ties
        registry.add_utilization(
            rng.choice(pools), 0.5, 1, net_bytes=rng.randint(0, 10_000), at=float(rng.randint(0, 50))
        )
    for _ in range(300):
        pool = rng.choice(pools)
        since, until = sorted(rng.uniform(-5, 55) for _ in range(2))
        if rng.random() < 0.2:
            since = float("-inf")
        expected = sum(s.net_bytes for s in registry.utilization(pool) if since < s.at <= until)
        assert registry.network_bytes(pool, since, until) == expected
    assert registry.network_bytes(pools[0], 10.0, 10.0) == 0


def panel_statements(registry: Registry, clock: Clock) -> list[str]:
    """The SQL of the panel's poll and of the sweeper, as SQLite was given it."""
    pool = registry.add_pool("live", "local", {}, {}, owner="me").id
    seen: list[str] = []
    db = registry._connection()
    db.set_trace_callback(seen.append)
    try:
        registry.mark_lost_pools(15.0)
        registry.recent_pools(clock.now - DAY, ended_limit=30)
        registry.recent_pools(clock.now - DAY, namespace="team-a")
        registry.ended_pools(before_id=100, limit=50)
        registry.open_worker_intervals([pool])
        registry.data_volume_marks([pool])
        registry.latest_pool("live")
        registry.latest_utilization(pool, 60)
        registry.network_bytes(pool, 0.0, clock.now)
        registry.worker_seconds(pool, 0.0, clock.now, clock.now)
        clock.now += 60
        registry.mark_lost_pools(15.0)  # and the sweeper's writes
    finally:
        db.set_trace_callback(None)
    return [s for s in seen if not s.startswith(("BEGIN", "COMMIT", "ROLLBACK"))]


def test_the_panels_reads_and_the_sweeper_search_indexes_instead_of_scanning_tables(
    registry: Registry, clock: Clock
) -> None:
    db = registry._connection()
    statements = panel_statements(registry, clock)
    assert len(statements) > 12
    for statement in statements:
        plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + statement)]
        scans = [
            step for step in plan if re.match(r"SCAN (pools|workers|jobs|utilization|data_volumes|pool_events)\b", step)
        ]
        assert scans == [], (statement, plan)


def test_set_pool_status_changes_the_addresses_only_when_given(registry: Registry) -> None:
    pool = registry.add_pool("dev", "local", {}, {}, owner="me").id
    registry.set_pool_status(pool, PoolStatus.READY, scheduler_address="tcp://10.0.0.5:8786", dashboard_link="http://d")
    registry.set_pool_status(pool, PoolStatus.STOPPING)
    record = registry.pool_by_id(pool)
    assert (record.scheduler_address, record.dashboard_link) == ("tcp://10.0.0.5:8786", "http://d")
    registry.set_pool_status(pool, PoolStatus.STOPPING, scheduler_address=KEEP, dashboard_link=None)
    record = registry.pool_by_id(pool)
    assert (record.scheduler_address, record.dashboard_link) == ("tcp://10.0.0.5:8786", None)


def test_ready_stamps_ready_at_and_a_final_status_ended_at(registry: Registry, clock: Clock) -> None:
    pool = registry.add_pool("dev", "local", {}, {}, owner="me").id
    clock.now += 5
    registry.set_pool_status(pool, PoolStatus.READY)
    clock.now += 5
    registry.set_pool_status(pool, PoolStatus.STOPPED, reason="done")
    record = registry.pool_by_id(pool)
    assert (record.ready_at, record.ended_at, record.reason) == (clock.now - 5, clock.now, "done")


def test_finish_job_records_the_outcome_and_when_it_ended(registry: Registry, clock: Clock) -> None:
    pool = registry.add_pool("dev", "local", {}, {}, owner="me").id
    registry.add_job("job-1", pool, "dev", "torchrun", "ab", ranks=2)
    clock.now += 30
    registry.finish_job(
        "job-1",
        JobStatus.FAILED,
        restarts=1,
        rank_exits=[0, 3],
        failure_reason="rank 1 exited 3",
        summary={"duration_s": 30.0, "failed_rank": 1},
    )
    job = registry.job("job-1")
    assert (job.status, job.ended_at, job.restarts, job.rank_exits) == (JobStatus.FAILED, clock.now, 1, [0, 3])
    assert (job.failure_reason, job.summary) == ("rank 1 exited 3", {"duration_s": 30.0, "failed_rank": 1})


def test_set_job_status_keeps_the_failure_reason_unless_given(registry: Registry, clock: Clock) -> None:
    pool = registry.add_pool("dev", "local", {}, {}, owner="me").id
    registry.add_job("job-1", pool, "dev", "cell", "ab", ranks=1)
    registry.set_job_failure_reason("job-1", "budget reached")
    assert registry.job("job-1").status is JobStatus.RUNNING
    registry.set_job_status("job-1", JobStatus.CANCELLED, ended_at=clock.now - 1)
    job = registry.job("job-1")
    assert (job.status, job.ended_at, job.failure_reason) == (JobStatus.CANCELLED, clock.now - 1, "budget reached")
    registry.set_job_status("job-1", JobStatus.FAILED, failure_reason="KeyboardInterrupt: ")
    job = registry.job("job-1")
    assert (job.ended_at, job.failure_reason) == (clock.now, "KeyboardInterrupt: ")


def job_path_statements(registry: Registry) -> list[str]:
    """The SQL a job writes on its way (queued, its turn, started, ended) and the next job's turn,
    as SQLite was given it."""
    from gpugeek_jupyter.store import Submitter

    pool = registry.add_pool("busy", "local", {}, {}, owner="me").id
    me = Submitter("notebook", os.getpid(), "here", 0.0)
    seen: list[str] = []
    db = registry._connection()
    db.set_trace_callback(seen.append)
    try:
        registry.queue_job("job-a", pool, "busy", "cell", "0" * 64, 2, me)
        registry.queue_job("job-b", pool, "busy", "cell", "0" * 64, 2, me)  # behind job-a
        registry.set_job_ranks("job-a", 2)
        registry.job("job-a")
        registry.finish_job("job-a", JobStatus.SUCCEEDED, 0, [0, 0], None, {})
        registry.take_turn("job-b", pool)
        registry.leave_queue("job-b", "cancelled")
    finally:
        db.set_trace_callback(None)
    return [s for s in seen if not s.startswith(("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"))]


def test_a_jobs_own_reads_and_writes_search_indexes_whatever_the_history(registry: Registry) -> None:
    """The warm path's registry work must not grow with ended pools and jobs (bench/jobs_latency.py
    measures it with 100,000 ended pools): no statement of it scans a table."""
    db = registry._connection()
    statements = job_path_statements(registry)
    assert len(statements) >= 7, statements
    for statement in statements:
        plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + statement)]
        scans = [step for step in plan if re.match(r"SCAN (pools|workers|jobs|utilization|pool_events)\b", step)]
        assert scans == [], (statement, plan)
