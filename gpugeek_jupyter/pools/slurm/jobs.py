"""A Slurm pool's batch jobs as its registry events record them (``slurm-job`` when one was
submitted for a worker, ``worker-ended`` when one ended), and cancelling them: for cost reports
(``sacct -j``), a pool taken back by a new agent, and its keeper (:mod:`.kept_scheduler`).
"""

from __future__ import annotations

import re
import subprocess

from ...store import Registry

EVENT_JOB = "slurm-job"
EVENT_ENDED = "worker-ended"
COMMAND_TIMEOUT_S = 30.0

_JOB_EVENT = re.compile(r"^Slurm job (\d+) for worker '([^']*)'")
_ENDED_EVENT = re.compile(r"^worker '[^']*' is gone: its Slurm job (\d+) ended")


def slurm_jobs_by_worker(registry: Registry, pool_id: int) -> dict[str, str]:
    """Worker name -> the Slurm job id it runs in now, from pool ``pool_id``'s ``slurm-job`` events
    (the newest job of each name: a replaced worker's)."""
    jobs: dict[str, str] = {}
    for event in registry.events(pool_id):
        if event.get("kind") == EVENT_JOB and (match := _JOB_EVENT.match(str(event.get("message", "")))):
            jobs[match.group(2)] = match.group(1)
    return jobs


def scancel_pool_jobs(registry: Registry, pool_id: int) -> list[str]:
    """Cancel every Slurm job pool ``pool_id`` has (ended ones are ignored by scancel); their ids."""
    ids = slurm_job_ids(registry, pool_id)
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, timeout=COMMAND_TIMEOUT_S, check=False)
    return ids


def slurm_job_ids(registry: Registry, pool_id: int, start: float | None = None, end: float | None = None) -> list[str]:
    """The Slurm job ids pool ``pool_id`` had, in submission order (from its ``slurm-job`` events),
    for cost reports: ``sacct -j <ids>`` gives what the site charged. With ``start``/``end`` (a
    job's time on the pool), only those that ran then: recorded by ``end``, not ended before ``start``."""
    ids: list[str] = []
    ended_before: set[str] = set()
    for event in registry.events(pool_id):
        message, at = str(event.get("message", "")), float(event.get("at") or 0.0)
        if event.get("kind") == EVENT_JOB and (match := _JOB_EVENT.match(message)):
            if (end is None or at <= end) and match.group(1) not in ids:
                ids.append(match.group(1))
        elif event.get("kind") == EVENT_ENDED and (match := _ENDED_EVENT.match(message)):
            if start is not None and at < start:
                ended_before.add(match.group(1))
    return [i for i in ids if i not in ended_before]
