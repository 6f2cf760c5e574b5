"""``JobRequest``: what to run on a pool and how, checked before anything starts."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecError
from .payload import CellCode, ScriptCode


def new_job_id() -> str:
    return f"job-{secrets.token_hex(4)}"


@dataclass
class JobRequest:
    """What to run and how; built by :func:`~.cell.prepare_cell` or :func:`~.script.prepare_script`."""

    code: CellCode | ScriptCode
    sha256: str
    hyperparams: dict[str, Any] = field(default_factory=dict)
    timeout: float | None = None
    max_restarts: int = 0
    stream: bool = True
    amp: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # the job's own variables (checked by job_env)

    @property
    def kind(self) -> str:
        return "script" if isinstance(self.code, ScriptCode) else "cell"

    def validate(self) -> None:
        if self.timeout is not None and not self.timeout > 0:
            raise SpecError(field="timeout", value=self.timeout, rule="a number of seconds > 0", example=600)
        if not isinstance(self.max_restarts, int) or self.max_restarts < 0:
            raise SpecError(field="max_restarts", value=self.max_restarts, rule="a whole number >= 0", example=2)
        from .job_env import check_job_env

        self.env = check_job_env(self.env)
        if self.amp not in (None, "bf16", "fp16"):
            raise SpecError(field="amp", value=self.amp, rule="bf16 or fp16", example="bf16")
