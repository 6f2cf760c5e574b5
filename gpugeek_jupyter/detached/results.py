"""A detached job's result on disk, so that any process of the user can read it after the job.

``<job logs>/<job id>/result.pickle`` (0600): the :class:`~gpugeek_jupyter.jobs.result.JobResult`,
every rank's return value included, pickled with cloudpickle. A result larger than
``GpugeekConfig.result_bytes`` is kept without its values, and says so when they are asked for.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import cloudpickle

from ..config import get_config
from ..errors import GpugeekError, Phrase, Setting, Value
from ..jobs.logs import logs_root
from ..jobs.result import JobResult
from ..store import write_private_file

log = logging.getLogger(__name__)

RESULT_FILE = "result.pickle"


def result_path(job_id: str) -> Path:
    return logs_root() / job_id / RESULT_FILE


def save_result(result: JobResult) -> None:
    """Keep ``result`` for other processes (its values dropped past ``result_bytes``, saying so)."""
    limit = get_config().result_bytes
    blob = cloudpickle.dumps(result)
    if len(blob) > limit:
        log.warning(
            "job %s: its result is %d bytes, over result_bytes (%d): kept without values",
            result.job_id,
            len(blob),
            limit,
        )
        result.values = []
        result.values_dropped = (
            f"the ranks' values were {len(blob)} bytes, over the limit of {limit} (GpugeekConfig.result_bytes, "
            "GPUGEEK_RESULT_BYTES); save large results to a file from the job instead"
        )
        blob = cloudpickle.dumps(result)
    path = result_path(result.job_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = path.with_suffix(".partial")  # a reader never sees half a result: it appears whole, renamed
    partial.unlink(missing_ok=True)
    write_private_file(partial, blob)
    os.replace(partial, path)


def load_result(job_id: str) -> JobResult | None:
    """The kept result of job ``job_id``; None when there is none (yet)."""
    path = result_path(job_id)
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    result: JobResult = cloudpickle.loads(blob)
    return result


def values_of(result: JobResult) -> list[object]:
    """Every rank's value; a clear error when they were too large to keep."""
    if result.values_dropped:
        raise GpugeekError(
            Phrase(
                "job {job} has no values to give back: {why} (e.g. {example})",
                job=Value(result.job_id),
                why=result.values_dropped,
                example=Setting(result_bytes=2 * get_config().result_bytes),
            )
        )
    return result.values
