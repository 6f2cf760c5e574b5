"""Making a schedule (checked whole before anything is recorded) and its handle.

What to run is captured when the schedule is made, as for a detached job: a script's source, or a
cell's code with the notebook objects it uses; each run is a detached job made from it, with its
own id, record and cost. Where: an existing kept pool (``pool=``), or a pool made for each run
(``gpu_type=``, ``count=`` and the other launch options) and stopped after it, so nothing idles
between runs; a budget applies to each run's pool.
"""

from __future__ import annotations

import json
import pickle
import secrets
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..config import get_config
from ..errors import ConflictError, NotFoundError, PerSurface, Phrase, SpecError, Value
from ..jobs.helpers import SCHEDULED_CHECKPOINT_DIR
from ..spec import PoolSpec
from ..store import RunStatus, ScheduleRecord, ScheduleRun, ScheduleStatus, get_registry, make_private_directory
from .timing import Timing, check_cron, check_timezone, parse_every

OVERLAP = ("skip", "queue", "replace")
RESUME = ("latest", None)
DEFAULT_MAX_FAILURES = 3
CHECKPOINT_DIR_VARIABLE = SCHEDULED_CHECKPOINT_DIR  # the folder a run's gg.checkpoint() uses
RESUME_FROM_VARIABLE = "GPUGEEK_RESUME_FROM"  # the newest whole checkpoint of the previous runs ("" none)


def new_schedule_id() -> str:
    return f"sched-{secrets.token_hex(4)}"


def schedules_root() -> Path:
    """Where schedules keep their runs' checkpoints by default: beside the registry."""
    return Path(get_config().registry_path).expanduser().parent / "gpugeek-schedules"


def timing_of(record: ScheduleRecord) -> Timing:
    return Timing(every_s=record.every_s, cron=record.cron, timezone=record.timezone, anchor=record.created_at)


def create_schedule(
    request: Any,
    *,
    every: Any = None,
    cron: Any = None,
    timezone: Any = "UTC",
    resume: Any = "latest",
    pool: Any = None,
    name: Any = None,
    overlap: Any = "skip",
    max_failures: Any = DEFAULT_MAX_FAILURES,
    checkpoints: Any = None,
    pool_options: Mapping[str, Any] | None = None,
    created_by: str | None = None,
) -> Schedule:
    """Record a schedule running ``request`` (a :class:`~gpugeek_jupyter.jobs.request.JobRequest`)
    and make sure the agent runs, so its first occurrence comes on time."""
    every_s, cron_text = _check_when(every, cron)
    zone = check_timezone(timezone)
    if resume not in RESUME:
        raise SpecError(field="resume", value=resume, rule="'latest' or None", example="latest")
    if overlap not in OVERLAP:
        raise SpecError(field="overlap", value=overlap, rule="skip, queue or replace", example="skip")
    if isinstance(max_failures, bool) or not isinstance(max_failures, int) or max_failures < 1:
        raise SpecError(field="max_failures", value=max_failures, rule="a whole number >= 1", example=3)
    schedule_id = new_schedule_id()
    pool_name, spec_json, schedule_name = _check_where(pool, pool_options or {}, name)
    folder = _check_checkpoints(checkpoints, schedule_id)
    now = time.time()
    timing = Timing(every_s=every_s, cron=cron_text, timezone=zone, anchor=now)
    record = get_registry().add_schedule(
        id=schedule_id,
        name=schedule_name,
        kind=request.kind,
        request=pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL),
        every_s=every_s,
        cron=cron_text,
        timezone=zone,
        resume=resume,
        checkpoints=folder,
        pool_name=pool_name,
        pool_spec_json=spec_json,
        overlap=overlap,
        max_failures=max_failures,
        created_at=now,
        next_run_at=now if every_s is not None else timing.next_after(now),  # an interval's first run is now
        created_by=created_by,
    )
    _wake_agent()
    return Schedule(record.id)


def _check_when(every: Any, cron: Any) -> tuple[float | None, str | None]:
    if (every is None) == (cron is None):
        raise SpecError(
            Phrase("give one of {every} or {cron} (e.g. {example})", every=_field("every"), cron=_field("cron")),
            field="every",
            value=every,
            rule="one of every or cron",
            example="1d",
        )
    if every is not None:
        return parse_every(every), None
    return None, check_cron(cron)


def _field(name: str) -> Any:
    from ..errors import Field

    return Field(name)


def _check_where(pool: Any, options: Mapping[str, Any], name: Any) -> tuple[str | None, str | None, str]:
    """(pool name, made pool's spec, schedule name): an existing kept pool, or a pool spec for each run."""
    from ..detached.service import AGENT_OWNER

    if pool is not None and options:
        raise SpecError(
            Phrase(
                "{pool} runs on an existing pool, so {options} cannot apply; give one or the other (e.g. {example})",
                pool=_field("pool"),
                options=", ".join(sorted(options)),
            ),
            field="pool",
            value=pool,
            rule="a kept pool, or launch options",
            example="train",
        )
    if pool is not None:
        if not isinstance(pool, str) or not pool:
            raise SpecError(field="pool", value=pool, rule="the name of a kept pool", example="train")
        try:
            record = get_registry().live_pool(pool)
        except NotFoundError:
            raise NotFoundError(
                Phrase(
                    "no running pool named {name} for the schedule ({how})",
                    name=Value(pool),
                    how=PerSurface(
                        core="launch it kept first, or give launch options for a pool made for each run",
                        python="launch it with gpugeek_jupyter.launch(..., keep=True), or give gpu_type= and "
                        "count= for a pool made for each run",
                        magic="launch it with %gpugeek_launch --keep ..., or give --gpu-type and --count for a "
                        "pool made for each run",
                        server='launch it with POST /gpugeek/pools {"keep": true}, or give "gpu_type" and "count" '
                        "for a pool made for each run",
                    ),
                )
            ) from None
        if not record.owner.startswith(AGENT_OWNER):
            raise ConflictError(
                Phrase(
                    "pool {name} ends with the process that launched it ({owner}), and the schedule's runs "
                    "with it; {how}",
                    name=Value(pool),
                    owner=record.owner,
                    how=PerSurface(
                        core="use a kept pool",
                        python="use a kept pool: gpugeek_jupyter.launch(..., keep=True)",
                        magic="use a kept pool: %gpugeek_launch --keep ...",
                        server='use a kept pool: POST /gpugeek/pools {"keep": true}',
                    ),
                )
            )
        schedule_name = _check_schedule_name(name if name is not None else pool)
        return pool, None, schedule_name
    schedule_name = _check_schedule_name(name if name is not None else f"schedule-{secrets.token_hex(2)}")
    # each run's pool is called <schedule>-<run>: the longest such name must be a valid pool name
    spec = PoolSpec.create(**{**dict(options), "name": f"{schedule_name}-99999999"})
    values = spec.to_dict()
    values.pop("name", None)
    return None, json.dumps(values), schedule_name


def _check_schedule_name(name: Any) -> str:
    import re

    text = name.strip() if isinstance(name, str) else ""
    if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,52}[a-z0-9])?", text):
        raise SpecError(
            field="name",
            value=name,
            rule="lowercase letters, digits and '-', 1-54 characters, starting and ending with a letter or digit",
            example="daily-update",
        )
    return text


def _check_checkpoints(checkpoints: Any, schedule_id: str) -> str:
    if checkpoints is None:
        return str(schedules_root() / schedule_id / "checkpoints")
    if not isinstance(checkpoints, str | Path) or not str(checkpoints):
        raise SpecError(
            field="checkpoints", value=checkpoints, rule="a folder or URL every rank sees", example="/shared/ckpts"
        )
    text = str(checkpoints)
    return text if "://" in text else str(Path(text).expanduser().resolve())


def _wake_agent() -> None:
    """The agent runs schedules: start it when none runs (it picks new schedules up within a tick)."""
    from ..detached.connection import connect

    connect()


def checkpoint_folder(record: ScheduleRecord, run_id: int) -> str:
    """Where run ``run_id`` keeps its checkpoints: the schedule's folder when it resumes from the
    latest, else a folder of the run's own (it starts afresh)."""
    base = record.checkpoints
    folder = base if record.resume == "latest" else f"{base.rstrip('/')}/run-{run_id}"
    if "://" not in folder:
        make_private_directory(Path(folder))
    return folder


class Schedule:
    """A schedule by its id: its record, its runs, pause, resume and delete.

    >>> daily = gpugeek_jupyter.schedule(script_path="train.py", every="1d", gpu_type="cpu", count=2)  # doctest: +SKIP
    >>> [(r.status.value, r.job_id) for r in daily.runs()]          # doctest: +SKIP
    [('succeeded', 'job-1a2b3c4da910')]
    """

    def __init__(self, schedule_id: str) -> None:
        self.id = schedule_id

    def __repr__(self) -> str:
        record = self.record()
        return f"<Schedule {record.name} ({self.id}) {record.status.value}>"

    def record(self) -> ScheduleRecord:
        return get_registry().schedule(self.id)

    def runs(self, limit: int = 50) -> list[ScheduleRun]:
        """Its runs, newest first (skipped occurrences included)."""
        return get_registry().schedule_runs(self.id, limit=limit)

    def pause(self, reason: str = "paused by the user") -> Schedule:
        """No more runs until :meth:`resume` (a run in progress goes on to its end)."""
        self._live()
        get_registry().set_schedule_status(self.id, ScheduleStatus.PAUSED, reason)
        return self

    def resume(self) -> Schedule:
        """Runs again from its next occurrence (what came due while paused is not run); the failures
        in a row count from 0 again."""
        record = self._live()
        get_registry().set_schedule_status(
            self.id, ScheduleStatus.ACTIVE, None, next_run_at=timing_of(record).next_after(time.time())
        )
        _wake_agent()
        return self

    def delete(self) -> None:
        """No more runs; its record and runs are kept (their jobs and costs stay explained), unlisted."""
        self._live()
        get_registry().set_schedule_status(self.id, ScheduleStatus.DELETED, "deleted by the user")

    def _live(self) -> ScheduleRecord:
        record = self.record()
        if record.status is ScheduleStatus.DELETED:
            raise NotFoundError(Phrase("schedule {name} was deleted", name=Value(record.name)))
        return record


def find_schedule(id_or_name: str) -> Schedule:
    """The schedule of that id or live name (NotFoundError naming it)."""
    return Schedule(get_registry().schedule(id_or_name).id)


def schedule_model(record: ScheduleRecord, runs: Sequence[ScheduleRun] | None = None) -> dict[str, Any]:
    """A schedule as plain JSON-ready data (REST, %gpugeek_schedules, the panel): when, where, its
    next run, and its last run's outcome and cost."""
    registry = get_registry()
    runs = list(runs) if runs is not None else registry.schedule_runs(record.id, limit=20)
    last = next((r for r in runs if r.status is not RunStatus.SKIPPED), runs[0] if runs else None)
    timing = timing_of(record)
    return {
        "id": record.id,
        "name": record.name,
        "kind": record.kind,
        "status": record.status.value,
        "reason": record.reason,
        "when": timing.describe(),
        "every_s": record.every_s,
        "cron": record.cron,
        "timezone": record.timezone,
        "next_run_at": record.next_run_at if record.status is ScheduleStatus.ACTIVE else None,
        "pool": record.pool_name,
        "pool_spec": json.loads(record.pool_spec_json) if record.pool_spec_json else None,
        "overlap": record.overlap,
        "resume": record.resume,
        "checkpoints": record.checkpoints,
        "max_failures": record.max_failures,
        "failures_in_a_row": record.failures,
        "last_run": run_model(last) if last is not None else None,
        "runs": [run_model(r) for r in runs],
    }


def run_model(run: ScheduleRun) -> dict[str, Any]:
    return {
        "id": run.id,
        "due_at": run.due_at,
        "status": run.status.value,
        "missed": run.missed,
        "job_id": run.job_id,
        "pool": run.pool_name,
        "resumed_from": run.resumed_from,
        "reason": run.reason,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
        "cost_usd": run_cost(run),
    }


def run_cost(run: ScheduleRun) -> float | None:
    """What the run's job has cost so far (None: it ran no job)."""
    if run.job_id is None:
        return None
    from ..cost.ledger import job_cost

    try:
        return round(float(job_cost(get_registry(), run.job_id).total_usd), 6)
    except NotFoundError:
        return None
