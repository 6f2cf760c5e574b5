"""Cancelling a job from any process of its user: the panel's Cancel, ``job(id).cancel()`` in
another notebook, ``DELETE /gpugeek/jobs/<id>``.

A job runs (or waits its turn) in the process that submitted it: a kernel blocked in its cell, a
script, the detached agent. Its pool's scheduler is what every such process is connected to, so a
cancel is a message on the scheduler's :data:`~.payload.CANCEL_TOPIC`, which each job agent of the
pool follows from its first job on; the one that runs or queues the job stops it as if it had been
interrupted (the cell ends ``cancelled`` with the reason; a queued job leaves the queue). In the
process that runs the job, the agent is told directly.
"""

from __future__ import annotations

from ..errors import GpugeekError, Phrase, Value
from ..store import JobRecord, PoolRecord, Registry, get_registry
from .agent import cancel_job
from .payload import CANCEL_TOPIC
from .transport import tell_scheduler

CONNECT_S = 5.0  # the pool's scheduler must answer within this


def request_cancel(job: JobRecord, reason: str, registry: Registry | None = None) -> None:
    """Ask whichever process runs or queues ``job`` to stop it for ``reason``; returns once the
    request is with that process (this one's agent) or with the pool's scheduler (another's)."""
    if cancel_job(job.id, reason):
        return
    from ..pools.credentials import connection_security

    registry = registry or get_registry()
    pool = registry.pool_by_id(job.pool_id)
    if not pool.status.is_live or not pool.scheduler_address:
        raise _unreachable(job, pool, f"is {pool.status.value}" if not pool.status.is_live else "has no scheduler yet")
    try:
        tell_scheduler(
            pool.scheduler_address,
            pool.name,
            CANCEL_TOPIC,
            {"job": job.id, "reason": reason},
            connect_timeout=CONNECT_S,
            security=connection_security(pool, registry),
        )
    except (OSError, TimeoutError) as e:
        answer = f"'s scheduler {pool.scheduler_address} does not answer ({str(e) or type(e).__name__})"
        raise _unreachable(job, pool, answer) from e


def _unreachable(job: JobRecord, pool: PoolRecord, why: str) -> GpugeekError:
    return GpugeekError(
        Phrase(
            "job {job} cannot be cancelled from here: its pool {pool}{why}; interrupt the process that runs it "
            "({submitter})",
            job=Value(job.id),
            pool=Value(pool.name),
            why=why if why.startswith("'") else f" {why}",
            submitter=job.submitter or "its submitter is not recorded",
        )
    )
