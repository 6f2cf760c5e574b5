"""A pool attached by address to a dask cluster started elsewhere, whose workers lack this package."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.net import free_port


def _python_without_this_package(where: Path) -> str:
    """A virtualenv that sees this one's packages (torch, dask) but not gpugeek_jupyter.

    Its site-packages names ours in a ``.pth`` file; ``.pth`` files found there are not read, so
    the editable install of this package (itself a ``.pth``) is not seen.
    """
    import sysconfig

    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(where)],
        check=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"},
    )
    python = where / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return str(python)


@pytest.fixture(params=["nanny"])
def foreign_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """``dask scheduler`` + two ``dask worker`` processes that cannot import gpugeek_jupyter
    (with nannies, or ``--no-nanny`` when the test asks so by parametrizing this fixture)."""
    python = _python_without_this_package(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["OMP_NUM_THREADS"] = "1"
    probe = subprocess.run(
        [python, "-c", "import torch, distributed, gpugeek_jupyter"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "No module named 'gpugeek_jupyter'" in probe.stderr, probe.stderr
    address = f"tcp://127.0.0.1:{free_port()}"
    dask = [python, "-m", "distributed.cli.dask_scheduler"]
    started = [
        subprocess.Popen(
            [*dask, "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1], "--dashboard-address", ":0"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    worker = [python, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1", "--host", "127.0.0.1"]
    if request.param == "no-nanny":
        worker.append("--no-nanny")
    started += [
        subprocess.Popen(
            [*worker, "--name", str(n)], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for n in range(2)
    ]
    yield address
    for process in started:
        process.terminate()
    for process in started:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a --no-nanny worker that ran a script can hang at exit
            process.kill()  # (freeing its gloo group); a nanny would have ended it
            process.wait(timeout=10)


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


SCRIPT = (
    "import os, torch.distributed as dist\ndist.init_process_group('gloo')\ndist.barrier()\nprint('pid', os.getpid())\n"
)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("foreign_cluster", ["nanny", "no-nanny"], indirect=True)
def test_scripts_get_fresh_workers_where_nannies_can_give_them(
    foreign_cluster: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.jobs import run_script

    script = tmp_path / "barrier.py"
    script.write_text(SCRIPT)
    pool = gpugeek_jupyter.launch(backend="address", address=foreign_cluster, count=2, name="foreign-scripts")
    try:
        runs = [run_script(pool, str(script)) for _ in range(2)]
        assert all(r.ok for r in runs), [r.report() for r in runs]
        printed = [
            sorted(int(line.split()[-1]) for text in r.output for line in text.splitlines() if "pid" in line)
            for r in runs
        ]
        assert [len(p) for p in printed] == [2, 2], printed
        if request.node.callspec.params["foreign_cluster"] == "no-nanny":
            assert printed[0] == printed[1]  # no nanny to restart them: the same processes serve on
        else:
            assert not set(printed[0]) & set(printed[1])  # as under torchrun: fresh processes per run
    finally:
        pool.stop()
