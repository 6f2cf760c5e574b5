"""Autoscaling a slurm pool against a real slurmctld: queued jobs' ranks submit Slurm jobs for new
workers, a running job's workers are kept, idle ones go after the cooldown and their Slurm jobs end."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm.one_host import OneHostSlurm
from support.autoscaling import grows_for_the_queue_and_shrinks_after_the_jobs
from support.waiting import poll

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

COOLDOWN = 4.0


def _jobs_of(slurm: OneHostSlurm, name: str) -> list[str]:
    return slurm.run("squeue", "-h", "-n", f"gpugeek-{name}", "-o", "%i").stdout.split()


def test_a_slurm_pool_grows_by_slurm_jobs_for_queued_jobs_and_cancels_them_after_the_cooldown(
    slurm: OneHostSlurm, tmp_path: Path
) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.pools.autoscale import AutoscalePolicy, autoscale

    pool = gpugeek_jupyter.launch(backend="slurm", gpu_type="cpu", count=1, name="elastic", walltime="00:20:00")
    try:
        first_job = _jobs_of(slurm, "elastic")
        assert len(first_job) == 1
        scaling = autoscale(
            pool,
            AutoscalePolicy(minimum=1, maximum=3, pending_threshold=1, step=2, idle_cooldown=COOLDOWN, interval=0.2),
        )
        grown: dict[str, list[str]] = {}
        timeline = grows_for_the_queue_and_shrinks_after_the_jobs(
            pool,
            scaling,
            tmp_path,
            COOLDOWN,
            scale_timeout=120,
            while_grown=lambda: grown.setdefault("jobs", _jobs_of(slurm, "elastic")),
        )
        print(f"\nslurm pool sizes: {timeline.describe()}")
        assert len(grown["jobs"]) == 3 and first_job[0] in grown["jobs"]  # one Slurm job per new worker
        # the retired workers' Slurm jobs end (squeue may list them a moment as COMPLETING)
        assert poll(lambda: len(_jobs_of(slurm, "elastic")) == 1, 30), _jobs_of(slurm, "elastic")
        scaling.stop()
    finally:
        pool.stop()
    assert slurm.wait_for_no_jobs(30) == []
