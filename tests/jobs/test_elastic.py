"""Elastic size (``min_ranks``): a job whose worker is gone for good restarts on the workers that remain."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpugeek_jupyter.errors import SpecError
from gpugeek_jupyter.jobs import run_cell
from gpugeek_jupyter.pools.scheduler_workers import connected_workers

pytestmark = pytest.mark.slow

# a checkpoint of its own: the step, written by rank 0 after every step; the job resumes from it
CELL = """\
import os, time
start = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
for step in range(start, 8):
    t = torch.ones(1)
    dist.all_reduce(t)
    if rank == 0:
        open(ckpt, "w").write(str(step + 1))
        print(f"step {step} on {world_size} ranks", flush=True)
    time.sleep(0.3)
(world_size, int(os.environ["TORCHELASTIC_RESTART_COUNT"]), start)
"""


@pytest.fixture
def pool4(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import gpugeek_jupyter

    monkeypatch.setenv("GPUGEEK_ELASTIC_WAIT", "3")
    from gpugeek_jupyter import config

    config.set_config(None)  # read GPUGEEK_ELASTIC_WAIT
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=4, name="elastic")
    yield pool
    pool.stop()
    config.set_config(None)


def test_a_job_whose_worker_is_gone_for_good_goes_on_with_the_workers_that_remain(pool4: Any, tmp_path: Path) -> None:
    import torch

    ckpt = tmp_path / "step"
    lines: list[str] = []
    results: list[Any] = []
    job = threading.Thread(
        target=lambda: results.append(
            run_cell(
                pool4,
                CELL,
                {"torch": torch, "ckpt": str(ckpt)},
                max_restarts=2,
                min_ranks=2,
                timeout=240,
                on_output=lambda r, s, t: lines.append(t),
            )
        ),
        daemon=True,
    )
    job.start()
    deadline = time.monotonic() + 120
    while not any("step 2 on 4 ranks" in line for line in lines):
        assert time.monotonic() < deadline and job.is_alive(), (lines, results)
        time.sleep(0.05)
    workers = sorted(connected_workers(pool4.client))
    pool4.client.retire_workers(workers=[workers[-1]], close_workers=True, remove=True)  # gone, not replaced
    job.join(240)
    assert results, lines
    result = results[0]
    assert result.ok, result.report()
    assert result.sizes == [4, 3], result.sizes
    world, restarts, start = result.values[0]
    assert world == 3 and restarts == 1 and start >= 3, result.values
    assert int(ckpt.read_text()) == 8
    record = pool4.registry.job(result.job_id)
    assert record.summary["sizes"] == [4, 3] and record.restarts == 1


def test_min_ranks_needs_restarts_and_a_whole_number(pool: Any) -> None:
    for options, words in (
        ({"min_ranks": 2}, "needs restarts"),
        ({"min_ranks": 0, "max_restarts": 1}, "got 0"),
        ({"min_ranks": "2", "max_restarts": 1}, "'2'"),
    ):
        with pytest.raises(SpecError) as error:
            run_cell(pool, "rank", {}, **options)
        assert "min_ranks" in str(error.value) and words in str(error.value), str(error.value)


def test_spot_workers_take_the_last_ranks_so_a_reclaim_takes_the_tail() -> None:
    import gpugeek_jupyter

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=4, name="mixed", spot_fraction=0.5)
    try:
        intervals = pool.registry.open_worker_intervals([pool.id])
        deadline = time.monotonic() + 30
        while len(intervals) < 4 and time.monotonic() < deadline:  # housekeeping opens them
            time.sleep(0.2)
            intervals = pool.registry.open_worker_intervals([pool.id])
        assert {w.worker_name: w.pricing for w in intervals} == {
            "0": "spot",
            "1": "spot",
            "2": "on_demand",
            "3": "on_demand",
        }, intervals
        by_pid = {w.pid: w for w in intervals}
        result = run_cell(pool, "import os\nos.getpid()", {})  # each rank runs in its worker's process
        assert result.ok, result.report()
        # rank 0 (MASTER_ADDR, the store) and the ranks an elastic job keeps are on workers that stay
        assert [by_pid[pid].pricing for pid in result.values] == ["on_demand", "on_demand", "spot", "spot"]
        assert [by_pid[pid].worker_name for pid in result.values] == ["2", "3", "0", "1"], result.values
    finally:
        pool.stop()
