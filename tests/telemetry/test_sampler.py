"""The worker-side sampler, run in this process over FakeNvml (the real sampler code, a fake library),
and the split of its CPU figure into work and the worker's own machinery."""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
import types
from collections.abc import Callable

import pytest

from gpugeek_jupyter.telemetry import TelemetryFeed
from gpugeek_jupyter.telemetry._egress import EGRESS_METRIC
from gpugeek_jupyter.telemetry._process import ProcessReader, ProcessReading
from gpugeek_jupyter.telemetry._schema import NO_GPU, SAMPLE_FIELDS
from gpugeek_jupyter.telemetry._worker import (
    PLUGIN_NAME,
    SAMPLER_THREAD,
    Sampler,
    TelemetryPlugin,
    drain,
    machinery_threads,
)

GIB = 2**30

pytestmark = pytest.mark.usefixtures("no_cuda_visible_devices")


def _rows(sampler: Sampler) -> list[dict[str, object]]:
    return [dict(zip(SAMPLE_FIELDS, row, strict=True)) for row in sampler.sample()]


def test_one_row_per_gpu_with_every_dmon_field_and_the_process_gpu_memory(fake_nvml) -> None:
    fake_nvml(gpus=2)
    sampler = Sampler()
    sampler.open()
    first = _rows(sampler)
    second = _rows(sampler)

    assert [r["gpu"] for r in second] == [0, 1]
    row = second[1]
    assert row["gpu_name"] == "NVIDIA H100 80GB HBM3" and str(row["gpu_uuid"]).startswith("GPU-")
    assert 0 <= row["sm_util_pct"] <= 100 and 0 <= row["mem_util_pct"] <= 100
    assert row["mem_used_bytes"] == 2 * GIB and row["mem_total_bytes"] == 80 * GIB
    assert row["power_w"] == pytest.approx(151.0) and row["temperature_c"] == 41 and row["sm_clock_mhz"] == 1980
    assert row["process_gpu_mem_bytes"] == 512 * 2**20  # the fake reports this process as a GPU user
    assert row["cpu_pct"] >= 0 and row["rss_bytes"] > 0
    assert row["no_gpu_reason"] is None and row["error"] is None
    # counters become rates from the second sample on
    assert math.isnan(first[0]["nvlink_rx_mb_s"])
    for field in ("pcie_rx_mb_s", "pcie_tx_mb_s", "nvlink_rx_mb_s", "nvlink_tx_mb_s"):
        assert row[field] > 0, field


def test_nvlink_is_nan_where_the_device_has_none_and_the_rest_is_read(fake_nvml) -> None:
    fake_nvml(gpus=1, nvlink=False)
    sampler = Sampler()
    sampler.open()
    _rows(sampler)
    row = _rows(sampler)[0]
    assert math.isnan(row["nvlink_rx_mb_s"]) and math.isnan(row["nvlink_tx_mb_s"])
    assert row["pcie_rx_mb_s"] > 0 and row["error"] is None


def test_missing_nvml_library_gives_a_cpu_row_that_says_why(fake_nvml, caplog: pytest.LogCaptureFixture) -> None:
    fake_nvml(library_missing=True)
    sampler = Sampler()
    with caplog.at_level(logging.DEBUG):
        sampler.open()
        rows = _rows(sampler)
    assert len(rows) == 1
    row = rows[0]
    assert row["gpu"] == NO_GPU and math.isnan(row["sm_util_pct"])
    assert "NVML library not found" in str(row["no_gpu_reason"])
    assert row["cpu_pct"] >= 0 and row["rss_bytes"] > 0 and row["error"] is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_nvidia_ml_py_not_installed_is_a_reason_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes ``import pynvml`` fail
    sampler = Sampler()
    sampler.open()
    assert "nvidia-ml-py is not installed" in str(_rows(sampler)[0]["no_gpu_reason"])


def test_a_device_failing_mid_run_is_reported_in_the_row_and_sampling_goes_on(
    fake_nvml, caplog: pytest.LogCaptureFixture
) -> None:
    fake_nvml(gpus=2, fail_after=2)
    sampler = Sampler()
    sampler.open()
    with caplog.at_level(logging.DEBUG):
        before = _rows(sampler)
        after = [_rows(sampler) for _ in range(3)]
    assert all(r["error"] is None for r in before)
    for rows in after:
        assert len(rows) == 2
        assert all("GPU is lost" in str(r["error"]) for r in rows)
        assert all(math.isnan(r["sm_util_pct"]) and r["mem_used_bytes"] > 0 for r in rows)  # the rest still read
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len([r for r in caplog.records if "GPU is lost" in r.getMessage()]) <= 2  # once per GPU, not per sample


def test_cuda_visible_devices_limits_the_gpus_sampled(fake_nvml, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(gpus=4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    visible = Sampler("visible")
    visible.open()
    assert [r["gpu"] for r in _rows(visible)] == [2, 0]
    first = Sampler("first")  # dask-cuda: the worker's own GPU is listed first
    first.open()
    assert [r["gpu"] for r in _rows(first)] == [2]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-fa4e0000-0000-0000-0000-000000000003")
    by_uuid = Sampler()
    by_uuid.open()
    assert [r["gpu"] for r in _rows(by_uuid)] == [3]


def test_an_empty_cuda_visible_devices_means_no_gpu_and_says_so(fake_nvml, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(gpus=2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    sampler = Sampler()
    sampler.open()
    row = _rows(sampler)[0]
    assert row["gpu"] == NO_GPU and "CUDA_VISIBLE_DEVICES" in str(row["no_gpu_reason"])


def test_an_unexpected_exception_becomes_an_error_row_not_a_crash(fake_nvml, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(gpus=1)
    sampler = Sampler()
    sampler.open()

    def broken() -> tuple[float, float]:
        raise RuntimeError("psutil exploded")

    monkeypatch.setattr(sampler.process, "read", broken)
    rows = _rows(sampler)
    assert len(rows) == 1 and "RuntimeError: psutil exploded" in str(rows[0]["error"])


def test_the_worker_process_and_its_children_count_for_cpu_and_gpu_memory(fake_nvml) -> None:
    import subprocess

    fake_nvml(gpus=1)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sampler = Sampler()
        sampler.open()
        _rows(sampler)
        assert child.pid in sampler.process.pids() and os.getpid() in sampler.process.pids()
    finally:
        child.kill()
        child.wait()


def test_drain_returns_only_unseen_samples_and_counts_lost_ones() -> None:
    plugin = TelemetryPlugin(period=1.0, keep=3)
    for i in range(5):
        plugin.add([(float(i),)])
    last, lost, rows = plugin.drain(None)
    assert last == 5 and lost == 0 and rows == [(2.0,), (3.0,), (4.0,)]  # only 3 kept
    assert plugin.drain(5) == (5, 0, [])
    plugin.add([(5.0,)])
    assert plugin.drain(4) == (6, 0, [(4.0,), (5.0,)])
    assert plugin.drain(1)[1] == 2  # samples 2 and 3 were dropped before this collector saw them


def test_the_plugin_ships_only_its_settings_and_restarts_clean() -> None:
    import pickle

    plugin = TelemetryPlugin(period=0.5, keep=10, gpus="first")
    plugin.add([(1.0,)])
    copy = pickle.loads(pickle.dumps(plugin))
    assert (copy.period, copy.keep, copy.gpus) == (0.5, 10, "first")
    assert copy.drain(None) == (0, 0, []) and copy.token != plugin.token


def test_a_non_positive_period_is_refused_with_an_example() -> None:
    with pytest.raises(ValueError, match=r"got 0 \(e\.g\. 1\.0\)"):
        TelemetryPlugin(period=0)


# -- work and machinery: what the cost's utilization reads ---------------------------------------
def _burning(name: str) -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()

    def burn() -> None:
        while not stop.is_set():
            pass

    thread = threading.Thread(target=burn, name=name, daemon=True)
    thread.start()
    return thread, stop


def _read_while_burning(name: str, machinery: Callable[[threading.Thread], set[int]]) -> ProcessReading:
    """A reading over 0.5 s while a thread called ``name`` burns a core; ``machinery`` picks the overhead threads."""
    thread, stop = _burning(name)
    try:
        reader = ProcessReader(overhead_threads=lambda: machinery(thread))  # the baseline, with the thread running
        stop.wait(0.5)
        return reader.read()
    finally:
        stop.set()
        thread.join()


def test_a_thread_doing_work_counts_in_cpu_and_not_in_overhead() -> None:
    reading = _read_while_burning("Dask-Default-Threads-1", lambda thread: set())
    assert reading.cpu_pct > 20 and reading.overhead_cpu_pct < 5


def test_the_workers_machinery_threads_count_as_overhead() -> None:
    reading = _read_while_burning("Profile", lambda thread: machinery_threads(loop_thread=None))
    assert reading.overhead_cpu_pct > 20
    assert reading.cpu_pct - reading.overhead_cpu_pct < 10  # what is left is not work


def test_the_event_loop_thread_counts_as_overhead() -> None:
    reading = _read_while_burning("event-loop", lambda thread: machinery_threads(loop_thread=thread.ident))
    assert reading.overhead_cpu_pct > 20 and reading.cpu_pct - reading.overhead_cpu_pct < 10


def test_work_by_a_thread_that_ended_between_reads_still_counts() -> None:
    reader = ProcessReader(overhead_threads=lambda: machinery_threads(loop_thread=None))
    thread = threading.Thread(target=lambda: sum(i * i for i in range(3_000_000)), name="task")
    thread.start()
    thread.join()
    reading = reader.read()
    assert reading.cpu_pct - reading.overhead_cpu_pct > 20


def test_machinery_is_the_loop_thread_the_profiler_and_the_sampler_not_the_rank_thread() -> None:
    names = ("Profile", SAMPLER_THREAD, "gpugeek-rank", "Dask-Default-Threads-1")
    started = [_burning(name) for name in names]
    try:
        ids = machinery_threads(loop_thread=12345)
        by_name = {thread.name: thread.ident for thread, _ in started}
        assert {by_name["Profile"], by_name[SAMPLER_THREAD], 12345} <= ids
        assert by_name["gpugeek-rank"] not in ids and by_name["Dask-Default-Threads-1"] not in ids
    finally:
        for thread, stop in started:
            stop.set()
            thread.join()


def test_without_machinery_threads_the_overhead_is_zero(fake_nvml) -> None:
    fake_nvml(library_missing=True)
    sampler = Sampler()
    sampler.open()
    assert _rows(sampler)[0]["overhead_cpu_pct"] == 0.0


def test_the_plugin_samples_at_once_and_reports_its_worker_loop_as_overhead(
    fake_nvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugeek_jupyter import devices

    fake_nvml(library_missing=True)
    monkeypatch.setattr(devices, "_initial", None)  # setup reads this process's CUDA_VISIBLE_DEVICES afresh
    plugin = TelemetryPlugin(period=0.3)
    stop, set_up = threading.Event(), threading.Event()

    worker = types.SimpleNamespace(metrics={})  # a stand-in for dask's Worker: setup adds the egress metric

    def event_loop() -> None:  # dask calls setup on the loop thread, which then keeps busy with its own affairs
        plugin.setup(worker=worker)
        set_up.set()
        while not stop.is_set():
            pass

    thread = threading.Thread(target=event_loop, name="event-loop", daemon=True)
    thread.start()
    try:
        assert set_up.wait(10) and plugin.loop_thread == thread.ident
        deadline = time.monotonic() + 10
        while len(plugin.drain(None)[2]) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        rows = [dict(zip(SAMPLE_FIELDS, row, strict=True)) for row in plugin.drain(None)[2]]
        assert len(rows) >= 3 and all(r["cpu_pct"] >= 0 for r in rows)
        assert EGRESS_METRIC in worker.metrics
        # from the first sample on, taken at once, the burning "loop" is overhead and nothing is work.
        # Each row compares two CPU readings a moment apart, so a loaded machine can shift a few
        # points between them: judged over the samples together, not one by one.
        later = rows[1:]
        overhead = sum(r["overhead_cpu_pct"] for r in later)
        work = sum(r["cpu_pct"] - r["overhead_cpu_pct"] for r in later)
        assert overhead > 25 * len(later) and work < 0.25 * overhead, rows
    finally:
        plugin.teardown(worker=None)
        stop.set()
        thread.join()


def test_the_first_sample_is_not_inflated_by_its_short_interval() -> None:
    readings = [ProcessReader(overhead_threads=lambda: machinery_threads(loop_thread=None)).read() for _ in range(20)]
    # psutil's ticks over a first, short interval read as thousands of percent; a process busy on
    # every core of a loaded machine reads up to 100% a core (155% was measured here on 2 cores); this
    # test's process never keeps ten cores busy, so a machine with many still sees the inflation fail
    ceiling = min(110 * (os.cpu_count() or 1), 1000)
    assert max(r.cpu_pct - r.overhead_cpu_pct for r in readings) < ceiling


def test_drain_says_how_many_task_threads_the_worker_has_and_the_feed_keeps_it() -> None:
    class Worker:
        name, address, nthreads = "0", "tcp://10.0.0.1:1", 4
        plugins = {PLUGIN_NAME: TelemetryPlugin(period=1.0)}

    answer = drain(Worker())
    assert answer["nthreads"] == 4
    feed = TelemetryFeed(client=None, pool_name="sim", period=1.0)
    feed.ingest({Worker.address: answer})
    assert feed.workers[Worker.address].nthreads == 4
