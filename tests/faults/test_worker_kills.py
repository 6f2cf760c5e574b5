"""Workers killed for real in the middle of collectives: clean failures, a pool that heals."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gpugeek_jupyter.jobs import run_cell

KILLS = 20
LOOP = "t = torch.ones(1)\nprint('looping', flush=True)\nwhile True:\n    dist.all_reduce(t)\n"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pool() -> Iterator[Any]:
    from gpugeek_jupyter import config
    from gpugeek_jupyter.pools import PoolManager
    from gpugeek_jupyter.spec import PoolSpec
    from gpugeek_jupyter.store import Registry

    config.set_config(None)
    import tempfile

    manager = PoolManager(registry=Registry(tempfile.mkdtemp() + "/faults.sqlite"), owner="fault tests")
    yield manager.launch(PoolSpec.create(gpu_type="cpu", count=2, name="faults"))
    manager.shutdown()


def _kill_rank_mid_all_reduce(pool: Any, rank: int) -> Any:
    import torch

    address = pool.worker_addresses()[rank]
    pid = next(iter(pool.client.run(os.getpid, workers=[address]).values()))
    looping = threading.Event()

    def on_output(output_rank: int, stream: str, text: str) -> None:
        if "looping" in text and output_rank == rank:
            looping.set()

    outcome: list[Any] = []
    runner = threading.Thread(
        target=lambda: outcome.append(run_cell(pool, LOOP, {"torch": torch}, on_output=on_output))
    )
    runner.start()
    if not looping.wait(30):
        runner.join(60)
        return None, pid
    os.kill(pid, signal.SIGKILL)
    runner.join(60)
    assert not runner.is_alive(), "the job hung after a rank's worker was killed"
    return outcome[0], pid


@pytest.mark.timeout(900)
def test_sigkill_of_a_worker_mid_all_reduce_fails_the_job_cleanly_every_time(pool: Any, scenario) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL a worker in the middle of an all_reduce, 20 times"""
    import torch

    failures = []
    for attempt in range(KILLS):
        rank = attempt % 2
        result, pid = _kill_rank_mid_all_reduce(pool, rank)
        if result is None:  # the job could not start: count it and stop here, keeping the test bounded
            scenario.record(survived=False)
            failures.append((attempt, "the job never reached its all_reduce loop", None))
            break
        named = (
            not result.ok
            and result.failed_rank == rank
            and f"rank {rank} (host" in result.failure
            and f"pid {pid}" in result.failure
        )
        healed = run_cell(
            pool, "t = torch.ones(1)\ndist.all_reduce(t)\nt.item()", {"torch": torch}
        )  # the very next cell
        survived = named and healed.ok and healed.values == [2.0, 2.0]
        scenario.record(survived=survived)
        if not survived:
            failures.append((attempt, result.failure, healed.failure))
            break
    assert failures == []
