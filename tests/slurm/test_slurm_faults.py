"""Slurm ending a pool's jobs: scancel mid-collective, a budget stop, a killed kernel."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from slurm.one_host import OneHostSlurm
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

LOOP = "t = torch.ones(1)\nprint('looping', flush=True)\nwhile True:\n    dist.all_reduce(t)\n"


def _events(pool: Any, kind: str) -> list[str]:
    return [e["message"] for e in pool.registry.events(pool.id) if e["kind"] == kind]


def test_scancel_of_a_worker_mid_all_reduce_fails_the_job_naming_the_rank_and_the_pool_replaces_the_worker(
    slurm: OneHostSlurm,
) -> None:
    import torch

    import gpugeek_jupyter
    from gpugeek_jupyter.jobs import run_cell

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, backend="slurm", name="cancel")
    try:
        jobs = pool.running.batch_jobs()
        victim_worker, victim_job = sorted(jobs.items())[1]
        ranks = run_cell(pool, "import os\nint(os.environ['RANK'])", {})
        looping = threading.Event()
        outcome: list[Any] = []

        def on_output(rank: int, stream: str, text: str) -> None:
            if "looping" in text:
                looping.set()

        runner = threading.Thread(
            target=lambda: outcome.append(run_cell(pool, LOOP, {"torch": torch}, on_output=on_output))
        )
        runner.start()
        assert looping.wait(60), "the job never reached its all_reduce loop"
        cancelled_at = time.monotonic()
        assert slurm.run("scancel", victim_job).returncode == 0
        runner.join(90)
        assert not runner.is_alive(), "the job hung after a rank's Slurm job was cancelled"
        failed_s = time.monotonic() - cancelled_at
        result = outcome[0]
        assert not result.ok
        print(f"\nfailure ({failed_s:.1f} s after scancel): {result.failure}")
        gone = wait_for(lambda: _events(pool, "worker-ended"), 30, "the pool reporting the worker gone")
        print(f"reported: {gone[0]}")
        assert (
            f"worker '{victim_worker}' is gone: its Slurm job {victim_job} ended (CANCELLED, cancelled: scancel, or an administrator)"
            in gone[0]
        )
        assert "replaced by Slurm job" in gone[0]
        healed_at = time.monotonic()
        healed = run_cell(pool, "t = torch.ones(1)\ndist.all_reduce(t)\nt.item()", {"torch": torch})
        assert healed.ok and healed.values == [2.0, 2.0], healed.failure
        print(f"healed: next cell ran on 2 ranks {time.monotonic() - healed_at:.1f} s after the report")
        print(f"ranks before: {ranks.values}")
    finally:
        pool.stop()


def test_a_budget_stop_cancels_every_slurm_job_of_the_pool(slurm: OneHostSlurm) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.store import PoolStatus

    # 2 workers at USD 3600 per hour each: USD 2 a second, so a USD 4 budget is spent within seconds
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, backend="slurm", name="budget", price=3600, budget=4)
    jobs = sorted(pool.running.batch_jobs().values())
    assert len(jobs) == 2 and sorted(slurm.job_ids()) == jobs
    record = wait_for(
        lambda: pool.registry.pool_by_id(pool.id) if not pool.registry.pool_by_id(pool.id).status.is_live else None,
        60,
        "the budget stopping the pool",
    )
    stopped_at = time.monotonic()
    assert record.status is PoolStatus.STOPPED
    assert "budget" in (record.reason or "")
    assert slurm.wait_for_no_jobs(30) == []
    print(f"\nbudget stop: {record.reason}; squeue empty {time.monotonic() - stopped_at:.1f} s after the stop")


def test_a_killed_kernel_leaves_no_slurm_job_running_and_its_pool_is_lost(slurm: OneHostSlurm) -> None:
    from gpugeek_jupyter.config import get_config
    from gpugeek_jupyter.store import PoolStatus, get_registry
    from support.kernel import KernelSession

    kernel = KernelSession()
    killed = False
    try:
        kernel.run("%load_ext gpugeek_jupyter")
        launched = kernel.run("%gpugeek_launch --backend slurm --count 2 --name killed --quiet", timeout=180)
        assert launched.error is None and "Error" not in launched.text, launched.text
        running = slurm.run("squeue", "-h", "-n", "gpugeek-killed", "-t", "running", "-o", "%i").stdout.split()
        assert len(running) == 2, running
        cell = kernel.run(
            "%%gpugeek_run --output all\nimport torch.distributed as dist\nprint('of', dist.get_world_size())"
        )
        assert cell.stdout.count("of 2") == 2, cell.text
        kernel.kill()
        killed = True
        killed_at = time.monotonic()
        left = slurm.wait_for_no_jobs(60)
        took = time.monotonic() - killed_at
        assert left == [], f"Slurm jobs {left} still there 60 s after the kernel was killed"
        registry = get_registry()
        registry.mark_lost_pools(get_config().lost_after_seconds)
        assert registry.latest_pool("killed").status is PoolStatus.LOST
        print(f"\nkernel SIGKILL: squeue empty after {took:.1f} s")
    finally:
        if not killed:
            kernel.shutdown()


def test_jobs_still_pending_when_the_kernel_is_killed_end_by_the_workers_death_timeout(slurm: OneHostSlurm) -> None:
    """Their workers start after the scheduler has gone: each gives up after worker_death_timeout."""
    from support.kernel import KernelSession

    kernel = KernelSession(env={"GPUGEEK_WORKER_DEATH_TIMEOUT": "15"})
    try:
        kernel.run("%load_ext gpugeek_jupyter")
        # both jobs pend for 10 s (BeginTime), so the launch is still waiting when the kernel dies
        kernel.execute("%gpugeek_launch --backend slurm --count 2 --name late --quiet --sbatch-directives begin=now+10")
        pending = wait_for(
            lambda: slurm.run("squeue", "-h", "-n", "gpugeek-late", "-t", "pending", "-o", "%i").stdout.split(),
            60,
            "the pool's two jobs pending",
        )
        wait_for(lambda: len(slurm.job_ids()) == 2, 30, "both jobs submitted")
    finally:
        kernel.kill()
    killed_at = time.monotonic()
    started = wait_for(
        lambda: slurm.run("squeue", "-h", "-n", "gpugeek-late", "-t", "running", "-o", "%i").stdout.split(),
        40,
        "the jobs starting after the kernel died",
    )
    started_s = time.monotonic() - killed_at
    left = slurm.wait_for_no_jobs(60)
    took = time.monotonic() - killed_at
    assert left == [], f"Slurm jobs {left} still there {took:.0f} s after the kernel was killed"
    print(f"\npending {pending}, running {started} {started_s:.1f} s after the kill; squeue empty after {took:.1f} s")


@pytest.mark.timeout(400)
def test_a_worker_whose_walltime_runs_out_is_reported_as_such(slurm: OneHostSlurm) -> None:
    import gpugeek_jupyter

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=1, backend="slurm", name="short", walltime=1)
    try:
        started = time.monotonic()
        gone = wait_for(lambda: _events(pool, "worker-ended"), 180, "the walltime ending the worker's job")
        print(f"\n{gone[0]} ({time.monotonic() - started:.0f} s after the launch)")
        assert "ended (TIMEOUT, its walltime ran out); replaced by Slurm job" in gone[0]
    finally:
        pool.stop()
