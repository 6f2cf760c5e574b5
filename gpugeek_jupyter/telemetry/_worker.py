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
import math
import os
import socket
import threading
import time
import uuid
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from ._nvml_reader import NvmlReader
from ._process import ProcessReader
from ._schema import NO_GPU

log = logging.getLogger(__name__)

PLUGIN_NAME = "gpugeek-telemetry"
_NAN = math.nan


class Sampler:
    """Takes one sample: a row per GPU, or one CPU row when there is no GPU. Never raises."""

    def __init__(self, gpus: str = "visible", pid: int | None = None) -> None:
        self.gpus = NvmlReader(gpus)
        self.process = ProcessReader(pid)
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
            cpu, rss = self.process.read()
            if not self.gpus.devices:
                return [(now, NO_GPU, None, None, *([_NAN] * 12), cpu, rss, self.gpus.reason, None)]
            rows = []
            for reading in self.gpus.read(self.process.pids(), time.monotonic()):
                rows.append((now, *reading[:-1], cpu, rss, None, reading[-1]))
                if reading[-1]:
                    self._warn_once(f"GPU {reading[0]}: {reading[-1]}")
            return rows
        except Exception as e:  # a broken sample is reported in the data; the thread carries on
            message = f"sampler failed: {type(e).__name__}: {e}"
            self._warn_once(message)
            return [(now, NO_GPU, None, None, *([_NAN] * 14), self.gpus.reason, message)]

    def _warn_once(self, message: str) -> None:
        if message not in self._warned and len(self._warned) < 100:
            self._warned.add(message)
            log.warning("telemetry: %s (said once; later samples carry it in their 'error' field)", message)


class _SamplerThread(threading.Thread):
    def __init__(self, plugin: TelemetryPlugin) -> None:
        super().__init__(name="gpugeek-telemetry-sampler", daemon=True)
        self.plugin = plugin
        self.stopped = threading.Event()

    def run(self) -> None:
        plugin = self.plugin
        sampler = Sampler(plugin.gpus)
        sampler.open()
        plugin.reason = sampler.reason
        try:
            deadline = time.monotonic()
            while not self.stopped.is_set():
                plugin.add(sampler.sample())
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

    def __getstate__(self) -> dict[str, Any]:  # only settings travel to the scheduler and workers
        return {"period": self.period, "keep": self.keep, "gpus": self.gpus, "idempotent": self.idempotent}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_state()

    def setup(self, worker: Any) -> None:
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
    answer: dict[str, Any] = {"name": str(dask_worker.name), "host": socket.gethostname(), "pid": os.getpid()}
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
