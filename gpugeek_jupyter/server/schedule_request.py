"""``/gpugeek/schedules``: the body of ``POST`` (a script run every day, or by cron, by the user's
agent) and what each route answers, as plain JSON-ready data; errors phrased for JSON.

>>> parse_schedule_body(b'{"script_path": "train.py", "every": "1d", "gpu_type": "cpu", "count": 2}')
{'script_path': 'train.py', 'every': '1d', 'gpu_type': 'cpu', 'count': 2}
"""

from __future__ import annotations

from typing import Any

from ..errors import Phrase, SpecError, Surface, phrased_for
from .launch_request import _LIST, _NUMBER, _OBJECT, _STRING, typed_body

# field -> (its JSON type, whether null is allowed, a valid example)
SCHEDULE_FIELDS: dict[str, tuple[str, bool, Any]] = {
    "script_path": (_STRING, False, "train.py"),
    "every": (_STRING, True, "1d"),
    "cron": (_STRING, True, "0 2 * * *"),
    "timezone": (_STRING, True, "Europe/Berlin"),
    "resume": (_STRING, True, "latest"),
    "pool": (_STRING, True, "train"),
    "name": (_STRING, True, "daily"),
    "args": (_LIST, True, ["--epochs", "1"]),
    "hyperparams": (_OBJECT, True, {"lr": 0.001}),
    "env": (_OBJECT, True, {"NCCL_DEBUG": "INFO"}),
    "timeout": (_NUMBER, True, 3600),
    "max_restarts": (_NUMBER, True, 2),
    "overlap": (_STRING, True, "skip"),
    "max_failures": (_NUMBER, True, 3),
    "checkpoints": (_STRING, True, "/shared/ckpts"),
    "gpu_type": (_STRING, True, "cpu"),
    "count": (_NUMBER, True, 2),
    "backend": (_STRING, True, "local"),
    "budget": (_NUMBER, True, 5),
    "spot_fraction": (_NUMBER, True, 0.5),
    "walltime": (_STRING, True, "04:00:00"),
}
_BODY_EXAMPLE = '{"script_path": "train.py", "every": "1d", "gpu_type": "cpu", "count": 2}'
_ACTIONS = ("pause", "resume")


def parse_schedule_body(body: bytes) -> dict[str, Any]:
    """The fields of a new schedule; SpecError (with ``field``) otherwise, phrased for JSON."""
    with phrased_for(Surface.SERVER):
        fields = typed_body(body, SCHEDULE_FIELDS, "schedule", _BODY_EXAMPLE)
        if "script_path" not in fields:
            raise SpecError(
                Phrase("{field} must be given: the script each run runs (e.g. {example})"),
                field="script_path",
                rule="given",
                example="train.py",
            )
        if any(not isinstance(a, str) for a in fields.get("args") or []):
            raise SpecError(field="args", value=fields["args"], rule="a list of strings", example=["--epochs", "1"])
    return fields


def create(fields: dict[str, Any]) -> dict[str, Any]:
    """Make the schedule (the agent starts if need be); ``{"schedule": model}``."""
    from ..jobs import script_request
    from ..schedules import create_schedule, pool_options, schedule_model

    with phrased_for(Surface.SERVER):
        request = script_request(
            fields["script_path"],
            args=fields.get("args") or (),
            hyperparams=fields.get("hyperparams"),
            timeout=fields.get("timeout"),
            max_restarts=fields.get("max_restarts") or 0,
            env=fields.get("env"),
        )
        request.submitted_by = "the Jupyter server"
        launch = {k: fields.get(k) for k in ("gpu_type", "count", "backend", "budget", "spot_fraction", "walltime")}
        schedule = create_schedule(
            request,
            every=fields.get("every"),
            cron=fields.get("cron"),
            timezone=fields.get("timezone") or "UTC",
            resume=fields.get("resume", "latest"),
            pool=fields.get("pool"),
            name=fields.get("name"),
            overlap=fields.get("overlap") or "skip",
            max_failures=fields.get("max_failures") or 3,
            checkpoints=fields.get("checkpoints"),
            pool_options=pool_options(**launch),
            created_by="the Jupyter server",
        )
        return {"schedule": schedule_model(schedule.record())}


def listing() -> dict[str, Any]:
    from ..schedules import list_schedules

    return {"schedules": list_schedules()}


def one(schedule_id: str) -> dict[str, Any]:
    from ..schedules import find_schedule, schedule_model

    with phrased_for(Surface.SERVER):
        return {"schedule": schedule_model(find_schedule(schedule_id).record())}


def act(schedule_id: str, action: str) -> dict[str, Any]:
    """``pause``, ``resume`` or ``delete``; the schedule as it is then."""
    from ..errors import NotFoundError
    from ..schedules import find_schedule, schedule_model

    with phrased_for(Surface.SERVER):
        if action not in (*_ACTIONS, "delete"):
            raise NotFoundError(f"no action {action!r} on a schedule (pause or resume, e.g. POST .../pause)")
        schedule = find_schedule(schedule_id)
        getattr(schedule, action)()
        return {"schedule": schedule_model(schedule.record())}
