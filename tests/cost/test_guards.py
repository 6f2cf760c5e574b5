"""Budget stop, idle shutdown and preemption, for real, on local pools."""

from __future__ import annotations

import os
import re
import signal
import time
from typing import Any

import pytest

import gpugeek_jupyter
from gpugeek_jupyter.cost.guards import CostWatch, install_cost_hooks
from gpugeek_jupyter.cost.ledger import pool_cost
from gpugeek_jupyter.pools import PoolLifecyclePlugin
from gpugeek_jupyter.runtime import get_pool_manager
from gpugeek_jupyter.store import JobStatus, PoolStatus
from support.waiting import wait_for

pytestmark = pytest.mark.slow


def _burn_cpu(seconds: float) -> int:
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return n


class RecordNotices(PoolLifecyclePlugin):
    def __init__(self) -> None:
        self.notices: list[tuple[str, str]] = []

    def notice(self, manager: Any, pool: Any, kind: str, message: str) -> None:
        self.notices.append((kind, message))


def test_every_manager_gets_the_cost_watch_once():
    manager = get_pool_manager()
    watches = [p for p in manager.plugins.values() if isinstance(p, CostWatch)]
    assert len(watches) == 1
    again = install_cost_hooks(manager)
    assert [p for p in manager.plugins.values() if isinstance(p, CostWatch)] == [again]


def test_budget_warns_once_at_80_percent_then_checkpoints_and_stops_the_job_and_the_pool():
    manager = get_pool_manager()
    recorder = RecordNotices()
    notices = recorder.notices
    checkpoints: list[tuple[str, int]] = []
    manager.register_plugin(recorder, name="test-notices")

    class CheckpointFirst(PoolLifecyclePlugin):
        def before_stop(self, manager: Any, pool: Any, reason: str) -> None:
            # the workers are still there: a job could save its state now
            checkpoints.append((reason, pool.client.submit(sum, [40, 2], pure=False).result(timeout=10)))

    manager.register_plugin(CheckpointFirst(), name="test-checkpoint")
    # 2 workers at USD 720/h each: USD 0.40 a second, so 80 % of USD 1.20 comes after ~2.4 s
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="budget", price=720, budget=1.2)
    job = manager.registry.add_job("job-budget", pool.id, pool.name, "torchrun", "sha", ranks=2)

    wait_for(lambda: not pool.record.status.is_live, 30, "the budget stop")
    # the notice is posted by the housekeeping thread once the stop has returned: a moment after the status
    wait_for(lambda: any(k == "budget-stop" for k, _ in notices), 10, "the budget-stop notice")

    record = pool.record
    assert record.status is PoolStatus.STOPPED
    spent = re.fullmatch(r"pool 'budget' spent its budget \(USD ([\d.]+) of USD 1\.20\) and was stopped", record.reason)
    assert spent is not None and float(spent.group(1)) >= 1.20, record.reason
    kinds = [k for k, _ in notices]
    assert kinds == ["budget-warning", "budget-stop"]
    assert "of its USD 1.20 budget" in notices[0][1]
    events = [e["kind"] for e in manager.registry.events(pool.id)]
    assert events.count("budget-warning") == 1 and events.count("budget-stop") == 1
    assert events.index("budget-warning") < events.index("budget-stop")
    assert checkpoints == [(record.reason, 42)]
    ended = manager.registry.job(job.id)
    assert ended.status is JobStatus.CANCELLED and ended.failure_reason == record.reason
    assert pool_cost(manager.registry, pool.id).total_usd >= 1.2


def test_idle_pool_stops_itself_after_its_timeout_but_not_while_busy():
    manager = get_pool_manager()
    recorder = RecordNotices()
    notices = recorder.notices
    manager.register_plugin(recorder, name="test-notices")
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=1, name="idle", idle_timeout=0.05)  # 3 seconds

    burning = pool.client.submit(_burn_cpu, 6.0, pure=False)
    assert burning.result(timeout=60) > 0
    assert pool.record.status is PoolStatus.READY  # busy for twice the timeout: still up
    samples = manager.registry.utilization(pool.id)
    assert max(s.mean_util for s in samples) > 0.3  # the burning worker was seen busy

    wait_for(lambda: not pool.record.status.is_live, 30, "the idle shutdown")
    wait_for(lambda: notices, 10, "the idle-stop notice")  # posted just after the stop returns
    record = pool.record
    assert record.status is PoolStatus.STOPPED
    assert record.reason.startswith("pool 'idle' stopped itself: no job and CPU utilization under 5% for ")
    assert [k for k, _ in notices] == ["idle-stop"]
    assert [e["kind"] for e in manager.registry.events(pool.id)].count("idle-stop") == 1


def test_a_vanished_spot_worker_is_recorded_as_preempted_with_its_cost():
    manager = get_pool_manager()
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="spot", spot_fraction=0.5)  # worker 0 spot
    try:
        first = {w.worker_name: w for w in manager.registry.worker_intervals(pool.id)}
        assert (first["0"].pricing, first["1"].pricing) == ("spot", "on_demand")
        for interval in first.values():
            os.kill(interval.pid, signal.SIGKILL)  # our pool's worker processes; their nannies restart them

        def closed() -> dict[str, str] | None:
            reasons = {
                w.worker_name: w.stop_reason
                for w in manager.registry.worker_intervals(pool.id)
                if w.id in {i.id for i in first.values()} and w.stopped_at is not None
            }
            return reasons if len(reasons) == 2 else None

        assert wait_for(closed, 30, "closing both intervals") == {"0": "preempted", "1": "worker left"}
        wait_for(lambda: len(manager.registry.worker_intervals(pool.id)) == 4, 30, "the replacements joining")
        (preemption,) = pool_cost(manager.registry, pool.id).preemptions
        assert preemption.worker_name == "0" and preemption.hours > 0
        assert preemption.usd == pytest.approx(preemption.hours * pool.prices["spot"])
    finally:
        pool.stop()
