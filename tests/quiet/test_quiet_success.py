"""Success is quiet: a launch, a job and a stop that work print only what the user asked for.

dask logs its own routine (a worker restarted after a script, a comm closed at shutdown, a reaped
process) as warnings and tracebacks that read as failures; pools keep those libraries' logs at
``GpugeekConfig.log_level`` (ERROR unless configured), which the last test turns up.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.kernel import REPO, KernelSession

pytestmark = pytest.mark.slow

TRAIN = textwrap.dedent(
    """
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset

    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, num_workers=1)
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    if dist.get_rank() == 0:
        print("trained", flush=True)
    dist.destroy_process_group()
    """
)

# what would tell a user something went wrong
ALARMING = re.compile(r"Traceback|\bERROR\b|\bWARNING\b|\bError\b|[Ee]xception|stray process")


def _alarming_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if ALARMING.search(line)]


def _run_script(tmp_path: Path, program: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "main.py").write_text(textwrap.dedent(program))
    environ = dict(os.environ, GPUGEEK_REGISTRY=str(tmp_path / "registry.sqlite"), **env)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "main.py"],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )


LAUNCH_RUN_STOP = """
    from gpugeek_jupyter import ClusterClient

    job = ClusterClient().create_job(gpu_type="cpu", count=2)
    print("first", job.run(script_path="train.py").ok)
    print("second", job.run(script_path="train.py").ok)
    job.stop()
"""


def test_a_script_that_launches_runs_two_script_jobs_and_stops_prints_only_its_own_output(tmp_path: Path) -> None:
    done = _run_script(tmp_path, LAUNCH_RUN_STOP)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[rank 0] trained", "first True", "[rank 0] trained", "second True"]
    assert _alarming_lines(done.stdout + done.stderr) == [], done.stderr


def test_a_script_that_ends_without_stopping_its_pool_exits_quietly(tmp_path: Path) -> None:
    done = _run_script(
        tmp_path,
        """
        from gpugeek_jupyter import ClusterClient

        job = ClusterClient().create_job(gpu_type="cpu", count=2)
        print("ok", job.run(script_path="train.py").ok)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[rank 0] trained", "ok True"]
    assert _alarming_lines(done.stdout + done.stderr) == [], done.stderr


def test_a_shell_that_loaded_the_extension_and_exits_with_its_pool_up_exits_quietly(tmp_path: Path) -> None:
    """The extension made the pool manager before anything imported the pools' scratch folders:
    the folders must still go after the pools stop, not under their scheduler and workers (dask
    logged an ERROR for each of their folders it found gone)."""
    done = _run_script(
        tmp_path,
        """
        from IPython.core.interactiveshell import InteractiveShell

        import gpugeek_jupyter

        shell = InteractiveShell.instance()
        shell.run_cell("%load_ext gpugeek_jupyter", store_history=False)
        pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="left-up")
        print("up", len(pool.worker_addresses()))
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["up 2"]
    assert _alarming_lines(done.stdout + done.stderr) == [], done.stderr


def test_the_log_level_turns_dasks_own_account_back_on(tmp_path: Path) -> None:
    done = _run_script(tmp_path, LAUNCH_RUN_STOP, GPUGEEK_LOG_LEVEL="info")
    assert done.returncode == 0, done.stderr
    # the nannies' restarts of the workers after each script, as dask tells them
    assert "distributed.nanny" in done.stderr and "Restarting worker" in done.stderr, done.stderr


def test_a_notebook_that_launches_runs_a_cell_and_a_script_and_stops_shows_no_warning(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    session = KernelSession(env={"GPUGEEK_REGISTRY": str(tmp_path / "registry.sqlite")})
    try:
        cells = [
            f"import os; os.chdir({str(tmp_path)!r})\n%load_ext gpugeek_jupyter",
            "%gpugeek_launch --gpu-type cpu --count 2 --name quiet",
            "%%gpugeek_run\nimport torch\nt = torch.ones(1)\ndist.all_reduce(t)\nprint(t.item())",
            "%gpugeek_run --script-path train.py",
            "%gpugeek_stop quiet",
        ]
        results = [session.run(cell, timeout=180) for cell in cells]
    finally:
        session.shutdown()
    for cell, result in zip(cells, results):
        assert result.error is None, (cell, result.text)
        assert _alarming_lines(result.text) == [], (cell, result.text)
    assert "[rank 0] 2.0" in results[2].text and "[rank 1] 2.0" in results[2].text
    assert "[rank 0] trained" in results[3].text
