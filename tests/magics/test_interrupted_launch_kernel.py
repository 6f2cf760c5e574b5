"""An interrupted ``%gpugeek_launch``, in a real kernel, leaves nothing behind at any instant: the
pool's row is never left ``starting`` (it is ``failed``, "interrupted while starting", or the pool is
ready), no worker process of it stays, and its name can be launched again at once."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from support.kernel import magics_kernel

pytestmark = pytest.mark.slow

LAUNCH = "%gpugeek_launch --gpu-type cpu --count 2 --name cut --quiet"


def _rows(registry: Path) -> list[str]:
    from gpugeek_jupyter.store import Registry

    store = Registry(registry)
    try:
        return [r.status.value for r in store.list_pools() if r.name == "cut"]
    finally:
        store.close()


def _is_worker(process: psutil.Process) -> bool:
    """A dask worker process (multiprocessing spawn), not the resource tracker that stays."""
    try:
        return process.is_running() and "multiprocessing.spawn" in " ".join(process.cmdline())
    except psutil.Error:
        return False


@pytest.mark.timeout(600)
def test_an_interrupt_at_any_instant_of_a_launch_leaves_no_pool_behind(tmp_path: Path) -> None:
    registry = tmp_path / "registry.sqlite"
    with magics_kernel({"GPUGEEK_REGISTRY": str(registry)}) as kernel:
        kernel.run("import gpugeek_jupyter.pools, distributed")  # imports apart: the launch's own instants
        for delay in (0.05, 0.15, 0.2, 0.25, 0.3, 0.35, 0.5, 0.8, 1.2):
            msg_id = kernel.execute(LAUNCH)
            time.sleep(delay)
            kernel.manager.interrupt_kernel()
            result = kernel.collect(msg_id, timeout=120)
            if result.error is not None and result.error["ename"] == "LaunchInterrupted":  # inside the launch
                assert result.error["traceback"] == [
                    "LaunchInterrupted: launch of pool 'cut' interrupted: nothing of it is left running and the "
                    "name is free (run the same %gpugeek_launch to start it)"
                ], result.error
            elif result.error is not None:  # before the launch began (the registry's checks)
                assert result.error["ename"] == "KeyboardInterrupt", result.error
            statuses = _rows(registry)
            assert "starting" not in statuses, (delay, statuses)
            if statuses and statuses[-1] == "ready":  # the launch had finished: stop it for the next try
                stopped = kernel.run("%gpugeek_stop cut", timeout=60)
                assert stopped.error is None, stopped.text
            workers = [p for p in psutil.Process(kernel.pid).children(recursive=True) if _is_worker(p)]
            deadline = time.monotonic() + 10
            while workers and time.monotonic() < deadline:  # a closed cluster's processes take a moment
                time.sleep(0.2)
                workers = [p for p in workers if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
            assert workers == [], (delay, [p.cmdline()[-3:] for p in workers])
        relaunched = kernel.run(LAUNCH, timeout=120)  # the name is free at once
        assert relaunched.error is None, relaunched.text
        assert _rows(registry)[-1] == "ready"
        kernel.run("%gpugeek_stop cut", timeout=60)
