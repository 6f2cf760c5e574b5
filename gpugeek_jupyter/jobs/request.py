"""``JobRequest``: what to run on a pool and how, checked before anything starts."""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import Phrase, Setting, SpecError
from .payload import CellCode, ScriptCode

if TYPE_CHECKING:
    from .names import CellNames


# 48 random bits: a registry of a million jobs gives a new job a taken id with odds of 1 in 2.8e8
# (at 32 bits, 50,000 cells met a taken id about one time in four)
JOB_ID_BYTES = 6


def new_job_id() -> str:
    """``job-`` and 12 hex digits, e.g. ``job-3f2a9c7b1d0e``; the registry's key for the job."""
    return f"job-{secrets.token_hex(JOB_ID_BYTES)}"


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
    ranks: tuple[int, ...] | None = None  # run on these ranks only (cells); None: every rank
    min_ranks: int | None = None  # elastic: restart on as few as this many workers when some are lost
    wait: bool = True  # a busy pool: wait in its queue (False: refused at once, naming the job holding it)
    job_id: str = field(default_factory=new_job_id)
    submitted_by: str | None = None  # who people know submitted it, when another process runs it (detached)
    # a cell's notebook values, for this process's agent to send those the ranks lack (.names)
    names: CellNames | None = None
    notices: tuple[str, ...] = ()  # told to the caller when the job starts (a name a cell left out)
    track: bool | str | None = None  # its MLflow run: None per the setting, False none, True the setting's, or a URI

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for another process (a detached job): that one holds nothing on the ranks, so the
        code carries every value."""
        state = dict(self.__dict__)
        names = state.pop("names", None)
        if names is not None and isinstance(self.code, CellCode):
            state["code"] = names.sealed(self.code)
        state["names"] = None
        return state

    @property
    def kind(self) -> str:
        return "script" if isinstance(self.code, ScriptCode) else "cell"

    def _check_track(self) -> None:
        """``track``: None, a bool, or a tracking URI; True needs the setting to name one."""
        example = "http://127.0.0.1:5000"
        if self.track is None or self.track is False:
            return
        if isinstance(self.track, str):
            if not self.track.strip() or any(c.isspace() for c in self.track):
                raise SpecError(field="track", value=self.track, rule="an MLflow tracking URI", example=example)
            return
        if self.track is not True:
            raise SpecError(
                field="track", value=self.track, rule="True, False or an MLflow tracking URI", example=example
            )
        from ..config import get_config

        if not get_config().mlflow_tracking_uri:
            raise SpecError(
                Phrase(
                    "{field} needs a tracking server: set GPUGEEK_MLFLOW_URI "
                    "(GpugeekConfig.mlflow_tracking_uri), or name one (e.g. {example})"
                ),
                field="track",
                value=self.track,
                rule="a tracking server",
                example=example,
            )

    def validate(self) -> None:
        if not isinstance(self.wait, bool):
            raise SpecError(field="wait", value=self.wait, rule="True or False", example=False)
        if self.timeout is not None and (
            isinstance(self.timeout, bool) or not isinstance(self.timeout, int | float) or not self.timeout > 0
        ):
            raise SpecError(field="timeout", value=self.timeout, rule="a number of seconds > 0", example=600)
        self._check_track()
        if isinstance(self.max_restarts, bool) or not isinstance(self.max_restarts, int) or self.max_restarts < 0:
            raise SpecError(field="max_restarts", value=self.max_restarts, rule="a whole number >= 0", example=2)
        from .job_env import check_job_env

        self.env = check_job_env(self.env)
        if self.amp not in (None, "bf16", "fp16"):
            raise SpecError(field="amp", value=self.amp, rule="bf16 or fp16", example="bf16")
        if self.min_ranks is not None:
            if isinstance(self.min_ranks, bool) or not isinstance(self.min_ranks, int) or self.min_ranks < 1:
                raise SpecError(field="min_ranks", value=self.min_ranks, rule="a whole number >= 1", example=2)
            if self.max_restarts < 1:
                raise SpecError(
                    Phrase(
                        "{field} {value} needs restarts: a smaller world is one (e.g. {restarts})",
                        restarts=Setting(min_ranks=self.min_ranks, max_restarts=2),
                    ),
                    field="min_ranks",
                    value=self.min_ranks,
                    rule="restarts",
                )
            if self.ranks is not None:
                raise SpecError(field="min_ranks", value=self.min_ranks, rule="for jobs on every rank, not with ranks")
        if self.ranks is not None and self.kind == "script":
            raise SpecError(
                field="ranks", value=",".join(map(str, self.ranks)), rule="for cells only (a script runs on every rank)"
            )

    def world_size(self, pool_size: int) -> int:
        """How many ranks it runs on, in a pool of ``pool_size`` workers."""
        return len(self.ranks) if self.ranks is not None else pool_size

    def check_ranks(self, world_size: int) -> None:
        """The chosen ranks exist in a pool of ``world_size`` ranks."""
        beyond = [r for r in self.ranks or () if r >= world_size]
        if beyond:
            raise SpecError(
                field="ranks",
                value=",".join(map(str, self.ranks or ())),
                rule=f"ranks of this pool, 0 to {world_size - 1}",
                example="0" if world_size == 1 else f"0,1-{world_size - 1}" if world_size > 2 else "0,1",
            )


_SPAN = re.compile(r"(\d+)(?:-(\d+))?")


def parse_ranks(spec: str | Sequence[int] | None) -> tuple[int, ...] | None:
    """``"0,2-3"`` (or ``[0, 2, 3]``) -> ``(0, 2, 3)``; ``None`` -> every rank. A bad spec is a
    ``SpecError`` naming it.

    >>> parse_ranks("0,2-3")
    (0, 2, 3)
    """
    if spec is None:
        return None
    example = "0,2-3"
    if isinstance(spec, str):
        chosen: set[int] = set()
        for part in spec.split(","):
            span = _SPAN.fullmatch(part.strip())
            if span is None:
                raise SpecError(field="ranks", value=spec, rule="rank numbers and ranges", example=example)
            first, last = int(span.group(1)), int(span.group(2) or span.group(1))
            if last < first:
                raise SpecError(field="ranks", value=spec, rule="ranges from low to high", example=example)
            chosen.update(range(first, last + 1))
        return tuple(sorted(chosen))
    numbers = [r for r in spec if isinstance(r, int) and not isinstance(r, bool)] if isinstance(spec, Sequence) else []
    if numbers and len(numbers) == len(spec):
        if any(r < 0 for r in numbers):
            raise SpecError(field="ranks", value=list(spec), rule="rank numbers >= 0", example=[0, 2, 3])
        return tuple(sorted(set(numbers)))
    raise SpecError(field="ranks", value=spec, rule="rank numbers and ranges", example=example)
