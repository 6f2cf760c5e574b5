"""Utilization and network rows of a live pool, written to the registry from its telemetry.

Idle spend (:mod:`.ledger`) and the idle shutdown (:class:`~.guards.IdleGuard`) read these rows.
Nothing here asks the workers: the pool's telemetry sampler already measures every worker once per
``telemetry_period_seconds`` and this process's :class:`~gpugeek_jupyter.telemetry.TelemetryFeed`
collects the samples. Once per heartbeat period, as part of the cost plugin's ``heartbeat`` hook
(pool housekeeping, see :mod:`gpugeek_jupyter.pools._plugin`), :class:`UtilizationRecorder` turns
the samples that arrived since its previous row into one row (:func:`pool_utilization`):

- GPU pools: the mean SM utilization (0..1) of the pool's GPUs, each GPU counted once however many
  workers sample it;
- ``cpu`` pools (and workers of a GPU pool whose GPUs could not be read): the share of the worker's
  task threads kept busy, ``(cpu_pct - overhead_cpu_pct) / 100 / nthreads``, capped at 1. The
  worker's own machinery (dask's event loop, its profiler, the sampler) is left out, so an idle
  worker reads 0 whatever dask does in the background; its children (torchrun ranks) count.

Network bytes are what each host sends off the host: the telemetry plugin adds a metric to every
worker's heartbeat (``metrics["gpugeek_egress"]["write_bps"]``, see
:mod:`gpugeek_jupyter.telemetry._egress`), psutil's bytes sent over every interface but loopback
between two heartbeats, so a one-host pool's all-reduce and dask's own traffic on 127.0.0.1 are
never priced as egress. Each host's rate counts once, times the seconds since the previous row, so
it is an estimate. dask's own ``host_net_io`` is not used: it counts loopback too.

Without telemetry (``telemetry_period_seconds <= 0``, or a pool whose workers cannot run the
sampler) there are no samples and so no rows: the log says so once per pool, the idle shutdown never
fires and the cost has no idle share ("no utilization samples yet").
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import get_config
from ..pools.scheduler_workers import connected_workers

if TYPE_CHECKING:
    from ..pools import Pool, PoolManager
    from ..telemetry import TelemetryFeed
    from ..telemetry._schema import Columns

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolUtilization:
    """One row's figures: the mean utilization (0..1) over ``devices`` GPUs (or CPU workers)."""

    mean: float
    devices: int


def _mean(values: np.ndarray) -> float | None:
    finite = values[~np.isnan(values)]
    return float(np.mean(finite)) if len(finite) else None


def _gpu_means(columns: Columns) -> tuple[list[float], set[str]]:
    """Per GPU (by UUID, else host and index), the mean SM utilization; and the workers they cover."""
    from ..telemetry._schema import NO_GPU

    sm = columns["sm_util_pct"]
    read = (columns["gpu"] != NO_GPU) & ~np.isnan(sm)
    by_gpu: dict[str, list[float]] = {}
    for uuid, host, index, value in zip(
        columns["gpu_uuid"][read], columns["host"][read], columns["gpu"][read], sm[read], strict=True
    ):
        by_gpu.setdefault(uuid or f"{host}:{index}", []).append(float(value))
    means = [min(1.0, max(0.0, sum(v) / len(v) / 100.0)) for v in by_gpu.values()]
    return means, set(columns["worker"][read])


def _cpu_busy(columns: Columns, worker: str, nthreads: int) -> float | None:
    """The mean busy share of ``worker``'s task threads over its samples in ``columns``."""
    mine = columns["worker"] == worker
    # a worker with GPUs sends one row per GPU per sample, each carrying the same process figures
    _, first = np.unique(columns["time"][mine], return_index=True)
    cpu = columns["cpu_pct"][mine][first]
    overhead = np.nan_to_num(columns["overhead_cpu_pct"][mine][first], nan=0.0)
    busy = np.clip((cpu - overhead) / 100.0 / max(1, nthreads), 0.0, 1.0)
    return _mean(busy)


def pool_utilization(columns: Columns, use_gpu: bool, nthreads: Mapping[str, int]) -> PoolUtilization | None:
    """The utilization row for the telemetry rows ``columns`` (as a feed's buffer holds them).

    With ``use_gpu``, each GPU's mean SM % is one device; workers with no readable GPU count by CPU.
    Without, every worker is one device, busy by the share of its ``nthreads[address]`` task threads
    (1 when unknown). None when the rows say nothing (none, or every figure NaN).
    """
    devices: list[float] = []
    covered: set[str] = set()
    if use_gpu:
        devices, covered = _gpu_means(columns)
    for worker in dict.fromkeys(columns["worker"].tolist()):
        if worker in covered:
            continue
        busy = _cpu_busy(columns, worker, nthreads.get(worker, 1))
        if busy is not None:
            devices.append(busy)
    if not devices:
        return None
    return PoolUtilization(sum(devices) / len(devices), len(devices))


def host_send_rate(workers: Mapping[str, Mapping[str, Any]]) -> float:
    """Bytes per second the pool's hosts send off their host, from ``scheduler_info()["workers"]``:
    each worker's last heartbeat carries its host's rate over every interface but loopback
    (``metrics["gpugeek_egress"]["write_bps"]``); workers on one host share its interfaces, so each
    host counts once. A worker without that metric (no telemetry plugin) adds nothing: dask's
    ``host_net_io`` would count its loopback traffic as egress."""
    from ..telemetry._egress import EGRESS_METRIC  # the telemetry package imports distributed

    by_host: dict[str, list[float]] = {}
    for address, info in workers.items():
        rate = ((info.get("metrics") or {}).get(EGRESS_METRIC) or {}).get("write_bps")
        if rate is None or not math.isfinite(float(rate)):
            continue
        by_host.setdefault(str(info.get("host") or address), []).append(max(0.0, float(rate)))
    return sum(sum(rates) / len(rates) for rates in by_host.values())


@dataclass
class _Cursor:
    """Where a pool's rows have got to in its feed."""

    feed: TelemetryFeed
    seq: int = 0  # the newest buffer batch the rows have covered
    row_at: float | None = None  # registry time of the pool's newest row
    nthreads: dict[str, int] = field(default_factory=dict)  # worker address -> task threads, as last said


class UtilizationRecorder:
    """Part of the cost plugin's ``heartbeat`` hook: a ``utilization`` row per period for each owned,
    live pool, from the telemetry samples that arrived since its previous row.

    A beat that finds no new samples writes nothing: the next row covers its time too, as the ledger
    reads a row as covering the time since the one before. ``timeout_seconds`` bounds the one
    scheduler call (the network rates), within the housekeeping deadline.
    """

    def __init__(self, timeout_seconds: float = 5.0) -> None:
        self.timeout_seconds = timeout_seconds
        self._cursors: dict[int, _Cursor] = {}
        self._said: set[tuple[int, str]] = set()  # (pool id, reason) logged once already

    def __call__(self, manager: PoolManager, pool: Pool) -> None:
        feed = self._feed(pool)
        if feed is None:
            return
        cursor = self._cursors.get(pool.id)
        if cursor is None or cursor.feed is not feed:
            fresh = _Cursor(feed, row_at=cursor.row_at if cursor is not None else None)
            if cursor is not None:
                # a new feed re-collects what the workers still hold, rows already covered among it
                fresh.seq = feed.buffer.seq
            self._cursors[pool.id] = cursor = fresh
        seq, columns = feed.buffer.since(cursor.seq)
        if seq == cursor.seq:
            return  # nothing new; the next row covers this beat's time as well
        cursor.seq = seq
        for address, worker in list(feed.workers.items()):
            if worker.nthreads:
                cursor.nthreads[address] = worker.nthreads
        reading = pool_utilization(columns, pool.spec.gpu_type != "cpu", cursor.nthreads)
        if reading is None:
            log.debug("pool %s: %d new telemetry rows carry no utilization", pool.name, len(columns["time"]))
            return
        now = manager.registry.clock()
        seconds = now - cursor.row_at if cursor.row_at is not None else 0.0
        net = self._network_bytes(manager, pool, seconds) if seconds > 0 else 0
        manager.registry.add_utilization(pool.id, reading.mean, reading.devices, net, at=now)
        cursor.row_at = now

    def forget(self, pool_id: int) -> None:
        """Drop what is kept about pool ``pool_id`` (it stopped)."""
        self._cursors.pop(pool_id, None)
        self._said = {said for said in self._said if said[0] != pool_id}

    def _feed(self, pool: Pool) -> TelemetryFeed | None:
        from .. import telemetry

        feed = telemetry.feed_for(pool, start=False)  # the owner's feed, started at launch; never a dask call
        if feed is not None and not feed.closed:
            return feed
        period = get_config().telemetry_period_seconds
        if period <= 0:
            why = f"telemetry is off (telemetry_period_seconds={period:g})"
        elif feed is None:
            why = "its telemetry did not start (see the warning at launch)"
        else:
            why = "its telemetry was stopped"
        self._say_once(pool, why)
        return None

    def _say_once(self, pool: Pool, why: str) -> None:
        if (pool.id, why) in self._said:
            return
        self._said.add((pool.id, why))
        minutes = pool.spec.idle_timeout if pool.spec.idle_timeout is not None else get_config().idle_timeout_minutes
        level = logging.WARNING if minutes and minutes > 0 else logging.INFO
        log.log(
            level,
            "pool %s: %s, so no utilization is recorded: the idle shutdown%s cannot stop it and its "
            "cost has no idle share",
            pool.name,
            why,
            f" ({minutes:g} min)" if minutes and minutes > 0 else "",
        )

    def _network_bytes(self, manager: PoolManager, pool: Pool, seconds: float) -> int:
        client = pool.client
        # bounded by what is left of this pool's housekeeping deadline (a frozen scheduler never answers)
        timeout = max(0.1, min(self.timeout_seconds, manager.housekeeping_time_left()))
        try:
            workers = connected_workers(client, timeout=timeout)
        except Exception as e:
            log.info(
                "pool %s: network bytes of this period unknown (the scheduler did not answer: %s: %s)",
                pool.name,
                type(e).__name__,
                e,
            )
            return 0
        return round(host_send_rate(workers) * seconds)
