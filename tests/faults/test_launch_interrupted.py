"""A launch interrupted at any instant after its registry row exists leaves nothing behind: the row
failed ("interrupted while starting", never ``starting``), the cluster it had started closed with
its worker processes, and the name free for the next launch at once.

Each test raises ``KeyboardInterrupt`` (what the notebook's interrupt raises) inside one step of a
real local launch, so that every instant between the row and ready is hit, not only those a timed
interrupt happens to land on."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpugeek_jupyter.pools import PoolManager
from gpugeek_jupyter.spec import PoolSpec
from gpugeek_jupyter.store import PoolStatus, Registry

pytestmark = pytest.mark.slow


@pytest.fixture
def manager(isolated_registry: Path) -> Iterator[PoolManager]:
    manager = PoolManager(registry=Registry(isolated_registry), owner="interrupted launch tests")
    yield manager
    manager.shutdown()


def _workers() -> set[int]:
    found = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if "multiprocessing.spawn" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                found.add(child.pid)
        except psutil.Error:
            continue
    return found


@pytest.mark.parametrize(
    "step",
    ["_ensure_threads", "_sync_workers", "_dispatch"],  # before the cluster starts, after it, before ready
)
def test_an_interrupt_inside_a_launch_leaves_the_row_failed_no_workers_and_the_name_free(
    manager: PoolManager, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    before = _workers()
    real = getattr(manager, step)

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(manager, step, real)  # once: the next launch runs normally
        raise KeyboardInterrupt

    monkeypatch.setattr(manager, step, interrupted)
    spec = PoolSpec.create(gpu_type="cpu", count=1, name="cut")
    with pytest.raises(KeyboardInterrupt):
        manager.launch(spec)
    record = manager.registry.latest_pool("cut")
    assert record.status is PoolStatus.FAILED and record.reason == "interrupted while starting", record
    deadline = time.monotonic() + 15
    while _workers() - before and time.monotonic() < deadline:  # a closed cluster's processes take a moment
        time.sleep(0.2)
    assert _workers() - before == set()
    pool = manager.launch(spec)  # the name is free at once
    try:
        assert manager.registry.latest_pool("cut").status is PoolStatus.READY
    finally:
        pool.stop()


def test_a_launch_runs_with_interrupts_kept_out_of_the_import_machinery(
    manager: PoolManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launch imports lazily while dask's and the warm-up's threads import: its interrupts go
    through :func:`~gpugeek_jupyter.interrupts.interrupts_outside_imports` (tests/faults/
    test_interrupts_inside_imports.py shows what that prevents), and only while it runs."""
    import signal

    from gpugeek_jupyter import interrupts

    seen: list[Any] = []
    real = manager._sync_workers

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append(signal.getsignal(signal.SIGINT))
        return real(*args, **kwargs)

    monkeypatch.setattr(manager, "_sync_workers", recording)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    pool = manager.launch(PoolSpec.create(gpu_type="cpu", count=1, name="guarded"))
    try:
        assert seen == [interrupts._interrupt_outside_imports]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        pool.stop()
