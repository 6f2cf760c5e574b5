"""A worker that runs other software than the notebook is named in one line: at launch, and before
the first job of a process that attached to the pool. The worker here is real: a dask worker run by
the system's Python (another patch release than the venv's) with a copy of distributed and without
torch, attached with ``--backend address``."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpugeek_jupyter.pools.scheduler_workers import connected_workers
from support.other_user import OtherUser
from support.processes import kill

pytestmark = pytest.mark.slow

SYSTEM_PYTHON = "/usr/bin/python3"
WORKER = """
    import asyncio, sys
    from distributed import Worker

    async def main():
        async with Worker(sys.argv[1], nthreads=1, dashboard=False) as worker:
            await worker.finished()

    asyncio.run(main())
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _system_python_version() -> str:
    return subprocess.run(
        [SYSTEM_PYTHON, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def scheduler_with_a_system_python_worker(readable_dask: OtherUser) -> Iterator[str]:
    """A dask scheduler of the venv's and one worker run by the system's Python; its address."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distributed.cli.dask_scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-dashboard",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": readable_dask.pythonpath, "PYTHONDONTWRITEBYTECODE": "1"}
    worker = None
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        worker = subprocess.Popen(
            [SYSTEM_PYTHON, "-s", "-c", textwrap.dedent(WORKER), address],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        yield address
    finally:
        kill([p.pid for p in (worker, scheduler) if p is not None])
        for process in (worker, scheduler):
            if process is not None:
                process.wait(timeout=10)


class Notices:
    name = "test-notices"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def notice(self, manager: Any, pool: Any, kind: str, message: str) -> None:
        self.seen.append((kind, message))


def test_a_worker_with_another_python_and_no_torch_is_named_at_launch(
    scheduler_with_a_system_python_worker: str,
) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.runtime import get_pool_manager

    if _system_python_version() == platform.python_version():
        pytest.skip(f"{SYSTEM_PYTHON} is the venv's Python release; nothing would differ but torch")
    notices = Notices()
    get_pool_manager().register_plugin(notices)  # type: ignore[arg-type]
    pool = gpugeek_jupyter.launch(
        backend="address", address=scheduler_with_a_system_python_worker, gpu_type="cpu", count=1, name="mixed"
    )
    try:
        lines = [message for kind, message in notices.seen if kind == "version-mismatch"]
        [worker] = connected_workers(pool.client)
        import torch

        assert lines == [
            f"pool 'mixed': worker {worker} runs python {_system_python_version()} (here {platform.python_version()}), "
            f"torch none (here {torch.__version__}); install the same versions there, or expect jobs to fail"
        ]
    finally:
        pool.stop()


ATTACH_AND_RUN = """
    import gpugeek_jupyter
    from gpugeek_jupyter.jobs import run_cell
    from gpugeek_jupyter.runtime import get_pool_manager

    class Notices:
        name = "test-notices"
        def notice(self, manager, pool, kind, message):
            print("NOTICE", kind, message, flush=True)

    manager = get_pool_manager()
    manager.register_plugin(Notices())
    pool = manager.attach("mixed")
    print("ATTACHED", flush=True)
    run_cell(pool, "1", {}, timeout=60)
"""


def test_a_process_that_attached_is_told_before_its_first_job(
    scheduler_with_a_system_python_worker: str,
) -> None:
    import gpugeek_jupyter

    pool = gpugeek_jupyter.launch(
        backend="address", address=scheduler_with_a_system_python_worker, gpu_type="cpu", count=1, name="mixed"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(ATTACH_AND_RUN)],
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ},
        )
        out = done.stdout.splitlines()
        assert "ATTACHED" in out, done.stderr[-2000:]
        notices = [line for line in out[out.index("ATTACHED") :] if line.startswith("NOTICE version-mismatch ")]
        assert len(notices) == 1 and "torch none" in notices[0], done.stdout + done.stderr[-2000:]
    finally:
        pool.stop()
