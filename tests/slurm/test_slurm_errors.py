"""Errors a Slurm user meets: one line each, naming the value and the fix, before anything runs on."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from gpugeek_jupyter.errors import BackendUnavailableError, PoolStartError, SpecError, Surface
from slurm.one_host import FAKE_GPU_TYPE, OneHostSlurm


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    from gpugeek_jupyter.magics.pools import PoolMagics

    ip = InteractiveShell.instance()
    ip.register_magics(PoolMagics)
    yield ip


def _one_line_usage_error(shell: InteractiveShell, line: str) -> str:
    with pytest.raises(UsageError) as caught:
        shell.run_line_magic("gpugeek_launch", line)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_an_unknown_partition_is_named_with_the_partitions_there_are(
    slurm: OneHostSlurm, shell: InteractiveShell
) -> None:
    import gpugeek_jupyter

    message = _one_line_usage_error(shell, "--backend slurm --count 2 --partition gpu --quiet")
    assert message == (
        "--partition 'gpu': Slurm has no such partition (sbatch: invalid partition specified: gpu); "
        "choose one of debug, long (sinfo -s), e.g. --partition debug"
    )
    with pytest.raises(SpecError) as caught:
        gpugeek_jupyter.launch(backend="slurm", count=2, partition="gpu")
    assert str(caught.value).startswith("partition 'gpu': Slurm has no such partition")
    assert slurm.job_ids() == []  # refused by sbatch --test-only: nothing was queued
    assert gpugeek_jupyter.list_pools() == []  # nor registered


def test_a_walltime_over_the_partitions_limit_is_refused_naming_it(
    slurm: OneHostSlurm, shell: InteractiveShell
) -> None:
    message = _one_line_usage_error(shell, "--backend slurm --partition long --walltime 2:00:00 --quiet")
    assert message.startswith(
        "--walltime '2:00:00': Slurm refused the time limit (sbatch: allocation failure: Requested time limit "
        "is invalid (missing or exceeds some limit)); the partitions' limits are in sinfo -o '%P %l'"
    )
    assert message.endswith("e.g. --walltime 04:00:00")


def test_a_walltime_slurm_cannot_read_is_refused_before_anything_else(shell: InteractiveShell) -> None:
    message = _one_line_usage_error(shell, "--backend slurm --walltime 2h --quiet")
    assert message == (
        "--walltime '2h' is not a Slurm time limit (minutes, HH:MM:SS or D-HH:MM:SS; e.g. --walltime 04:00:00)"
    )


def test_slurm_options_with_another_backend_are_refused(shell: InteractiveShell) -> None:
    message = _one_line_usage_error(shell, "--partition gpu --quiet")
    assert message == "--partition 'gpu' only applies to --backend slurm (e.g. --backend slurm --partition gpu)"


def test_no_sbatch_on_path_says_where_to_launch_from(
    slurm: OneHostSlurm, shell: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    message = _one_line_usage_error(shell, "--backend slurm --count 2 --quiet")
    assert message.startswith(
        "--backend slurm needs Slurm's commands, and sbatch, squeue, scancel are not on PATH (PATH="
    )
    assert message.endswith(
        "); launch from a node where sbatch works (a login node), or load Slurm first (module load slurm)"
    )


def test_jobs_pending_past_the_start_timeout_say_slurms_reason_and_are_cancelled(
    slurm: OneHostSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter import config

    monkeypatch.setenv("GPUGEEK_WORKER_START_TIMEOUT", "15")
    monkeypatch.setenv("GPUGEEK_PRELOAD_TORCH", "0")  # the two workers that can start connect sooner
    config.set_config(config.GpugeekConfig(slurm_gres={"T4": FAKE_GPU_TYPE}))  # the node has 2 such GPUs
    started = time.monotonic()
    with pytest.raises(PoolStartError) as caught:
        gpugeek_jupyter.launch(backend="slurm", gpu_type="T4", count=3, name="pending")
    took = time.monotonic() - started
    message = caught.value.phrase(Surface.PYTHON)
    print(f"\n{message} ({took:.1f} s)")
    assert message.startswith(
        "pool 'pending': 2/3 workers connected within 15 s; 1 Slurm job still pending (Resources: "
    )
    assert message.endswith(
        "try again later, raise GPUGEEK_WORKER_START_TIMEOUT, or ask for fewer workers (count) or another partition"
    )
    assert slurm.wait_for_no_jobs(30) == []  # the launch cancelled what it had submitted
    assert gpugeek_jupyter.list_pools()[-1].status.value == "failed"


def test_an_account_slurm_refuses_is_named_with_how_to_list_yours() -> None:
    """sbatch's answer with accounting enforced (the one-host Slurm has no accounting database)."""
    from gpugeek_jupyter.pools.slurm import explain_sbatch_error
    from gpugeek_jupyter.spec import PoolSpec

    spec = PoolSpec.create(backend="slurm", account="proj0")
    error = explain_sbatch_error(
        "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
        spec,
    )
    assert isinstance(error, SpecError)
    assert error.phrase(Surface.MAGIC) == (
        "--account 'proj0': Slurm refused the account (sbatch: Batch job submission failed: Invalid account or "
        "account/partition combination specified); use one of yours (sacctmgr -n show associations "
        "user=$USER format=account,partition), e.g. --account proj42"
    )


def test_gres_no_node_has_names_the_gres_and_the_setting_that_maps_gpu_types(
    slurm: OneHostSlurm, shell: InteractiveShell
) -> None:
    message = _one_line_usage_error(shell, "--backend slurm --gpu-type A100-80GB --count 1 --quiet")
    assert message.startswith(
        "no node of partition '(default)' can take one worker's job (--gres=gpu:a100_80gb:1) (sbatch: "
    )
    assert "set GpugeekConfig.slurm_gres" in message


def test_without_dask_jobqueue_the_extra_to_install_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import distributed  # noqa: F401  (imported, so that only dask_jobqueue is missing)

    from gpugeek_jupyter.pools.slurm import SlurmBackend
    from gpugeek_jupyter.spec import PoolSpec

    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)
    with pytest.raises(BackendUnavailableError) as caught:
        SlurmBackend().preflight(PoolSpec.create(backend="slurm"))
    assert str(caught.value) == "backend='slurm' needs dask-jobqueue (pip install 'gpugeek-jupyter[slurm]')"


def test_loading_the_backend_leaves_ctrl_c_and_threads_alone() -> None:
    """dask-jobqueue 0.9.0 sets SIGINT to sys.exit() as it is imported, and fails off the main thread."""
    import subprocess
    import sys

    program = (
        "import signal, threading, distributed\n"
        "before = signal.getsignal(signal.SIGINT)\n"
        "from gpugeek_jupyter.pools.slurm.jobqueue import require_jobqueue\n"
        "thread = threading.Thread(target=require_jobqueue)\n"
        "thread.start(); thread.join()\n"
        "import dask_jobqueue\n"
        "assert signal.getsignal(signal.SIGINT) is before, signal.getsignal(signal.SIGINT)\n"
        "print('ok')\n"
    )
    answer = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert answer.stdout.strip() == "ok", answer.stderr


def test_a_submission_sbatch_refuses_after_its_test_is_one_line_and_leaves_nothing(
    slurm: OneHostSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sbatch --test-only can pass and the real submission still fail (a site's submit limits are
    checked then): the launch fails with sbatch's line, not with the closing cluster's complaint
    about the job it never started."""
    import os
    import shutil

    import gpugeek_jupyter

    real = shutil.which("sbatch")
    fake = tmp_path / "sbatch"  # a fake of sbatch: the real one for --test-only, a refusal otherwise
    fake.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --test-only) exec {real} "$@";; esac\n'
        "echo 'sbatch: error: Batch job submission failed: Job violates accounting/QOS policy' >&2\n"
        "exit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(BackendUnavailableError) as caught:
        gpugeek_jupyter.launch(backend="slurm", count=2, name="refused")
    message = caught.value.phrase(Surface.PYTHON)
    assert message.startswith(
        "sbatch refused the pool's job script (sbatch: Batch job submission failed: Job violates accounting/QOS policy)"
    ), message
    assert slurm.job_ids() == []
    assert gpugeek_jupyter.list_pools()[-1].status.value == "failed"
