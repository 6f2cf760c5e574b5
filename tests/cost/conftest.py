"""Fixtures for cost tests: a controllable clock, a registry that reads it, pools made from specs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpugeek_jupyter.pricing import prices_in_force
from gpugeek_jupyter.spec import PoolSpec
from gpugeek_jupyter.store import PoolStatus, Registry

T0 = 1_790_000_000.0  # a fixed start time, 2026-09-21


class Clock:
    """Time that moves only when a test says so."""

    def __init__(self, start: float = T0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def at(self, seconds_after_start: float) -> Clock:
        self.now = T0 + seconds_after_start
        return self


@pytest.fixture(autouse=True)
def no_torch_warmup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Local pools start faster without importing torch in their workers."""
    monkeypatch.setenv("GPUGEEK_PRELOAD_TORCH", "0")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def clocked_registry(tmp_path: Path, clock: Clock) -> Iterator[Registry]:
    registry = Registry(tmp_path / "clocked.sqlite", clock=clock)
    yield registry
    registry.close()


def add_ready_pool(registry: Registry, name: str = "h100", **options: object) -> int:
    """Register a pool (no processes: the ledger only reads rows) and make it ready; returns its id."""
    spec = PoolSpec.create(backend="local", name=name, **options)  # type: ignore[arg-type]
    record = registry.add_pool(spec.name, spec.backend, spec.to_dict(), prices_in_force(spec), owner="test")
    registry.set_pool_status(record.id, PoolStatus.READY)
    return record.id
