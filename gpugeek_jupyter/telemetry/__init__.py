"""Live GPU telemetry from every worker of a pool.

A :class:`~._worker.TelemetryPlugin` (a dask ``WorkerPlugin``, registered with the scheduler when the
pool is launched, so restarted and late workers get it too) samples on its own thread every
``GpugeekConfig.telemetry_period_seconds`` (default 1 s; 0 or less turns telemetry off): per GPU the
``nvidia-smi dmon`` fields read through NVML (``import pynvml``), plus the worker process's own GPU
memory, CPU % (with the part spent by dask's own machinery apart, ``overhead_cpu_pct``) and RSS.
Without a usable GPU the rows carry the reason (``no_gpu_reason``, e.g. "NVML library not found ...")
and CPU figures; nothing raises and nothing is logged as an error. It is the only sampler on the
workers: the cost's utilization rows (idle shutdown, idle spend) are computed from these samples by
:mod:`gpugeek_jupyter.cost.usage`, so with telemetry off a pool has neither.

In the notebook a :class:`~._feed.TelemetryFeed` per pool collects the samples over dask's own
channel (``client.run``) into a ring buffer (the last hour, at most a million rows);
:func:`feed_for` gives it to readers in this process.

Public functions, all safe to call from any thread, none of which raises for a missing GPU:

>>> telemetry.metrics(pool)                       # doctest: +SKIP   (also Pool.metrics())
>>> telemetry.job_summary(pool, started_at, ended_at)   # doctest: +SKIP
{'sm_util_mean_pct': 41.2, 'sm_util_peak_pct': 98.0, 'mem_used_peak_bytes': 3.1e10, ...}
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ._buffer import RingBuffer
from ._feed import TelemetryFeed, WorkerTelemetry
from ._schema import COLUMNS, SCHEMA, Columns, columns_from_rows, concat_columns, select, to_frame
from ._summary import latest_rows, summarize
from ._worker import PLUGIN_NAME, TelemetryPlugin, drain

if TYPE_CHECKING:
    import pandas as pd

    from ..pools import Pool

__all__ = [
    "COLUMNS",
    "Columns",
    "PLUGIN_NAME",
    "SCHEMA",
    "RingBuffer",
    "TelemetryFeed",
    "TelemetryPlugin",
    "WorkerTelemetry",
    "feed_for",
    "install",
    "job_summary",
    "latest",
    "latest_from_workers",
    "recent_from_workers",
    "metrics",
    "samples_between",
    "set_period",
    "uninstall",
]

log = logging.getLogger(__name__)

_feeds: weakref.WeakKeyDictionary[Pool, TelemetryFeed] = weakref.WeakKeyDictionary()
_lock = threading.RLock()


def _configured_period() -> float:
    from ..config import get_config

    return float(get_config().telemetry_period_seconds)


def _gpu_selection(pool: Pool) -> str:
    # a local GPU pool is dask-cuda: one worker per GPU, each listing its own GPU first
    return "first" if pool.running.cuda_visible_devices else "visible"


def _register(pool: Pool, period: float, replace: bool) -> None:
    plugin = TelemetryPlugin(period=period, gpus=_gpu_selection(pool), idempotent=not replace)
    answers = pool.client.register_plugin(plugin, name=PLUGIN_NAME) or {}
    for address, answer in answers.items():
        if isinstance(answer, dict) and answer.get("status") not in (None, "OK"):
            log.warning(
                "pool %s: telemetry sampler did not start on %s: %s",
                pool.name,
                address,
                answer.get("exception", answer),
            )


def install(pool: Pool, period: float | None = None) -> TelemetryFeed | None:
    """Start sampling on every worker of ``pool`` (now and future ones) and collecting here.

    Called by the pool manager right after a pool starts. Returns the feed, or None when telemetry
    is off (period <= 0) or could not start (logged as a warning: a pool works without telemetry).
    """
    period = _configured_period() if period is None else float(period)
    if period <= 0:
        log.info("pool %s: telemetry is off (telemetry_period_seconds=%s)", pool.name, period)
        return None
    try:
        _register(pool, period, replace=True)
        return _start_feed(pool, period)
    except Exception as e:
        log.warning("pool %s: telemetry not started: %s: %s", pool.name, type(e).__name__, e)
        return None


def withdraw(pool: Pool, why: str) -> None:
    """Unregister the sampler plugin from ``pool``'s scheduler (its workers cannot load it).

    A worker that starts later (a nanny restart) loads every registered plugin before any runs:
    on workers that lack this package even ``Client.upload_file``'s copy arrives too late, and a
    plugin it cannot unpickle stops the worker from starting at all. Telemetry is worth less than
    a pool that heals.
    """
    try:
        pool.client.unregister_worker_plugin(PLUGIN_NAME)
    except Exception as e:  # not registered: nothing to withdraw
        log.info("pool %s: no telemetry plugin to withdraw: %s", pool.name, e)
        return
    log.warning("pool %s: telemetry is off: %s (install gpugeek-jupyter on the workers to have it)", pool.name, why)


def _start_feed(pool: Pool, period: float) -> TelemetryFeed:
    with _lock:
        feed = _feeds.get(pool)
        if feed is None or feed.closed:
            feed = _feeds[pool] = TelemetryFeed(pool.client, pool.name, period).start()
        feed.period = period
        return feed


def feed_for(pool: Pool, start: bool = True) -> TelemetryFeed | None:
    """The pool's feed; with ``start``, begin collecting if this process is not yet (e.g. a pool
    launched by another kernel: its sampler is reused, or registered if it has none)."""
    with _lock:
        feed = _feeds.get(pool)
        if feed is not None or not start:
            return feed
        if getattr(pool.client, "status", "running") in ("closing", "closed"):
            return None  # a stopped pool that never collected here
        period = _configured_period()
        if period <= 0:
            return None
        try:
            _register(pool, period, replace=False)  # a no-op where the pool already samples
            return _start_feed(pool, period)
        except Exception as e:
            log.warning("pool %s: cannot collect telemetry: %s: %s", pool.name, type(e).__name__, e)
            return None


def set_period(pool: Pool, seconds: float) -> TelemetryFeed | None:
    """Sample every ``seconds`` on every worker of ``pool`` from now on (restarts the samplers)."""
    if not seconds > 0:
        raise ValueError(f"telemetry period must be a positive number of seconds, got {seconds!r} (e.g. 0.5)")
    return install(pool, seconds)


def uninstall(pool: Pool) -> None:
    """Stop sampling on the workers and collecting here; collected rows stay readable."""
    with _lock:
        feed = _feeds.get(pool)
    if feed is not None:
        feed.close()
    try:
        if pool.client.run_on_scheduler(_scheduler_has_plugin):  # else the scheduler logs an error
            pool.client.unregister_worker_plugin(PLUGIN_NAME)
    except Exception as e:
        log.info("pool %s: telemetry plugin not removed: %s", pool.name, e)


def _scheduler_has_plugin(dask_scheduler: Any) -> bool:
    return PLUGIN_NAME in dask_scheduler.worker_plugins


def _columns(pool: Pool, start: float | None = None, end: float | None = None):  # type: ignore[no-untyped-def]
    feed = feed_for(pool)
    if feed is None:
        return RingBuffer().columns()
    if len(feed.buffer) == 0 and not feed.closed:
        feed.collect_now()  # a feed started just now: fetch what the workers already hold
    return feed.buffer.columns(start, end)


def samples_between(pool: Pool, start: float, end: float, collect: bool = False) -> Columns:
    """The columns (:data:`SCHEMA`) of the samples this process holds of ``pool`` taken between
    ``start`` and ``end`` (epoch seconds); nothing when it collects none (telemetry off). With
    ``collect``, the workers' pending samples are fetched first (one ``client.run``)."""
    feed = feed_for(pool, start=False)
    if feed is None:
        return RingBuffer().columns()
    if collect and not feed.closed:
        feed.collect_now()
    return feed.buffer.columns(start, end)


def metrics(pool: Pool) -> pd.DataFrame:
    """Every kept sample of ``pool``: one row per GPU (or CPU-only worker) per sample.

    Columns: see :data:`SCHEMA` (``time``, ``worker``, ``worker_name``, ``host``, ``gpu``, the
    dmon fields, ``process_gpu_mem_bytes``, ``cpu_pct``, ``rss_bytes``, ``no_gpu_reason``, ``error``).
    """
    return to_frame(_columns(pool))


def latest(pool: Pool) -> pd.DataFrame:
    """The newest sample of every GPU (or CPU-only worker) of ``pool``, one row each."""
    feed = feed_for(pool)
    if feed is not None and not feed.closed:
        feed.collect_now()
    window = 30 * (feed.period if feed is not None else 1.0)
    columns = _columns(pool, start=time.time() - window) if feed is not None else _columns(pool)
    return to_frame(latest_rows(columns))


def latest_from_workers(client: Any, timeout: float = 5.0) -> tuple[list[dict[str, Any]], str | None]:
    """The newest sample of every GPU (or CPU worker) read straight from the workers' samplers.

    For a process that does not own the pool (the Jupyter server): it reads the samples each worker
    keeps without consuming them (the owner's feed has its own cursor), over ``client.run``.
    Returns JSON-ready rows and, when there are none, why. Never raises.
    """
    return _from_workers(client, timeout, latest_rows)


def recent_from_workers(client: Any, since: float, timeout: float = 5.0) -> tuple[list[dict[str, Any]], str | None]:
    """As :func:`latest_from_workers`, every kept sample taken after ``since`` (seconds since the
    epoch, the workers' clocks), oldest first: what each worker's sampler keeps (its last
    ``TelemetryPlugin.keep`` samples, 10 minutes at the default period)."""

    def newer(columns: Columns) -> Columns:
        kept = np.flatnonzero(columns["time"] > since)
        return select(columns, kept[np.argsort(columns["time"][kept], kind="stable")])

    return _from_workers(client, timeout, newer)


def _from_workers(
    client: Any, timeout: float, choose: Callable[[Columns], Columns]
) -> tuple[list[dict[str, Any]], str | None]:
    try:
        answers = client.run(drain, since=None, on_error="return", callback_timeout=timeout)
    except Exception as e:
        return [], f"the pool's workers did not answer: {e}"
    batches, reasons = [], set()
    for address, answer in answers.items():
        if not isinstance(answer, dict):
            reasons.add(f"worker {address} failed to answer: {answer!r}")
            continue
        if answer.get("missing"):
            reasons.add("no telemetry sampler on the pool's workers")
            continue
        batches.append(columns_from_rows(answer["rows"], address, answer["name"], answer["host"]))
    columns = choose(concat_columns(batches))
    rows = [{name: _json_value(columns[name][i]) for name in COLUMNS} for i in range(len(columns["time"]))]
    return rows, None if rows else (", ".join(sorted(reasons)) or "no samples yet")


def _json_value(value: Any) -> Any:
    if isinstance(value, float | np.floating):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def job_summary(pool: Pool, started_at: float, ended_at: float | None = None) -> dict[str, Any]:
    """Mean and peak SM %, peak GPU memory (on any one GPU), power, CPU, RSS and a downsampled
    SM % timeline for the samples between ``started_at`` and ``ended_at`` (epoch seconds, default
    now). JSON-ready, for a job record's ``summary`` (e.g. under the key ``"telemetry"``).
    Collects pending samples first; never raises (a failure is reported under ``"error"``).

    >>> telemetry.job_summary(pool, job.started_at, job.ended_at)["sm_util_peak_pct"]   # doctest: +SKIP
    97.0
    """
    ended_at = time.time() if ended_at is None else ended_at
    try:
        with _lock:
            feed = _feeds.get(pool)
        if feed is None:
            summary = summarize(RingBuffer().columns(), started_at, ended_at)
            summary["error"] = "no telemetry was collected for this pool in this process"
            return summary
        if not feed.closed:
            feed.collect_now()
        return summarize(feed.buffer.columns(started_at, ended_at), started_at, ended_at)
    except Exception as e:
        log.warning("pool %s: job telemetry summary failed: %s: %s", getattr(pool, "name", pool), type(e).__name__, e)
        return {"started_at": started_at, "ended_at": ended_at, "error": f"{type(e).__name__}: {e}"}
