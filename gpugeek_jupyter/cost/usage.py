"""Utilization and network samples of a live pool, written to the registry once per heartbeat.

Idle spend and the idle shutdown read these rows. :func:`worker_usage` runs on every worker (through
``Client.run``): the mean NVML utilization of the GPUs the worker uses, or, for ``cpu`` pools, the
cores busy with work in the worker process (its event-loop thread left out) and its children
(torchrun ranks); and the bytes its host has sent
on non-loopback interfaces. :class:`UtilizationRecorder` gathers them, as part of the cost plugin's
``heartbeat`` hook (pool housekeeping, see :mod:`gpugeek_jupyter.pools._plugin`).

A telemetry module with its own samples can write the same rows with
``Registry.add_utilization(pool_id, mean_util, gpus, net_bytes)`` and take this hook's place.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..pools import Pool, PoolManager

log = logging.getLogger(__name__)

_state_lock = threading.Lock()
_processes: dict[int, Any] = {}  # on a worker: child pid -> psutil.Process, so cpu_percent has a baseline
_overhead_cpu: dict[int, float] = {}  # on a worker: overhead thread id -> its CPU seconds at the previous call
_last: dict[str, float] = {}  # on a worker: monotonic time and process CPU seconds at the previous call
_nvml_ready: bool | None = None


def _cpu_share() -> float:
    """Cores busy with work in this worker since the previous call.

    Work is the process's CPU time less that of its event-loop thread (dask's own heartbeats, and
    this very call, run there) and of our own ``gpugeek-*`` threads (telemetry sampler, import
    warm-up), plus its children's (torchrun ranks). Threads that ended still count through the
    process total. Called on the event-loop thread, as ``Client.run`` does; the first call returns
    0.0 and sets the baselines.
    """
    import psutil

    me = psutil.Process()
    named = {threading.get_native_id()} | {
        t.native_id for t in threading.enumerate() if t.name.startswith("gpugeek-") and t.native_id is not None
    }
    times = me.cpu_times()
    total = times.user + times.system
    threads = {t.id: t.user_time + t.system_time for t in me.threads()}
    now = time.monotonic()
    try:
        children = me.children(recursive=True)
    except psutil.Error:
        children = []
    children_percent = 0.0
    with _state_lock:
        _overhead_cpu.update({tid: _overhead_cpu.get(tid, 0.0) for tid in named})
        overhead = sum(threads[tid] - cpu for tid, cpu in _overhead_cpu.items() if tid in threads)
        for tid in list(_overhead_cpu):  # remember where each one is; forget ended ones (ids get reused)
            if tid in threads:
                _overhead_cpu[tid] = threads[tid]
            else:
                del _overhead_cpu[tid]
        previous = _last.get("at"), _last.get("total")
        _last.update(at=now, total=total)
        alive = set()
        for child in children:
            alive.add(child.pid)
            known = _processes.setdefault(child.pid, child)
            try:
                children_percent += known.cpu_percent(interval=None)  # 0.0 on the first call: the baseline
            except psutil.Error:
                continue
        for pid in set(_processes) - alive:
            _processes.pop(pid, None)
    own = 0.0
    if previous[0] is not None and previous[1] is not None and now > previous[0]:
        own = max(0.0, total - previous[1] - overhead) / (now - previous[0])
    return own + children_percent / 100.0


def _gpu_utilizations() -> list[float] | None:
    """NVML utilization (0..1) of the GPUs this worker uses; None when NVML cannot say."""
    global _nvml_ready
    try:
        import pynvml

        if _nvml_ready is None:
            pynvml.nvmlInit()  # kept initialised for the life of the worker
            _nvml_ready = True
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        if visible:
            # dask-cuda rotates the list so that a worker's own GPU comes first
            first = visible[0]
            handles = [
                pynvml.nvmlDeviceGetHandleByUUID(first) if first.startswith(("GPU-", "MIG-"))
                else pynvml.nvmlDeviceGetHandleByIndex(int(first))
            ]
        else:  # a container that sees only its own GPUs (kubernetes device plugin)
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        return [pynvml.nvmlDeviceGetUtilizationRates(h).gpu / 100.0 for h in handles] or None
    except Exception as e:
        _nvml_ready = False if _nvml_ready is None else _nvml_ready
        log.debug("NVML utilization unavailable: %s", e)
        return None


def _bytes_sent() -> int:
    import psutil

    counters = psutil.net_io_counters(pernic=True)
    return sum(c.bytes_sent for name, c in counters.items() if not name.startswith("lo"))


def worker_usage(use_gpu: bool, dask_worker: Any = None) -> dict[str, Any]:
    """Runs on a worker: ``{"util": 0..1, "devices": n, "host": ..., "bytes_sent": ...}``."""
    gpus = _gpu_utilizations() if use_gpu else None
    if gpus:
        util, devices = sum(gpus) / len(gpus), len(gpus)
    else:
        threads = max(1, int(getattr(dask_worker, "nthreads", 1) or 1))
        util, devices = min(1.0, _cpu_share() / threads), 1
    return {"util": util, "devices": devices, "host": socket.gethostname(), "bytes_sent": _bytes_sent()}


class UtilizationRecorder:
    """Part of the cost plugin's ``heartbeat`` hook: one ``utilization`` row per period for each owned, live pool.

    The first beat of a pool only sets the baselines (CPU time, bytes sent); network bytes are
    counted once per host, since workers on one host share its interfaces.
    """

    def __init__(self, timeout_seconds: float = 5.0) -> None:
        self.timeout_seconds = timeout_seconds
        self._bytes_sent: dict[int, dict[str, int]] = {}  # pool id -> host -> counter at the last beat

    def __call__(self, manager: PoolManager, pool: Pool) -> None:
        # within what is left of this pool's housekeeping deadline (a frozen worker never answers)
        timeout = max(0.1, min(self.timeout_seconds, manager.housekeeping_time_left()))
        results = pool.client.run(worker_usage, pool.spec.gpu_type != "cpu", on_error="return", callback_timeout=timeout)
        readings = [r for r in results.values() if isinstance(r, dict)]
        if not readings:
            return
        hosts = {r["host"]: int(r["bytes_sent"]) for r in readings}
        previous = self._bytes_sent.get(pool.id)
        self._bytes_sent[pool.id] = hosts
        if previous is None:
            return  # baseline beat
        net = sum(max(0, sent - previous.get(host, sent)) for host, sent in hosts.items())
        devices = sum(int(r["devices"]) for r in readings)
        mean = sum(float(r["util"]) * int(r["devices"]) for r in readings) / max(1, devices)
        manager.registry.add_utilization(pool.id, mean, devices, net)

    def forget(self, pool_id: int) -> None:
        self._bytes_sent.pop(pool_id, None)
