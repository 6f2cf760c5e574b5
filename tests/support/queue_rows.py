"""A ready pool in a registry, and jobs this process queues on it: for tests of job rows."""

from __future__ import annotations

import os
import socket

from gpugeek_jupyter.store import PoolStatus, QueuePlace, Registry, Submitter, process_started_at

ME = Submitter("notebook me.ipynb", os.getpid(), socket.gethostname(), process_started_at(os.getpid()))
POOL = "shared"


def ready_pool(registry: Registry) -> int:
    """Add a ready two-worker cpu pool to ``registry``; its id."""
    record = registry.add_pool(POOL, "local", {"gpu_type": "cpu", "count": 2}, {"on_demand": 1.0}, owner="tests")
    registry.set_pool_status(record.id, PoolStatus.READY)
    return record.id


def queue(registry: Registry, pool_id: int, job_id: str, submitter: Submitter = ME) -> QueuePlace:
    """Queue a two-rank cell job on the pool (running at once when nobody is ahead)."""
    return registry.queue_job(job_id, pool_id, POOL, "cell", "0" * 64, 2, submitter)
