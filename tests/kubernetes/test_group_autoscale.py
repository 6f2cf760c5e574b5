"""The autoscaling rule: more than 10 pending tasks (or ranks of queued jobs) add 2 workers; idle
workers go after a cooldown, never while a job runs.

The rule is tested as a pure function with explicit clocks, then for real on a dask LocalCluster
(in-process workers, so a scale-up takes milliseconds): slow tasks are submitted and the group is
watched growing 2 workers at a time and shrinking again once idle. Real pools with real jobs in
their queue: ``tests/jobs/test_autoscaled_pools.py``, ``tests/slurm/test_slurm_autoscale.py``.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from distributed import Client, LocalCluster

from gpugeek_jupyter.pools.autoscale import (
    AutoscalePolicy,
    GroupAdaptive,
    GroupPolicies,
    QueueLoad,
    SpecClusterGroup,
    SpecClusterWorkers,
    _scheduler_probe,
    adapt_groups,
    decide,
    describe_pending,
)

RULE = AutoscalePolicy(pending_threshold=10, step=2, idle_cooldown=60, minimum=0, maximum=8)


# -- the rule ----------------------------------------------------------------------------------------
def rule(**state: object) -> tuple[int, tuple[str, ...]]:
    defaults: dict[str, object] = dict(now=1000.0, pending=0, planned=2, arriving=0, idle_since={}, last_scale_up=None)
    defaults.update(state)
    decision = decide(RULE, **defaults)  # type: ignore[arg-type]
    return decision.target, decision.close


def test_more_than_ten_pending_tasks_add_two_workers() -> None:
    assert rule(pending=11, planned=2) == (4, ())


def test_ten_pending_tasks_are_not_enough_to_scale_up() -> None:
    assert rule(pending=10, planned=2) == (2, ())


def test_scale_up_stops_at_the_maximum() -> None:
    assert rule(pending=50, planned=7) == (8, ())
    assert rule(pending=50, planned=8) == (8, ())


def test_no_new_workers_while_the_last_ones_are_still_arriving() -> None:
    assert rule(pending=50, planned=4, arriving=2) == (4, ())


def test_a_worker_idle_for_the_cooldown_is_removed() -> None:
    assert rule(planned=2, idle_since={"w1": 1000.0 - 60, "w2": 1000.0 - 59}) == (1, ("w1",))


def test_nothing_is_removed_within_the_cooldown_after_a_scale_up() -> None:
    assert rule(planned=4, idle_since={"w1": 0.0}, last_scale_up=1000.0 - 30) == (4, ())


def test_nothing_is_removed_while_tasks_are_pending() -> None:
    assert rule(pending=3, planned=2, idle_since={"w1": 0.0, "w2": 0.0}) == (2, ())


def test_the_group_never_shrinks_below_its_minimum_and_grows_back_to_it() -> None:
    keep_one = AutoscalePolicy(minimum=1, maximum=4, idle_cooldown=60)
    idle = {"w1": 0.0, "w2": 0.0}
    shrink = decide(keep_one, now=1000.0, pending=0, planned=2, arriving=0, idle_since=idle, last_scale_up=None)
    assert (shrink.target, len(shrink.close)) == (1, 1)
    grow = decide(keep_one, now=1000.0, pending=0, planned=0, arriving=0, idle_since={}, last_scale_up=None)
    assert grow.target == 1


def test_ranks_of_queued_jobs_count_as_pending_work() -> None:
    assert rule(pending=0, queued_ranks=11, planned=2) == (4, ())
    assert rule(pending=6, queued_ranks=5, planned=2) == (4, ())


def test_ten_pending_tasks_and_queued_ranks_together_are_not_enough_to_scale_up() -> None:
    assert rule(pending=4, queued_ranks=6, planned=2) == (2, ())


def test_queued_ranks_keep_idle_workers_as_pending_tasks_do() -> None:
    assert rule(queued_ranks=1, planned=2, idle_since={"w1": 0.0, "w2": 0.0}) == (2, ())


def test_no_worker_is_idle_while_a_job_of_the_pool_runs() -> None:
    assert rule(busy=True, planned=3, idle_since={"w1": 0.0, "w2": 0.0, "w3": 0.0}) == (3, ())


def test_a_running_job_still_scales_up_for_the_queue_behind_it() -> None:
    assert rule(busy=True, queued_ranks=16, planned=4) == (6, ())


def test_a_running_job_on_a_group_below_its_count_grows_it_at_once_up_to_the_maximum() -> None:
    to_zero = AutoscalePolicy(minimum=0, maximum=8, pending_threshold=10)
    decision = decide(
        to_zero, now=0.0, pending=0, planned=0, arriving=0, idle_since={}, last_scale_up=None, busy=True, needed=2
    )
    assert (decision.target, decision.reason) == (2, "a running job waits for 2 workers")
    capped = decide(
        to_zero, now=0.0, pending=0, planned=0, arriving=0, idle_since={}, last_scale_up=None, busy=True, needed=12
    )
    assert capped.target == 8


def test_pending_work_is_described_by_where_it_waits() -> None:
    assert describe_pending(1, 2) == "3 pending: 1 task, 2 ranks of queued jobs"
    assert describe_pending(0, 1) == "1 pending: 1 rank of queued jobs"
    assert describe_pending(0, 0) == "0 pending"


def test_an_impossible_policy_is_refused_with_an_example() -> None:
    with pytest.raises(ValueError, match=r"e\.g\. AutoscalePolicy\(minimum=0, maximum=8\)"):
        AutoscalePolicy(minimum=5, maximum=2)


def test_the_scheduler_probe_loads_where_this_package_is_not_installed(tmp_path) -> None:
    from distributed.protocol.pickle import dumps

    payload = tmp_path / "probe.pickle"
    payload.write_bytes(dumps(_scheduler_probe()))
    code = "import pickle, sys; f = pickle.loads(open(sys.argv[1], 'rb').read()); print(callable(f))"
    result = subprocess.run(
        [sys.executable, "-I", "-c", code, str(payload)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "True", result.stderr


# -- on a real LocalCluster --------------------------------------------------------------------------
@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(n_workers=0, processes=False, threads_per_worker=1, dashboard_address=":0") as c:
        yield c


EXECUTIONS: list[int] = []
_lock = threading.Lock()


def slow(i: int, seconds: float = 0.15) -> int:
    with _lock:
        EXECUTIONS.append(i)
    time.sleep(seconds)  # the work the autoscaler reacts to
    return i


def sizes_until(adaptive: GroupAdaptive, done: object, timeout: float = 60.0) -> list[int]:
    """The group's successive sizes, until ``done()`` is true."""
    deadline = time.monotonic() + timeout
    sizes = [len(adaptive.group.requested())]
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"autoscaler stuck at sizes {sizes}, log {list(adaptive.log)}"
        size = len(adaptive.group.requested())
        if size != sizes[-1]:
            sizes.append(size)
        time.sleep(0.01)
    return sizes


def ups(adaptive: GroupAdaptive) -> list[int]:
    return [entry["n"] for _, entry in adaptive.log if entry["status"] == "up"]


def test_pending_tasks_add_workers_two_at_a_time_and_idle_ones_leave_after_the_cooldown(cluster: LocalCluster) -> None:
    policy = AutoscalePolicy(maximum=6, idle_cooldown=0.5, interval=0.05)
    group = SpecClusterGroup(cluster, "burst")
    [adaptive] = adapt_groups(cluster, [group], policy)
    with Client(cluster) as client:
        futures = client.map(slow, range(40))
        sizes_until(adaptive, lambda: all(f.done() for f in futures))  # noqa: F821  (deleted after the wait)
        assert ups(adaptive)[:3] == [2, 4, 6]
        assert max(len(group.requested()), *ups(adaptive)) <= 6
        assert sorted(client.gather(futures)) == list(range(40))
        del futures
        sizes_until(adaptive, lambda: not group.requested())
    adaptive.stop()


def test_ten_pending_tasks_or_fewer_never_scale_up(cluster: LocalCluster) -> None:
    policy = AutoscalePolicy(minimum=1, maximum=6, idle_cooldown=30, interval=0.05)
    [adaptive] = adapt_groups(cluster, [SpecClusterGroup(cluster, "steady")], policy)
    with Client(cluster) as client:
        sizes_until(adaptive, lambda: len(cluster.scheduler_info["workers"]) == 1)
        futures = client.map(slow, range(11), seconds=0.05)  # one running, ten pending
        client.gather(futures)
    assert ups(adaptive) == [1]  # only the minimum
    adaptive.stop()


def test_each_group_scales_on_its_own(cluster: LocalCluster) -> None:
    policies = GroupPolicies(
        default=AutoscalePolicy(maximum=4, idle_cooldown=0.3, interval=0.05),
        by_group={"reserved": AutoscalePolicy(minimum=1, maximum=1, idle_cooldown=0.3, interval=0.05)},
    )
    reserved, spot = SpecClusterGroup(cluster, "reserved"), SpecClusterGroup(cluster, "spot")
    adaptive_reserved, adaptive_spot = adapt_groups(cluster, [reserved, spot], policies)
    with Client(cluster) as client:
        futures = client.map(slow, range(30))
        sizes_until(adaptive_spot, lambda: all(f.done() for f in futures))  # noqa: F821  (deleted after the wait)
        del futures
        sizes_until(adaptive_spot, lambda: not spot.requested())
        assert reserved.requested() == {"reserved-0"}  # the other group kept its one worker throughout
        assert ups(adaptive_reserved) == [1]
        assert ups(adaptive_spot)[:2] == [2, 4]
    for adaptive in (adaptive_reserved, adaptive_spot):
        adaptive.stop()


def test_workers_stay_while_the_queue_says_a_job_runs_and_go_after_the_cooldown_once_none_does(
    cluster: LocalCluster,
) -> None:
    policy = AutoscalePolicy(minimum=0, maximum=4, pending_threshold=1, idle_cooldown=0.3, interval=0.05)
    queue = {"now": QueueLoad(queued_ranks=2, running=True)}  # what the pool's registry rows would say
    group = SpecClusterWorkers(cluster)
    [adaptive] = adapt_groups(cluster, [group], policy, queue=lambda: queue["now"])
    sizes_until(adaptive, lambda: len(cluster.scheduler_info["workers"]) == 4)
    assert group.requested() == {"0", "1", "2", "3"}  # named as the cluster names its own workers
    queue["now"] = QueueLoad(running=True)  # the queue is empty, a job still runs
    time.sleep(10 * policy.idle_cooldown)
    assert len(group.requested()) == 4
    assert not [e for _, e in adaptive.log if e["status"] == "down"]
    queue["now"] = QueueLoad()
    sizes_until(adaptive, lambda: not group.requested())
    adaptive.stop()


def test_scaling_down_never_loses_a_result_the_client_holds(cluster: LocalCluster) -> None:
    policy = AutoscalePolicy(maximum=4, idle_cooldown=0.2, interval=0.05)
    group = SpecClusterGroup(cluster, "burst")
    [adaptive] = adapt_groups(cluster, [group], policy)
    EXECUTIONS.clear()
    with Client(cluster) as client:
        futures = client.map(slow, range(20), seconds=0.05)
        sizes_until(adaptive, lambda: all(f.done() for f in futures))  # noqa: F821  (deleted after the wait)
        # idle now, but every worker holds results only it has: the scheduler refuses to retire them
        sizes_until(adaptive, lambda: any(e["status"] == "down" for _, e in adaptive.log))
        assert sorted(client.gather(futures)) == list(range(20))
        assert sorted(EXECUTIONS) == list(range(20))  # nothing was recomputed
    adaptive.stop()
