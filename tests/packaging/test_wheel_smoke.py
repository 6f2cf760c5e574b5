"""The wheel is the product: installed alone into a clean virtual environment, it must give a user
JupyterLab with the side panel enabled, the server extension enabled, and magics that launch a pool
and run a distributed cell in a real kernel.

The wheel is ``$GPUGEEK_WHEEL`` (``make test`` passes the one ``make dist`` built) or, when unset, one
built here from the working tree. torch is installed first from ``$TORCH_PIN`` (default the CPU wheel
``torch==2.13.0``), so that the wheel's ``torch>=2.1`` does not pull a CUDA build.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from dist_contents import wheel_problems

from support.kernel import CellResult
from support.processes import wait_until_gone

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
TORCH_PIN = os.environ.get("TORCH_PIN", "torch==2.13.0")
INSTALL_TIMEOUT_S = 420
COMMAND_TIMEOUT_S = 60
CELL_TIMEOUT_S = 120


@dataclass
class CleanVenv:
    """A virtual environment holding torch and the wheel (with its dependencies), nothing else."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / "venv" / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        return next((self.root / "venv" / "lib").glob("python3*/site-packages"))

    def env(self) -> dict[str, str]:
        """This process's environment without anything that points into the checkout or the dev venv;
        Jupyter's and IPython's per-user folders under the temporary root."""
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "JUPYTER", "VIRTUAL_ENV", "GPUGEEK_"))
        }
        bin_dir = str(self.python.parent)
        outside_dev_venv = [p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(REPO))]
        env.update(
            PATH=os.pathsep.join([bin_dir, *outside_dev_venv]),
            VIRTUAL_ENV=str(self.root / "venv"),
            HOME=str(self.root / "home"),
            JUPYTER_CONFIG_DIR=str(self.root / "home" / "jupyter-config"),
            JUPYTER_DATA_DIR=str(self.root / "home" / "jupyter-data"),
            JUPYTER_RUNTIME_DIR=str(self.root / "home" / "jupyter-runtime"),
            IPYTHONDIR=str(self.root / "home" / "ipython"),
            GPUGEEK_REGISTRY=str(self.root / "gpugeek.sqlite"),
            GPUGEEK_HEARTBEAT="0.5",
        )
        return env

    def run(self, *args: str, timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """Run a command from the temporary root; a bare name is the venv's (``jupyter``: ``venv/bin/jupyter``)."""
        command = [str(self.python.parent / args[0]) if os.sep not in args[0] else args[0], *args[1:]]
        return subprocess.run(
            command, cwd=self.root, env=self.env(), capture_output=True, text=True, timeout=timeout, check=False
        )


def _check(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"{' '.join(map(str, done.args))} failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("GPUGEEK_WHEEL")
    if given:
        path = Path(given).resolve()
        assert path.is_file(), f"GPUGEEK_WHEEL={given} is not a file (make dist builds one into dist/)"
        return path
    out = tmp_path_factory.mktemp("dist")
    _check(
        subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(REPO)],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
    )
    return next(out.glob("gpugeek_jupyter-*.whl"))


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CleanVenv]:
    clean = CleanVenv(tmp_path_factory.mktemp("wheel-smoke"))
    try:
        (clean.root / "home").mkdir()
        _check(clean.run(sys.executable, "-m", "venv", str(clean.root / "venv")))
        # --no-compile: byte-compiling torch's files would cost more than the rest; imports compile what they use
        pip_install = ("python", "-m", "pip", "install", "-q", "--no-compile")
        _check(clean.run(*pip_install, TORCH_PIN, timeout=INSTALL_TIMEOUT_S))
        _check(clean.run(*pip_install, str(wheel), TORCH_PIN, timeout=INSTALL_TIMEOUT_S))  # the pin keeps that torch
        yield clean
    finally:
        shutil.rmtree(clean.root, ignore_errors=True)  # ~1.6 GB with torch


def test_the_wheel_holds_the_built_labextension_and_the_server_config(wheel: Path) -> None:
    assert wheel_problems(wheel) == []


def test_import_loads_the_installed_wheel_without_jupyterlab_torch_or_dask(venv: CleanVenv) -> None:
    code = (
        "import sys, gpugeek_jupyter; print(gpugeek_jupyter.__file__); "
        "print([m for m in ('jupyterlab', 'jupyter_server', 'torch', 'dask') if m in sys.modules])"
    )
    where, imported = _check(venv.run("python", "-c", code)).stdout.splitlines()
    assert Path(where).is_relative_to(venv.site_packages), f"imported {where}, not the installed wheel"
    assert imported == "[]"


def test_jupyter_lists_the_labextension_enabled(venv: CleanVenv) -> None:
    listing = _check(venv.run("jupyter", "labextension", "list"))
    text = _plain(listing.stdout + listing.stderr)  # JupyterLab prints the listing on stderr, in colour
    assert "Traceback" not in text, text
    section = _section(text, str(venv.root / "venv" / "share" / "jupyter" / "labextensions"))
    assert re.search(r"^\s*gpugeek-jupyter v\S+ enabled\s+OK\s+\(python, gpugeek[-_]jupyter\)", section, re.M), text


def test_jupyter_lists_the_server_extension_enabled_and_valid(venv: CleanVenv) -> None:
    listing = _check(venv.run("jupyter", "server", "extension", "list"))
    text = _plain(listing.stdout + listing.stderr)  # jupyter_server prints the listing on stderr, in colour
    assert "Traceback" not in text, text
    section = _section(text, f"Config dir: {venv.root / 'venv' / 'etc' / 'jupyter'}")
    assert re.search(r"^\s*gpugeek_jupyter enabled\s*$", section, re.M), text
    assert re.search(r"^\s*gpugeek_jupyter \S+ OK\s*$", section, re.M), text


def test_a_kernel_of_the_venv_launches_a_pool_runs_a_distributed_cell_and_stops_it(venv: CleanVenv) -> None:
    kernel = WheelKernel(venv)
    try:
        loaded = kernel.run("%load_ext gpugeek_jupyter\nimport gpugeek_jupyter; print(gpugeek_jupyter.__file__)")
        assert loaded.error is None, loaded.text
        assert Path(loaded.stdout.strip()).is_relative_to(venv.site_packages), loaded.text

        launched = kernel.run("%gpugeek_launch --gpu-type cpu --count 2 --name smoke --quiet")
        assert launched.error is None and "UsageError" not in launched.text, launched.text
        pool_processes = [p.pid for p in kernel.process.children(recursive=True)]

        ran = kernel.run("%%gpugeek_run\nimport torch.distributed as dist\ndist.get_world_size()")
        assert ran.error is None, ran.text
        assert "[2, 2]" in ran.text, ran.text  # one value per rank: both ranks see a world of 2

        stopped = kernel.run("%gpugeek_stop smoke")
        assert stopped.error is None and "stopped pool 'smoke'" in stopped.stdout, stopped.text
        shown = [loaded, launched, ran, stopped]
    finally:
        log = kernel.shutdown()
    assert wait_until_gone(pool_processes, 30) == [], "processes of the kernel outlived it"
    for cell in shown:
        assert "Traceback" not in cell.text, cell.text
    assert "Traceback" not in log, log[-4000:]


class WheelKernel:
    """An ipykernel of the clean venv, started by jupyter_client from a kernelspec naming its python."""

    def __init__(self, venv: CleanVenv) -> None:
        from jupyter_client.kernelspec import KernelSpecManager
        from jupyter_client.manager import KernelManager

        spec_dir = venv.root / "kernels" / "wheel-smoke"
        spec_dir.mkdir(parents=True)
        argv = [str(venv.python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        (spec_dir / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "wheel smoke"}))
        self.log_path = venv.root / "kernel.log"
        self._log = self.log_path.open("w")
        specs = KernelSpecManager(kernel_dirs=[str(spec_dir.parent)])
        self.manager = KernelManager(kernel_name="wheel-smoke", kernel_spec_manager=specs)
        self.manager.start_kernel(env=venv.env(), cwd=str(venv.root), stdout=self._log, stderr=subprocess.STDOUT)
        self.process = psutil.Process(self.manager.provisioner.process.pid)  # type: ignore[union-attr]
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=COMMAND_TIMEOUT_S)

    def run(self, code: str, timeout: float = CELL_TIMEOUT_S) -> CellResult:
        msg_id = self.client.execute(code, allow_stdin=False, stop_on_error=False)
        result = CellResult()
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                msg = self.client.get_iopub_msg(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                setattr(result, content["name"], getattr(result, content["name"]) + content["text"])
            elif kind in ("display_data", "execute_result"):
                result.displays.append(content["data"])
            elif kind == "error":
                result.error = {k: content[k] for k in ("ename", "evalue", "traceback")}
            elif kind == "status" and content["execution_state"] == "idle":
                return result
        raise TimeoutError(f"{code!r} did not finish within {timeout} s; shown so far:\n{result.text}")

    def shutdown(self) -> str:
        """Shut the kernel down (its pools with it); returns what it wrote to stdout and stderr."""
        try:
            self.client.stop_channels()
            self.manager.shutdown_kernel(now=False)
        finally:
            self._log.close()
        return self.log_path.read_text(errors="replace")


def _plain(text: str) -> str:
    """``text`` without the ANSI colour codes of Jupyter's listings."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _section(listing: str, header: str) -> str:
    """The lines of a ``jupyter ... list`` output from ``header`` to the next unindented line."""
    lines = listing.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == header.strip()]
    assert starts, f"no section {header!r} in:\n{listing}"
    section = []
    for line in lines[starts[0] + 1 :]:
        if line and not line[0].isspace():
            break
        section.append(line)
    return "\n".join(section)
