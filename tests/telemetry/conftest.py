"""Fixtures for telemetry tests: FakeNvml in this process, rows made by the real sampler."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .fake_nvml import FakeNvml


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeNvml]:
    """Install a FakeNvml as ``pynvml`` in this process; call it with FakeNvml's options."""

    def install(**options: Any) -> FakeNvml:
        fake = FakeNvml(**options)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake

    return install


@pytest.fixture
def no_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    yield


class SimulatedWorkers:
    """Answers shaped like ``drain()`` from ``workers`` workers, each sampled by the real Sampler over
    a FakeNvml with ``gpus`` GPUs (or none, with ``library_missing``): input for a feed without a pool."""

    def __init__(self, workers: int, gpus: int = 2, **fake_options: Any) -> None:
        from gpugeek_jupyter.telemetry._worker import Sampler

        saved = sys.modules.get("pynvml")
        sys.modules["pynvml"] = FakeNvml(gpus=gpus, **fake_options)
        try:
            self.samplers = [Sampler() for _ in range(workers)]
            for sampler in self.samplers:
                sampler.open()
        finally:
            if saved is None:
                sys.modules.pop("pynvml", None)
            else:
                sys.modules["pynvml"] = saved
        self.seq = 0
        self.clock = 1_800_000_000.0

    def address(self, worker: int) -> str:
        return f"tcp://10.0.0.{worker}:40000"

    def answers(self, step: float = 1.0) -> dict[str, Any]:
        """One sample from every worker, ``step`` seconds after the previous one."""
        self.seq += 1
        self.clock += step
        return {
            self.address(w): {
                "name": str(w),
                "host": f"node-{w // 8}",
                "pid": 1000 + w,
                "token": f"token-{w}",
                "seq": self.seq,
                "lost": 0,
                "rows": [(self.clock, *row[1:]) for row in sampler.sample()],
                "period": step,
                "reason": sampler.reason,
            }
            for w, sampler in enumerate(self.samplers)
        }


@pytest.fixture
def simulated() -> Callable[..., SimulatedWorkers]:
    return SimulatedWorkers
