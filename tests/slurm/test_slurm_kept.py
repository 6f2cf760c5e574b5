"""A kept Slurm pool (``--keep``): its scheduler runs in the user's agent, so the pool and its Slurm
jobs survive the kernel that launched it, and another kernel uses it; with the real one-host Slurm."""

from __future__ import annotations

import time

import pytest

from slurm.one_host import OneHostSlurm
from support.agent import agent_stopped_afterwards
from support.kernel import KernelSession, magics_kernel

pytestmark = pytest.mark.slow


def test_a_kept_slurm_pool_survives_its_killed_kernel_and_serves_another(
    slurm: OneHostSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUGEEK_AGENT_IDLE", "60")
    with agent_stopped_afterwards():
        first = KernelSession()
        first.run("%load_ext gpugeek_jupyter")
        launched = first.run("%gpugeek_launch --backend slurm --count 2 --name keptslurm --keep --quiet", timeout=180)
        assert launched.error is None and "Error" not in launched.text, launched.text
        jobs = slurm.run("squeue", "-h", "-n", "gpugeek-keptslurm", "-t", "running", "-o", "%i").stdout.split()
        assert len(jobs) == 2, jobs
        first.kill()
        time.sleep(5.0)  # a kernel-owned pool's jobs are gone by now (test_slurm_faults)
        still = slurm.run("squeue", "-h", "-n", "gpugeek-keptslurm", "-t", "running", "-o", "%i").stdout.split()
        assert sorted(still) == sorted(jobs), f"the kept pool's Slurm jobs changed after its kernel died: {still}"

        with magics_kernel() as second:
            used = second.run("%gpugeek_use keptslurm")
            assert used.error is None, used.text
            cell = second.run(
                "%%gpugeek_run --output all\nimport torch.distributed as dist\nprint('of', dist.get_world_size())"
            )
            assert cell.error is None and cell.stdout.count("of 2") == 2, cell.text
            stopped = second.run("%gpugeek_stop keptslurm", timeout=120)
            assert stopped.error is None, stopped.text
        assert slurm.wait_for_no_jobs(60) == []
