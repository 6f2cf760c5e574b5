"""Training metrics from the ranks: ``gg.log(step=..., loss=...)``, kept with the job, read as a table.

On a rank, :func:`log_values` checks the values and hands them to the job's
:class:`~.capture.Forwarder`, which buffers them and sends them on the rank's output topic at most
every ``METRICS_INTERVAL_S`` (or every ``METRICS_BATCH`` rows), and always before the rank answers:
``{"job", "launch", "rank", "seq", "metrics": [[step, time, name, value], ...]}``. A call costs a
check and an append (no collective, no I/O); the rank never waits for the notebook.

The driver (:class:`~.watch.AttemptWatch`) writes each batch to the job's folder beside the ranks'
logs (:meth:`~.logs.JobLogs.write_metrics`, ``metrics.jsonl``), bounded: past ``METRICS_ROWS / 2``
rows a rank keeps every second step, then every fourth, and so on
(:meth:`~.logs.MetricsFile.stride`), so a long run keeps its whole course, its start at full grain.
:func:`metrics_frame` reads it back as a tidy :class:`pandas.DataFrame` (``job, attempt, rank,
step, time, name, value``), which ``result.metrics()``, ``gpugeek_jupyter.job(id).metrics()`` and
``GET /gpugeek/jobs/<id>/metrics`` give; a detached job's event stream carries each batch too
(``kind`` ``metrics``).

>>> for step in range(100):                                # doctest: +SKIP
...     loss = train_step()
...     gg.log(step=step, loss=loss, lr=sched.get_last_lr()[0])
>>> result.metrics().query("name == 'loss'").groupby("step").value.mean()   # doctest: +SKIP

A NaN or an infinity is kept (a NaN is a gap in a chart, ``null`` in JSON). Outside a job (a cell
tried locally) ``gg.log`` checks its values and keeps nothing.
"""

from __future__ import annotations

import json
import logging
import math
import operator
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .logs import METRICS_FILE_NAME, Row, logs_root

if TYPE_CHECKING:
    import pandas

log = logging.getLogger(__name__)

METRICS_FILE = METRICS_FILE_NAME  # one line per batch: {"attempt", "rank", "rows": [[step, time, name, value]]}
COLUMNS = ("job", "attempt", "rank", "step", "time", "name", "value")


def check_values(step: Any, values: Mapping[str, Any], now: float | None = None) -> list[Row]:
    """The rows ``gg.log(step=..., **values)`` stands for, or a ``TypeError``/``ValueError`` naming
    the bad value.

    >>> check_values(3, {"loss": 0.25}, now=1.0)
    [(3, 1.0, 'loss', 0.25)]
    >>> check_values(3, {"loss": "high"})
    Traceback (most recent call last):
    TypeError: gg.log: loss must be a number, got 'high' (e.g. gg.log(step=3, loss=0.25))
    """
    try:
        step_number = operator.index(step)
    except TypeError:
        step_number = -1
    if isinstance(step, bool) or step_number < 0:
        raise ValueError(f"gg.log: step must be a whole number >= 0, got {step!r} (e.g. gg.log(step=10, loss=0.25))")
    if not values:
        raise ValueError(f"gg.log: no value to log at step {step_number} (e.g. gg.log(step={step_number}, loss=0.25))")
    at = time.time() if now is None else now
    rows: list[Row] = []
    for name, value in values.items():
        rows.append((step_number, at, name, _number(name, value, step_number)))
    return rows


def _number(name: str, value: Any, step: int) -> float:
    if not isinstance(value, (str, bytes)) and value is not None:
        try:
            return float(value)  # int, float, numpy scalars, one-element tensors
        except (TypeError, ValueError, RuntimeError):
            pass
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    raise TypeError(f"gg.log: {name} must be a number, got {shown} (e.g. gg.log(step={step}, {name}=0.25))")


def log_values(step: Any, values: Mapping[str, Any]) -> None:
    """``gg.log``: hand the rows to the running job's forwarder (checked; nothing kept outside a job)."""
    from . import capture

    rows = check_values(step, values)
    forwarder = capture.current_forwarder()
    if forwarder is not None:
        forwarder.metrics(rows)


def log_metrics(step: int, **values: Any) -> None:
    """``gpugeek_jupyter.log(step=..., **values)``: ``gg.log`` for a script run as a job (which has
    no ``gg``); the same values, kept with the job.

    >>> import gpugeek_jupyter
    >>> gpugeek_jupyter.log(step=0, loss=2.3)                 # outside a job: checked, not kept
    """
    log_values(step, values)


# -- the driver's side ------------------------------------------------------------------------------
def read_rows(directory: Path) -> Iterator[tuple[int, int, int, float, str, float]]:
    """``(attempt, rank, step, time, name, value)`` of every row kept in a job's folder, in the order
    they arrived (a line being written is skipped: the next read has it)."""
    try:
        file = (directory / METRICS_FILE).open("r", encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    with file:
        for line in file:
            if not line.endswith("\n"):
                break
            yield from batch_rows(line, directory / METRICS_FILE)


def batch_rows(line: str, path: Path) -> list[tuple[int, int, int, float, str, float]]:
    """The ``(attempt, rank, step, time, name, value)`` rows of one line of ``path`` (one batch); a
    line that cannot be read is left out, with a warning naming ``path``."""
    try:
        batch = json.loads(line)
        attempt, rank = int(batch["attempt"]), int(batch["rank"])
        return [
            (attempt, rank, int(step), float(at), str(name), float(value)) for step, at, name, value in batch["rows"]
        ]
    except (ValueError, KeyError, TypeError) as e:
        log.warning("%s: a line of metrics cannot be read and is left out: %s", path, e)
        return []


def metric_record(attempt: int, rank: int, step: int, at: float, name: str, value: float) -> dict[str, Any]:
    """One row as REST gives it (a NaN or an infinity is ``None``)."""
    return {
        "attempt": attempt,
        "rank": rank,
        "step": step,
        "time": at,
        "name": name,
        "value": value if math.isfinite(value) else None,
    }


def metrics_frame(job_id: str) -> pandas.DataFrame:
    """Every value the ranks of job ``job_id`` logged with ``gg.log``, one row each (``job, attempt,
    rank, step, time, name, value``; ``time`` in UTC); empty, with those columns, when none."""
    import pandas

    rows = [(job_id, *row) for row in read_rows(logs_root() / job_id)]
    frame = pandas.DataFrame(rows, columns=list(COLUMNS))
    frame = frame.astype({"attempt": "int64", "rank": "int64", "step": "int64", "name": "str", "value": "float64"})
    frame["time"] = pandas.to_datetime(frame["time"].astype("float64"), unit="s", utc=True)
    return frame


def metrics_records(job_id: str, name: str | None = None) -> list[dict[str, Any]]:
    """The same rows as JSON-ready dicts (a NaN or an infinity is ``None``), for REST."""
    return [metric_record(*row) for row in read_rows(logs_root() / job_id) if name is None or row[4] == name]
