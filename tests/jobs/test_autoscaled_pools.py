"""Autoscaling a real local cpu pool by its job queue: queued jobs' ranks are pending work, a running
job's workers are busy, idle workers go after the cooldown; ``%gpugeek_pools --detail`` shows it.

Real pools and real jobs (threads of this process, as notebooks send them); nothing of dask is mocked.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.autoscaling import SizeSampler, Timeline, grows_for_the_queue_and_shrinks_after_the_jobs
from support.pools import attached_pool
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

COOLDOWN = 3.0


def policy(minimum: int = 1) -> Any:
    from gpugeek_jupyter.pools.autoscale import AutoscalePolicy

    return AutoscalePolicy(
        minimum=minimum, maximum=3, pending_threshold=1, step=2, idle_cooldown=COOLDOWN, interval=0.2
    )


@pytest.fixture
def one_worker_pool() -> Iterator[Any]:
    import gpugeek_jupyter

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=1, name="elastic")
    yield pool
    if pool.status.is_live:
        pool.stop()


def pools_detail() -> Any:
    from IPython.core.interactiveshell import InteractiveShell

    from gpugeek_jupyter.magics.pools import PoolMagics

    shell = InteractiveShell.instance()
    shell.register_magics(PoolMagics)
    return shell.run_line_magic("gpugeek_pools", "--live --detail")


def test_a_local_pool_grows_for_queued_jobs_keeps_a_running_jobs_workers_and_shrinks_after_the_cooldown(
    one_worker_pool: Any, tmp_path: Path
) -> None:
    from gpugeek_jupyter.pools.autoscale import autoscale
    from gpugeek_jupyter.store import get_registry

    pool = one_worker_pool
    other = get_registry().add_pool("fixed", "local", {"gpu_type": "cpu", "count": 1}, {}, owner="kernel 1")
    scaling = autoscale(pool, policy())
    shown: dict[str, Any] = {}

    def look_at_the_table() -> None:
        table = pools_detail().set_index("name")
        shown.update(table.loc["elastic", ["autoscale", "pending", "decision"]].to_dict())
        shown["fixed"] = table.loc["fixed", ["autoscale", "pending", "decision"]].tolist()

    assert other.id != pool.id
    timeline = grows_for_the_queue_and_shrinks_after_the_jobs(
        pool, scaling, tmp_path, COOLDOWN, scale_timeout=60, while_grown=look_at_the_table
    )
    print(f"local pool sizes: {timeline.describe()}")
    assert shown["autoscale"] == "> 1 pending adds 2, min 1, max 3, idle 3 s"
    assert shown["pending"] == "2 pending: 2 ranks of queued jobs"
    assert shown["decision"].startswith("3 workers, ")  # the check after the scale-up says why it holds
    assert "; last change 1 -> 3 (2 pending: 2 ranks of queued jobs) " in shown["decision"]
    assert shown["fixed"] == ["", "", ""]  # a pool without autoscaling shows nothing more
    scaling.stop()


def test_a_pool_scaled_to_zero_grows_back_for_the_job_that_runs_on_it(one_worker_pool: Any) -> None:
    from gpugeek_jupyter.jobs import run_cell
    from gpugeek_jupyter.pools.autoscale import autoscale

    pool = one_worker_pool
    timeline = Timeline()
    sampler = SizeSampler(pool, timeline)
    sampler.sample()
    sampler.start()
    scaling = autoscale(pool, policy(minimum=0))
    try:
        wait_for(lambda: sampler.size() == 0, COOLDOWN + 30, "the idle pool shrinking to 0 workers")
        timeline.mark("0 workers")
        result = run_cell(pool, 'import os\nint(os.environ["WORLD_SIZE"])', {}, timeout=120)
        timeline.mark("the job ended")
    finally:
        sampler.stop()
    print(f"scale-to-zero pool sizes: {timeline.describe()}")
    assert result.ok, result.failure
    assert result.values == [1]
    assert [n for _, n in timeline.sizes][:3] == [1, 0, 1], timeline.describe()
    _, before, change = scaling.adaptives[0].last_change
    assert (before, change.target, change.reason) == (0, 1, "a running job waits for 1 worker")
    scaling.stop()


def test_autoscaling_stops_with_its_pool(one_worker_pool: Any) -> None:
    from gpugeek_jupyter.pools.autoscale import autoscale, autoscaling_of

    scaling = autoscale(one_worker_pool, policy())
    assert autoscaling_of(one_worker_pool, one_worker_pool.registry.path) is scaling
    one_worker_pool.stop()
    assert not scaling.active
    assert autoscaling_of(one_worker_pool, one_worker_pool.registry.path) is None


def test_a_scheduler_someone_else_runs_is_not_autoscaled(cpu_pool: Any) -> None:
    from gpugeek_jupyter.errors import GpugeekError
    from gpugeek_jupyter.pools.autoscale import autoscale

    with attached_pool(cpu_pool, "theirs") as attached:
        with pytest.raises(GpugeekError, match=r"--backend address: a scheduler someone else runs"):
            autoscale(attached, policy())
