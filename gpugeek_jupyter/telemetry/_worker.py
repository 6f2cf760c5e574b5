"""The worker side: a dask ``WorkerPlugin`` that samples GPU/CPU metrics on its own thread.

Registered with the scheduler, so every worker of the pool gets it, including workers that join
later or come back after a nanny restart. ``setup`` only starts a daemon thread (NVML is opened on
that thread), so neither the worker's event loop nor the thread that runs tasks ever waits for a
sample. Samples wait in a bounded buffer until the notebook collects them with :func:`drain`,
called through ``client.run`` (dask's own channel: no new server, no new port).
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from ..devices import initial_environ
from ._egress import EGRESS_METRIC, EgressMeter
from ._nvml_reader import NvmlReader
from ._process import ProcessReader
from ._schema import sample_row

log = logging.getLogger(__name__)

PLUGIN_NAME = "gpugeek-telemetry"
SAMPLER_THREAD = "gpugeek-telemetry-sampler"


# dask's statistical profiler: it samples every thread's stack every few milliseconds, all the time
DASK_MACHINERY_THREADS = ("Profile",)


def machinery_threads(loop_thread: int | None) -> set[int]:
    """``threading`` idents of the threads that are the worker's own machinery, not its work: dask's
    event-loop thread ``loop_thread`` (heartbeats, ``client.run`` calls, this plugin's collection),
    its profiler, and this plugin's sampler. Asked on the sampler thread, once per sample.

    Tasks run on the worker's executor threads and jobs on their rank thread: work. An ``async def``
    task runs on the event loop and so counts as overhead (dask pools here run none).
    """
    ids = {t.ident for t in threading.enumerate() if t.name in DASK_MACHINERY_THREADS or t.name == SAMPLER_THREAD}
    if loop_thread is not None:
        ids.add(loop_thread)
    return {i for i in ids if i is not None}


class Sampler:
    """Takes one sample: a row per GPU, or one CPU row when there is no GPU. Never raises.

    ``environ`` is where the GPU reader finds ``CUDA_VISIBLE_DEVICES`` (default: this process's);
    ``overhead_threads`` tells the process reader which threads are machinery (default: none).
    """

    def __init__(
        self,
        gpus: str = "visible",
        pid: int | None = None,
        environ: Mapping[str, str] | None = None,
        overhead_threads: Callable[[], Collection[int]] | None = None,
    ) -> None:
        self.gpus = NvmlReader(gpus, environ)
        self.process = ProcessReader(pid, overhead_threads=overhead_threads)
        self._warned: set[str] = set()

    def open(self) -> None:
        self.gpus.open()

    def close(self) -> None:
        self.gpus.close()

    @property
    def reason(self) -> str | None:
        return self.gpus.reason

    def sample(self) -> list[tuple[Any, ...]]:
        now = time.time()
        try:
            cpu, overhead, rss = self.process.read()
            if not self.gpus.devices:
                return [
                    sample_row(
                        now, cpu_pct=cpu, overhead_cpu_pct=overhead, rss_bytes=rss, no_gpu_reason=self.gpus.reason
                    )
                ]
            rows = []
            for reading in self.gpus.read(self.process.pids(), time.monotonic()):
                rows.append((now, *reading[:-1], cpu, overhead, rss, None, reading[-1]))
                if reading[-1]:
                    self._warn_once(f"GPU {reading[0]}: {reading[-1]}")
            return rows
        except Exception as e:  # a broken sample is reported in the data; the thread carries on
            message = f"sampler failed: {type(e).__name__}: {e}"
            self._warn_once(message)
            return [sample_row(now, no_gpu_reason=self.gpus.reason, error=message)]

    def _warn_once(self, message: str) -> None:
        if message not in self._warned and len(self._warned) < 100:
            self._warned.add(message)
            log.warning("telemetry: %s (said once; later samples carry it in their 'error' field)", message)


class _SamplerThread(threading.Thread):
    def __init__(self, plugin: TelemetryPlugin) -> None:
        super().__init__(name=SAMPLER_THREAD, daemon=True)
        self.plugin = plugin
        self.stopped = threading.Event()

    def run(self) -> None:
        plugin = self.plugin
        loop_thread = plugin.loop_thread
        sampler = Sampler(
            plugin.gpus, environ=initial_environ(), overhead_threads=lambda: machinery_threads(loop_thread)
        )
        sampler.open()
        plugin.reason = sampler.reason
        try:
            deadline = time.monotonic()
            while not self.stopped.is_set():
                plugin.add(sampler.sample())  # the first at once: a pool shows its GPUs as soon as it is up
                deadline += plugin.period
                now = time.monotonic()
                if deadline < now:  # we fell behind (a suspended process): skip, do not burst
                    deadline = now + plugin.period
                self.stopped.wait(deadline - now)
        finally:
            sampler.close()


class TelemetryPlugin(WorkerPlugin):
    """Samples every ``period`` seconds into a buffer of the last ``keep`` samples.

    ``gpus`` is ``"visible"`` (every GPU in CUDA_VISIBLE_DEVICES, all when unset) or ``"first"``
    (only the first: the worker's own GPU under dask-cuda).
    """

    name = PLUGIN_NAME

    def __init__(self, period: float = 1.0, keep: int = 600, gpus: str = "visible", idempotent: bool = False) -> None:
        if not period > 0:
            raise ValueError(f"telemetry period must be a positive number of seconds, got {period!r} (e.g. 1.0)")
        self.period = float(period)
        self.keep = int(keep)
        self.gpus = gpus
        self.idempotent = idempotent
        self._init_state()

    def _init_state(self) -> None:
        self.token = uuid.uuid4().hex  # tells collectors that a buffer restarted (new plugin or worker)
        self.reason: str | None = None
        self._samples: collections.deque[tuple[int, list[tuple[Any, ...]]]] = collections.deque(maxlen=self.keep)
        self._seq = 0
        self._lock = threading.Lock()
        self._thread: _SamplerThread | None = None
        self.loop_thread: int | None = None  # threading ident of the worker's event-loop thread, once set up

    def __getstate__(self) -> dict[str, Any]:  # only settings travel to the scheduler and workers
        return {"period": self.period, "keep": self.keep, "gpus": self.gpus, "idempotent": self.idempotent}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_state()

    def setup(self, worker: Any) -> None:
        self.loop_thread = threading.get_ident()  # dask calls setup on the worker's event loop
        worker.metrics.setdefault(EGRESS_METRIC, EgressMeter())  # each heartbeat: bytes sent off the host
        self._thread = _SamplerThread(self)
        self._thread.start()

    def teardown(self, worker: Any) -> None:
        if self._thread is not None:
            self._thread.stopped.set()
            self._thread.join(timeout=0.5)  # on the event loop: do not wait for a slow NVML call

    def add(self, rows: list[tuple[Any, ...]]) -> None:
        with self._lock:
            self._seq += 1
            self._samples.append((self._seq, rows))

    def drain(self, since: int | None) -> tuple[int, int, list[tuple[Any, ...]]]:
        """(last sequence number, samples lost since ``since``, rows of the samples after ``since``)."""
        with self._lock:
            samples = list(self._samples) if since is None else [s for s in self._samples if s[0] > since]
            last = self._seq
        lost = 0
        if since is not None and samples:
            lost = max(0, samples[0][0] - since - 1)
        return last, lost, [row for _, rows in samples for row in rows]


def drain(dask_worker: Any, since: dict[str, tuple[str, int]] | None = None) -> dict[str, Any]:
    """Run on each worker by ``client.run``: the samples this collector has not seen yet.

    ``since`` maps worker address -> (plugin token, last sequence number seen).
    """
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    answer: dict[str, Any] = {
        "name": str(dask_worker.name),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "nthreads": int(getattr(dask_worker, "nthreads", 0) or 0),  # what "busy" means for a CPU worker
    }
    if not isinstance(plugin, TelemetryPlugin):
        return {**answer, "missing": True}
    seen = (since or {}).get(dask_worker.address)
    after = seen[1] if seen is not None and seen[0] == plugin.token else None
    last, lost, rows = plugin.drain(after)
    return {
        **answer,
        "token": plugin.token,
        "seq": last,
        "lost": lost,
        "rows": rows,
        "period": plugin.period,
        "reason": plugin.reason,
    }
