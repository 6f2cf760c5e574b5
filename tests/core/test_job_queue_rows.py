"""The pool's queue as registry rows: arrival order, turns, leaving, and jobs whose submitter is gone."""

from __future__ import annotations

from gpugeek_jupyter.cost.ledger import job_cost
from gpugeek_jupyter.store import JobStatus, PoolStatus, Registry
from support.queue_rows import queue


def finish(registry: Registry, job_id: str) -> None:
    registry.finish_job(job_id, JobStatus.SUCCEEDED, 0, [0, 0], None, {})


def test_a_job_with_nobody_ahead_runs_at_once_and_the_next_waits_behind_it(registry: Registry, pool_id: int) -> None:
    first = queue(registry, pool_id, "job-1")
    second = queue(registry, pool_id, "job-2")
    assert (first.status, first.ahead) == (JobStatus.RUNNING, [])
    assert second.status is JobStatus.QUEUED
    assert [j.id for j in second.ahead] == ["job-1"]
    assert registry.take_turn("job-2", pool_id).status is JobStatus.QUEUED

    finish(registry, "job-1")
    turn = registry.take_turn("job-2", pool_id)
    assert (turn.status, turn.ahead, turn.previous) == (JobStatus.RUNNING, [], "job-1")
    assert [j.id for j in registry.open_jobs(pool_id)] == ["job-2"]


def test_jobs_take_their_turns_in_arrival_order(registry: Registry, pool_id: int) -> None:
    for n in range(1, 5):
        queue(registry, pool_id, f"job-{n}")
    order = []
    for _ in range(4):
        for job in reversed(registry.open_jobs(pool_id)):  # the last to arrive look first: no matter
            registry.take_turn(job.id, pool_id)
        [running] = [j for j in registry.open_jobs(pool_id) if j.status is JobStatus.RUNNING]
        order.append(running.id)
        finish(registry, running.id)
    assert order == ["job-1", "job-2", "job-3", "job-4"]


def test_a_job_that_leaves_the_queue_never_ran_and_costs_nothing(registry: Registry, pool_id: int) -> None:
    queue(registry, pool_id, "job-1")
    queue(registry, pool_id, "job-2")
    assert registry.leave_queue("job-2", "cancelled while queued")
    left = registry.job("job-2")
    assert (left.status, left.failure_reason) == (JobStatus.CANCELLED, "cancelled while queued")
    assert left.started_at == left.ended_at
    assert job_cost(registry, "job-2").total_usd == 0
    assert not registry.leave_queue("job-1", "cancelled while queued")  # running: not in the queue any more


def test_a_stopped_pool_cancels_its_queued_jobs_saying_they_were_queued(registry: Registry, pool_id: int) -> None:
    queue(registry, pool_id, "job-1")
    queue(registry, pool_id, "job-2")
    registry.set_pool_status(pool_id, PoolStatus.STOPPED, reason="stopped by %gpugeek_stop")
    running, waiting = registry.job("job-1"), registry.job("job-2")
    assert (running.status, running.failure_reason) == (JobStatus.CANCELLED, "stopped by %gpugeek_stop")
    assert (waiting.status, waiting.failure_reason) == (
        JobStatus.CANCELLED,
        "stopped by %gpugeek_stop while it was queued",
    )
    assert waiting.started_at == waiting.ended_at


def test_jobs_of_a_gone_submitter_are_ended_failed_if_running_and_cancelled_if_queued(
    registry: Registry, pool_id: int
) -> None:
    queue(registry, pool_id, "job-1")
    queue(registry, pool_id, "job-2")
    queue(registry, pool_id, "job-3")
    registry.end_orphaned_jobs(["job-1", "job-2"], "its submitter ended")
    assert registry.job("job-1").status is JobStatus.FAILED
    assert registry.job("job-2").status is JobStatus.CANCELLED
    assert registry.take_turn("job-3", pool_id).status is JobStatus.RUNNING


def test_rows_of_a_release_before_the_queue_hold_nobody_up(registry: Registry, pool_id: int) -> None:
    registry.add_job("job-old", pool_id, "shared", "cell", "0" * 64, 2)  # running, no submitter known
    assert queue(registry, pool_id, "job-new").status is JobStatus.RUNNING


def test_a_refused_job_leaves_no_row(registry: Registry, pool_id: int) -> None:
    queue(registry, pool_id, "job-1")
    queue(registry, pool_id, "job-2")
    registry.withdraw_job("job-2")
    assert [j.id for j in registry.list_jobs(pool_id=pool_id)] == ["job-1"]


def test_job_ids_carry_48_random_bits() -> None:
    """The id is the registry's key: 32 bits met a taken id about once in four over 50,000 cells."""
    import re

    from gpugeek_jupyter.jobs.request import new_job_id

    ids = {new_job_id() for _ in range(20_000)}
    assert len(ids) == 20_000
    assert all(re.fullmatch(r"job-[0-9a-f]{12}", job_id) for job_id in ids)
