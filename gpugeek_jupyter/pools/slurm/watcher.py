"""The job watcher: a Slurm pool's plugin that records each Slurm job id as a pool event and, when a
job ends while the pool lives (walltime, scancel, preemption, node failure), says why and submits a
replacement, so the pool heals."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._plugin import PoolLifecyclePlugin
from .commands import COMMAND_TIMEOUT_S, first_error_line
from .jobs import EVENT_ENDED, EVENT_JOB
from .script import JOB_NAME_PREFIX
from .squeue import ENDED_HINTS, JobState, job_states

if TYPE_CHECKING:
    from .._manager import PoolManager
    from .._pool import Pool

log = logging.getLogger(__name__)

WATCH_PERIOD_S = 5.0  # squeue while a pool lives
COMPLETING_GRACE_S = 30.0  # a job ending (COMPLETING) is reported with its final state, or as it is after this


@dataclass
class _Watched:
    recorded: set[str] = field(default_factory=set)  # job ids noted as events
    ended: set[str] = field(default_factory=set)  # job ids reported ended
    completing: dict[str, float] = field(default_factory=dict)  # job id -> when first seen COMPLETING
    checked_at: float = 0.0


class SlurmJobWatcher(PoolLifecyclePlugin):
    """The plugin of slurm pools (``SlurmBackend.lifecycle_plugins``, registered for them only):
    records each Slurm job id as an event, and when a job ends while the pool lives, records why and
    submits a replacement."""

    name = "gpugeek-slurm-jobs"

    def __init__(self) -> None:
        self._watched: dict[int, _Watched] = {}
        self._lock = threading.Lock()

    def _state(self, pool: Pool) -> _Watched:
        with self._lock:
            return self._watched.setdefault(pool.id, _Watched())

    def ready(self, manager: PoolManager, pool: Pool) -> None:
        if pool.cluster is not None:
            self._record_jobs(manager, pool, self._state(pool))

    def heartbeat(self, manager: PoolManager, pool: Pool) -> None:
        """Housekeeping, at most every :data:`WATCH_PERIOD_S` s a pool (squeue bounded by the deadline)."""
        if pool.cluster is None:
            return
        watched = self._state(pool)
        if time.monotonic() - watched.checked_at < WATCH_PERIOD_S:
            return
        watched.checked_at = time.monotonic()
        self._record_jobs(manager, pool, watched)
        jobs = pool.cluster.job_ids()
        timeout = max(1.0, min(COMMAND_TIMEOUT_S, manager.housekeeping_time_left()))
        states = job_states([j for j in jobs.values() if j not in watched.ended], timeout=timeout)
        for worker, job_id in jobs.items():
            state = states.get(job_id)
            if state is None or state.live or job_id in watched.ended:
                continue
            if state.state == "COMPLETING":  # its final state (TIMEOUT, NODE_FAIL, ...) says more: wait for it
                since = watched.completing.setdefault(job_id, time.monotonic())
                if time.monotonic() - since < COMPLETING_GRACE_S:
                    continue
            watched.ended.add(job_id)
            self._report_ended(manager, pool, worker, state)

    def stopped(self, manager: PoolManager, record: Any) -> None:
        with self._lock:
            self._watched.pop(record.id, None)

    def _record_jobs(self, manager: PoolManager, pool: Pool, watched: _Watched) -> None:
        for worker, job_id in pool.cluster.job_ids().items():
            if job_id not in watched.recorded:
                watched.recorded.add(job_id)
                manager.registry.add_event(pool.id, EVENT_JOB, f"Slurm job {job_id} for worker '{worker}'")

    def _report_ended(self, manager: PoolManager, pool: Pool, worker: str, state: JobState) -> None:
        cluster = pool.cluster
        detail = ENDED_HINTS.get(state.state) or (state.reason if state.reason not in ("None", "") else "")
        why = f"{state.state}, {detail}" if detail else state.state
        message = f"worker '{worker}' is gone: its Slurm job {state.job_id} ended ({why})"
        folder = pool.running.job_folder
        if state.state in ("FAILED", "COMPLETED", "OUT_OF_MEMORY") and folder:
            message += f", see {folder}/logs/{JOB_NAME_PREFIX}{pool.name}-{state.job_id}.err"
        from distributed.core import Status

        if getattr(cluster, "status", None) == Status.running and manager.registry.pool_by_id(pool.id).status.is_live:
            try:
                new_id = cluster.sync(cluster.replace_worker, worker)
                message += f"; replaced by Slurm job {new_id}" if new_id else ""
            except Exception as e:  # the pool goes on with fewer workers; the message says so
                message += f"; no replacement could be submitted ({first_error_line(str(e))})"
        manager.registry.add_event(pool.id, EVENT_ENDED, message)
        log.warning("pool %s: %s", pool.name, message)
        manager.post_notice(pool, EVENT_ENDED, message)
        self._record_jobs(manager, pool, self._state(pool))
