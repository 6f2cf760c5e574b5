"""Utilization rows come from the pool's telemetry: work, not the worker's own bookkeeping, and no
call to the workers of their own."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpugeek_jupyter import telemetry
from gpugeek_jupyter.cost.usage import UtilizationRecorder, host_send_rate, pool_utilization
from gpugeek_jupyter.store import Registry
from gpugeek_jupyter.telemetry import TelemetryFeed
from gpugeek_jupyter.telemetry._schema import columns_from_rows, concat_columns, sample_row

from .conftest import Clock, add_ready_pool

T = 1_800_000_000.0  # the workers' clock


# -- the figures, from rows built with the schema's helper -----------------------------------------
def _cpu(t: float, cpu: float, overhead: float = 0.0) -> tuple[Any, ...]:
    return sample_row(t, cpu_pct=cpu, overhead_cpu_pct=overhead, rss_bytes=1e8, no_gpu_reason="NVML library not found")


def _gpu(t: float, gpu: int, sm: float, cpu: float = 100.0) -> tuple[Any, ...]:
    return sample_row(t, gpu=gpu, gpu_uuid=f"GPU-{gpu}", sm_util_pct=sm, cpu_pct=cpu, overhead_cpu_pct=0.0)


def test_a_cpu_worker_is_busy_by_the_share_of_its_task_threads_doing_work() -> None:
    one = columns_from_rows([_cpu(T, 100.0, overhead=2.0), _cpu(T + 1, 100.0, overhead=2.0)], "tcp://a:1", "0", "a")
    two = columns_from_rows([_cpu(T, 100.0), _cpu(T + 1, 100.0)], "tcp://a:2", "1", "a")
    reading = pool_utilization(concat_columns([one, two]), use_gpu=False, nthreads={"tcp://a:1": 1, "tcp://a:2": 2})
    assert reading is not None and reading.devices == 2
    assert reading.mean == pytest.approx((0.98 + 0.5) / 2)


def test_the_workers_own_machinery_is_not_work() -> None:
    columns = columns_from_rows([_cpu(T + i, 30.0, overhead=30.0) for i in range(3)], "tcp://a:1", "0", "a")
    reading = pool_utilization(columns, use_gpu=False, nthreads={})
    assert reading is not None and reading.mean == 0.0


def test_children_past_the_worker_threads_cap_at_fully_busy() -> None:
    columns = columns_from_rows([_cpu(T, 400.0)], "tcp://a:1", "0", "a")  # four torchrun ranks on one thread
    assert pool_utilization(columns, use_gpu=False, nthreads={"tcp://a:1": 1}).mean == 1.0  # type: ignore[union-attr]


def test_a_gpu_pool_is_the_mean_sm_utilization_of_its_gpus_each_counted_once() -> None:
    # two workers on one host that both see both GPUs (no dask-cuda): GPU-0 at 80 %, GPU-1 at 20 %
    rows = [_gpu(T, 0, 80.0), _gpu(T, 1, 20.0), _gpu(T + 1, 0, 80.0), _gpu(T + 1, 1, 20.0)]
    columns = concat_columns([columns_from_rows(rows, f"tcp://h:{w}", str(w), "h") for w in (1, 2)])
    reading = pool_utilization(columns, use_gpu=True, nthreads={})
    assert reading is not None and (reading.devices, reading.mean) == (2, pytest.approx(0.5))


def test_a_gpu_pool_worker_whose_gpu_cannot_be_read_counts_by_its_cpu() -> None:
    gpu = columns_from_rows([_gpu(T, 0, 60.0)], "tcp://h:1", "0", "h")
    blind = columns_from_rows([_cpu(T, 100.0)], "tcp://h:2", "1", "h")
    reading = pool_utilization(concat_columns([gpu, blind]), use_gpu=True, nthreads={})
    assert reading is not None and (reading.devices, reading.mean) == (2, pytest.approx(0.8))


def test_a_cpu_pool_on_a_gpu_machine_reads_cpu_once_per_sample_not_per_gpu_row() -> None:
    rows = [_gpu(T, 0, 99.0, cpu=50.0), _gpu(T, 1, 99.0, cpu=50.0)]
    reading = pool_utilization(columns_from_rows(rows, "tcp://h:1", "0", "h"), use_gpu=False, nthreads={})
    assert reading is not None and (reading.devices, reading.mean) == (1, 0.5)


def test_rows_without_any_figure_give_no_reading() -> None:
    columns = columns_from_rows([sample_row(T, error="sampler failed: OSError")], "tcp://h:1", "0", "h")
    assert pool_utilization(columns, use_gpu=False, nthreads={}) is None


def test_network_is_each_hosts_send_rate_off_the_host_counted_once_per_host() -> None:
    workers = {
        "tcp://a:1": {"host": "a", "metrics": {"gpugeek_egress": {"write_bps": 1000.0}}},
        "tcp://a:2": {"host": "a", "metrics": {"gpugeek_egress": {"write_bps": 1200.0}}},
        "tcp://b:1": {"host": "b", "metrics": {"gpugeek_egress": {"write_bps": 500.0}}},
        "tcp://c:1": {"host": "c", "metrics": {}},  # no net counters on that host: nothing known
        # dask's host_net_io counts loopback: a worker with only that adds nothing
        "tcp://d:1": {"host": "d", "metrics": {"host_net_io": {"read_bps": 9e9, "write_bps": 9e9}}},
    }
    assert host_send_rate(workers) == pytest.approx(1100.0 + 500.0)


# -- the recorder, over a feed and a registry, without processes -----------------------------------
@dataclass
class FakeSpec:
    gpu_type: str = "cpu"
    idle_timeout: float | None = None


class NoRunClient:
    """A client whose ``run`` fails the test; ``sync`` answers the scheduler identity call."""

    def __init__(self) -> None:
        self.workers: dict[str, Any] = {}
        self.identity_calls = 0
        self.scheduler = self

    def identity(self, n_workers: int = 0) -> dict[str, Any]:
        return {"workers": self.workers}

    def sync(self, function: Any, **kwargs: Any) -> Any:
        assert function == self.identity and kwargs["callback_timeout"] > 0
        self.identity_calls += 1
        return function(n_workers=kwargs["n_workers"])

    def run(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the utilization recorder asked the workers itself")


@dataclass(eq=False)
class FakePool:
    id: int
    name: str = "sim"
    spec: FakeSpec = field(default_factory=FakeSpec)
    client: NoRunClient = field(default_factory=NoRunClient)


@dataclass
class FakeManager:
    registry: Registry

    def housekeeping_time_left(self) -> float:
        return 3.0


class Workers:
    """Answers shaped like ``drain()``, from rows the test gives."""

    def __init__(self) -> None:
        self.seq = 0

    def answers(self, rows_by_worker: dict[str, list[tuple[Any, ...]]], nthreads: int = 1) -> dict[str, Any]:
        self.seq += 1
        return {
            address: {
                "name": address[-1],
                "host": "h",
                "pid": 1,
                "nthreads": nthreads,
                "token": "t",
                "seq": self.seq,
                "lost": 0,
                "rows": rows,
                "period": 1.0,
                "reason": None,
            }
            for address, rows in rows_by_worker.items()
        }


@pytest.fixture
def fed_pool(clocked_registry: Registry, clock: Clock) -> Iterator[tuple[FakeManager, FakePool, TelemetryFeed]]:
    pool = FakePool(add_ready_pool(clocked_registry, "cpu", gpu_type="cpu", count=1))
    feed = TelemetryFeed(client=None, pool_name=pool.name, period=1.0)  # type: ignore[arg-type]
    telemetry._feeds[pool] = feed  # type: ignore[index]
    yield FakeManager(clocked_registry), pool, feed
    telemetry._feeds.pop(pool, None)  # type: ignore[call-overload]


def test_each_row_covers_the_samples_that_arrived_since_the_previous_one(fed_pool, clock: Clock) -> None:
    manager, pool, feed = fed_pool
    recorder, workers = UtilizationRecorder(), Workers()
    feed.ingest(workers.answers({"tcp://h:1": [_cpu(T, 100.0), _cpu(T + 1, 100.0)]}))
    recorder(manager, pool)
    clock.at(10)
    feed.ingest(workers.answers({"tcp://h:1": [_cpu(T + 2, 2.0, overhead=1.0)]}))
    recorder(manager, pool)
    assert [(s.mean_util, s.gpus) for s in manager.registry.utilization(pool.id)] == [
        (1.0, 1),
        (pytest.approx(0.01), 1),
    ]


def test_a_beat_without_new_samples_writes_nothing_and_the_next_row_covers_it(fed_pool, clock: Clock) -> None:
    manager, pool, feed = fed_pool
    recorder, workers = UtilizationRecorder(), Workers()
    feed.ingest(workers.answers({"tcp://h:1": [_cpu(T, 50.0)]}))
    recorder(manager, pool)
    pool.client.workers = {"tcp://h:1": {"host": "h", "metrics": {"gpugeek_egress": {"write_bps": 100.0}}}}
    clock.at(2)
    recorder(manager, pool)  # the feed has nothing new
    assert len(manager.registry.utilization(pool.id)) == 1
    clock.at(4)
    feed.ingest(workers.answers({"tcp://h:1": [_cpu(T + 1, 50.0), _cpu(T + 2, 70.0)]}))
    recorder(manager, pool)
    first, second = manager.registry.utilization(pool.id)
    assert (first.net_bytes, second.mean_util, second.net_bytes) == (0, pytest.approx(0.6), 400)  # 4 s at 100 B/s


def test_the_recorder_reads_the_workers_thread_count_from_the_feed(fed_pool) -> None:
    manager, pool, feed = fed_pool
    feed.ingest(Workers().answers({"tcp://h:1": [_cpu(T, 100.0)]}, nthreads=4))
    UtilizationRecorder()(manager, pool)
    assert manager.registry.utilization(pool.id)[0].mean_util == pytest.approx(0.25)


def test_without_telemetry_there_are_no_rows_and_the_log_says_why_once(
    clocked_registry: Registry, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("GPUGEEK_TELEMETRY_PERIOD", "0")
    from gpugeek_jupyter import config

    config.set_config(None)
    pool = FakePool(add_ready_pool(clocked_registry, "cpu", gpu_type="cpu", count=1), spec=FakeSpec(idle_timeout=10))
    recorder = UtilizationRecorder()
    with caplog.at_level(logging.INFO, logger="gpugeek_jupyter.cost.usage"):
        for _ in range(3):
            recorder(FakeManager(clocked_registry), pool)
    assert clocked_registry.utilization(pool.id) == []
    (said,) = [r for r in caplog.records if r.name == "gpugeek_jupyter.cost.usage"]
    assert said.levelno == logging.WARNING  # the pool has an idle timeout that now cannot fire
    assert "telemetry is off (telemetry_period_seconds=0)" in said.getMessage()
    assert "idle shutdown (10 min) cannot stop it" in said.getMessage()


def test_forget_starts_the_pool_over(fed_pool) -> None:
    manager, pool, feed = fed_pool
    recorder, workers = UtilizationRecorder(), Workers()
    feed.ingest(workers.answers({"tcp://h:1": [_cpu(T, 100.0)]}))
    recorder(manager, pool)
    recorder.forget(pool.id)
    recorder(manager, pool)  # from the start of the feed again: the same samples, one more row
    assert len(manager.registry.utilization(pool.id)) == 2


# -- for real: a pool, a cell, and nobody but telemetry asking the workers -------------------------
def _cost_module_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ``Client.run`` made from a module of the cost package, by module name."""
    from distributed import Client

    calls: list[str] = []
    original = Client.run

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.startswith("gpugeek_jupyter.cost"):
            calls.append(caller)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Client, "run", counting)
    return calls


def _rows_after(registry: Registry, pool_id: int, since: float, count: int, timeout: float) -> list[Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = [s for s in registry.utilization(pool_id) if s.at > since]
        if len(rows) >= count:
            return rows
        time.sleep(0.1)
    raise AssertionError(f"fewer than {count} utilization rows after {since} within {timeout} s")


@pytest.mark.slow
def test_a_busy_cell_reads_near_one_and_an_idle_pool_near_zero_with_no_call_from_the_cost_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.jobs import run_cell
    from gpugeek_jupyter.runtime import get_pool_manager

    calls = _cost_module_runs(monkeypatch)
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=1, name="usage")
    registry = get_pool_manager().registry
    try:
        assert run_cell(pool, "rank", {}).ok  # torch, the process group: warm-up, before we measure

        settled = registry.clock() + 1.5  # a row covers the samples since the previous one: let warm-up pass
        idle = _rows_after(registry, pool.id, settled, 3, 30)
        assert max(s.mean_util for s in idle) < 0.05, [s.mean_util for s in idle]

        began = registry.clock()
        burn = "import time\nend = time.monotonic() + 3.0\nn = 0\nwhile time.monotonic() < end:\n    n += 1\nn"
        assert run_cell(pool, burn, {}).ok  # runs on the worker's rank thread: work
        ended = registry.clock()
        _rows_after(registry, pool.id, ended + 1.5, 1, 30)  # the samples of the burn's end have come in
        busy = [s for s in registry.utilization(pool.id) if s.at > began]
        assert max(s.mean_util for s in busy) > 0.7, [(round(s.at - began, 1), s.mean_util) for s in busy]
        assert all(s.gpus == 1 for s in busy)
    finally:
        pool.stop()
    assert calls == []


@pytest.mark.slow
@pytest.mark.gpu
def test_a_gpu_pool_reads_the_sm_utilization_of_each_of_its_gpus() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here; the GPU load needs it")
    import gpugeek_jupyter
    from gpugeek_jupyter.catalog import load_catalog
    from gpugeek_jupyter.jobs import run_cell
    from gpugeek_jupyter.nvml import discover_gpus
    from gpugeek_jupyter.runtime import get_pool_manager

    found = discover_gpus().devices
    catalog = load_catalog()
    gpu_type = next(g.name for g in catalog.gpus.values() if not g.is_cpu and g.matches_nvml_name(found[0].name))
    pool = gpugeek_jupyter.launch(gpu_type=gpu_type, count=1, name="usage-gpu")  # dask-cuda: one worker, its GPU
    registry = get_pool_manager().registry
    try:
        began = registry.clock()
        cell = (
            "import time\nx = torch.randn(4096, 4096, device=device)\nend = time.monotonic() + 4.0\n"
            "while time.monotonic() < end:\n    x = (x @ x).clamp_(-1, 1)\ntorch.cuda.synchronize()\n0"
        )
        assert run_cell(pool, cell, {"torch": torch}).ok
        ended = registry.clock()
        _rows_after(registry, pool.id, ended + 1.5, 1, 30)
        rows = [s for s in registry.utilization(pool.id) if s.at > began]
        assert all(s.gpus == 1 for s in rows)  # the worker's own GPU, not every GPU of the machine
        assert max(s.mean_util for s in rows) > 0.5, [s.mean_util for s in rows]
    finally:
        pool.stop()
