"""The notebook side of one pool: a background thread that collects samples into a ring buffer.

Every ``period`` seconds it calls :func:`~._worker.drain` on all workers with ``client.run`` (the
same channel dask uses for diagnostics) and appends what came back. A worker that fails to answer
is noted in :attr:`TelemetryFeed.workers` and skipped; the others carry on. Readers take what is
new with ``feed.buffer.since(seq)`` (the live widget, the cost's utilization recorder) and never
ask the workers themselves.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._buffer import RingBuffer
from ._schema import Columns, columns_from_rows, concat_columns
from ._worker import drain

if TYPE_CHECKING:
    from distributed import Client

log = logging.getLogger(__name__)

RETENTION_SECONDS = 3600.0  # the ring buffer keeps the last hour...
MAX_ROWS = 1_000_000  # ...or this many rows (about 200 MB), whichever is less


@dataclass
class WorkerTelemetry:
    """What the notebook knows about one worker's sampler."""

    address: str
    name: str = ""
    host: str = ""
    nthreads: int = 0  # the worker's task threads (0: not said); a CPU worker is busy when all of them are
    token: str | None = None
    seq: int = 0
    samples_lost: int = 0
    last_rows_at: float | None = None  # notebook clock, when rows last came
    reason: str | None = None  # why there is no GPU data from this worker
    problem: str | None = None  # why the last collection from it failed (no sampler, no answer)


class TelemetryFeed:
    """Collects a pool's samples into :attr:`buffer`; one per pool per process."""

    def __init__(
        self,
        client: Client,
        pool_name: str,
        period: float,
        retention_seconds: float = RETENTION_SECONDS,
        max_rows: int = MAX_ROWS,
    ) -> None:
        self.client = client
        self.pool_name = pool_name
        self.period = period
        self.buffer = RingBuffer(retention_seconds, max_rows)
        self.workers: dict[str, WorkerTelemetry] = {}
        self.collections = 0
        self._strings: dict[str, str] = {}  # one object per distinct string, however many rows hold it
        self._collect_lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"<TelemetryFeed pool={self.pool_name!r} workers={len(self.workers)} rows={len(self.buffer)}>"

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._stopped.is_set()

    def start(self) -> TelemetryFeed:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"gpugeek-telemetry-{self.pool_name}", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop collecting; the buffer keeps what it has."""
        self._stopped.set()
        self.buffer.wake()

    def _loop(self) -> None:
        while not self._stopped.wait(self.period):
            if getattr(self.client, "status", "running") in ("closing", "closed"):
                log.debug("pool %s: client closed, telemetry feed stops", self.pool_name)
                self.close()
                break
            self.collect_now()

    # -- collecting ------------------------------------------------------------------------------
    def collect_now(self) -> int:
        """Fetch new samples from every worker now; returns the number of rows added. Never raises."""
        with self._collect_lock:
            since = {a: (w.token, w.seq) for a, w in self.workers.items() if w.token is not None}
            try:
                answers = self.client.run(drain, since=since, on_error="return")
            except Exception as e:  # scheduler gone or restarting: try again next period
                log.info("pool %s: telemetry collection failed: %s", self.pool_name, e)
                return 0
            return self.ingest(answers)

    def ingest(self, answers: dict[str, Any]) -> int:
        """Append the workers' answers (address -> drain() result or exception) to the buffer."""
        self.collections += 1
        now = time.time()
        batches: list[Columns] = []
        for address, answer in answers.items():
            worker = self.workers.get(address)
            if worker is None:
                worker = self.workers[address] = WorkerTelemetry(address)
            if isinstance(answer, BaseException):
                worker.problem = f"no answer: {type(answer).__name__}: {answer}"
                continue
            worker.name = self._intern(answer["name"])
            worker.host = self._intern(answer["host"])
            worker.nthreads = int(answer.get("nthreads") or worker.nthreads)
            if answer.get("missing"):
                worker.problem = "the telemetry sampler is not running on this worker"
                continue
            worker.problem = None
            worker.reason = answer.get("reason")
            worker.token = answer["token"]
            worker.seq = answer["seq"]
            worker.samples_lost += answer["lost"]
            rows = answer["rows"]
            if rows:
                worker.last_rows_at = now
                batches.append(columns_from_rows(rows, self._intern(address), worker.name, worker.host))
        for gone in set(self.workers) - set(answers):
            del self.workers[gone]
        if not batches:
            return 0
        columns = concat_columns(batches)
        for name in ("gpu_name", "gpu_uuid", "no_gpu_reason", "error"):
            column = columns[name]
            column[:] = [self._intern(v) if v is not None else None for v in column]
        self.buffer.append(columns)
        return len(columns["time"])

    def _intern(self, value: str) -> str:
        return self._strings.setdefault(value, value)
