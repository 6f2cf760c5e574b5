"""A pool attached by address to a dask cluster started elsewhere, whose workers lack this package."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _python_without_this_package(where: Path) -> str:
    """A virtualenv that sees this one's packages (torch, dask) but not gpugeek_jupyter.

    Its site-packages names ours in a ``.pth`` file; ``.pth`` files found there are not read, so
    the editable install of this package (itself a ``.pth``) is not seen.
    """
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120,
                   env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"})
    python = where / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return str(python)


@pytest.fixture
def foreign_cluster(tmp_path: Path) -> Iterator[str]:
    """``dask scheduler`` + two ``dask worker`` processes that cannot import gpugeek_jupyter."""
    python = _python_without_this_package(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["OMP_NUM_THREADS"] = "1"
    probe = subprocess.run([python, "-c", "import torch, distributed, gpugeek_jupyter"], cwd=tmp_path, env=env,
                           capture_output=True, text=True)
    assert "No module named 'gpugeek_jupyter'" in probe.stderr, probe.stderr
    address = f"tcp://127.0.0.1:{_free_port()}"
    dask = [python, "-m", "distributed.cli.dask_scheduler"]
    started = [subprocess.Popen([*dask, "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1],
                                 "--dashboard-address", ":0"], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    worker = [python, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1", "--host", "127.0.0.1"]
    started += [subprocess.Popen([*worker, "--name", str(n)], cwd=tmp_path, env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for n in range(2)]
    yield address
    for process in started:
        process.terminate()
    for process in started:
        process.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_cells_run_on_workers_that_lack_the_package(foreign_cluster: str) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.jobs import run_cell

    pool = gpugeek_jupyter.launch(backend="address", address=foreign_cluster, count=2, name="foreign")
    try:
        result = run_cell(pool, "import torch\nt = torch.ones(1)\ndist.all_reduce(t)\n(rank, t.item())", {})
        assert result.ok, result.report()
        assert result.values == [(0, 2.0), (1, 2.0)]
    finally:
        pool.stop()
