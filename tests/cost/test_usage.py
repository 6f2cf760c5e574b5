"""What a worker reports as its utilization: work, not its own bookkeeping."""

from __future__ import annotations

import threading
import time

import pytest

from gpugeek_jupyter.cost import usage


def _share_while_a_thread_burns(name: str) -> float:
    """The share measured between two calls made while a thread called ``name`` burns a core."""
    stop = threading.Event()

    def burn() -> None:
        while not stop.is_set():
            pass

    thread = threading.Thread(target=burn, name=name, daemon=True)
    thread.start()
    try:
        usage._cpu_share()  # baseline, with the thread running
        stop.wait(0.5)
        return usage._cpu_share()
    finally:
        stop.set()
        thread.join()


def test_a_thread_doing_work_counts_as_utilization():
    assert _share_while_a_thread_burns("Dask-Default-Threads-1") > 0.2


def test_our_own_instrumentation_threads_do_not_count_as_work():
    assert _share_while_a_thread_burns("gpugeek-telemetry-sampler") < 0.05


def test_work_by_a_thread_that_ended_between_samples_still_counts():
    usage._cpu_share()
    thread = threading.Thread(target=lambda: sum(i * i for i in range(3_000_000)), name="task")
    thread.start()
    thread.join()
    assert usage._cpu_share() > 0.2


def test_worker_usage_without_a_gpu_reports_one_cpu_device_and_the_hosts_bytes_sent():
    reading = usage.worker_usage(use_gpu=False)
    assert reading["devices"] == 1 and 0.0 <= reading["util"] <= 1.0
    assert isinstance(reading["bytes_sent"], int) and reading["host"]


@pytest.mark.gpu
def test_worker_usage_on_a_gpu_reads_nvml_utilization():
    reading = usage.worker_usage(use_gpu=True)
    assert reading["devices"] >= 1
    assert 0.0 <= reading["util"] <= 1.0
