"""A job's own environment variables (``env=`` / ``--env``): checked once, set in every rank.

The variables are set in each rank for that job only (a cell's are put back afterwards; a script's
worker is recycled anyway), on every backend, since they travel with the job rather than with the
pool. torchrun's own variables (:data:`.env.TORCHRUN_VARIABLES`) and ``CUDA_VISIBLE_DEVICES`` are
the launcher's to set, as under torchrun, and cannot be given this way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import Field, PerSurface, Phrase, Setting, SpecError, Value
from .env import TORCHRUN_VARIABLES

RESERVED = frozenset((*TORCHRUN_VARIABLES, "CUDA_VISIBLE_DEVICES"))
EXAMPLE_ENV = {"NCCL_DEBUG": "INFO"}


class JobEnvError(SpecError):
    """One bad variable: ``name`` and ``value`` as given, ``rule`` the rule it breaks.

    Phrased by the surface that received it, like every :class:`SpecError`:
    ``env={'RANK': '3'}: torchrun's own variables ... (e.g. env={'NCCL_DEBUG': 'INFO'})`` for Python,
    ``--env 'RANK': torchrun's own variables ... (e.g. --env NCCL_DEBUG=INFO)`` for a magic.
    """

    def __init__(self, rule: str, name: Any, value: Any = None) -> None:
        self.name = name
        subject = PerSurface(
            core=Setting(env={name: value}),
            magic=Phrase("{flag} {name}", flag=Field("env"), name=Value(name)),
        )
        super().__init__(
            Phrase("{subject}: {rule} (e.g. {example})", subject=subject),
            "env",
            value=value,
            rule=rule,
            example=EXAMPLE_ENV,
        )

    @classmethod
    def not_a_mapping(cls, env: Any) -> JobEnvError:
        """``env`` itself is not a mapping of names to values."""
        error = cls.__new__(cls)
        SpecError.__init__(
            error, field="env", value=env, rule="a mapping of variable names to values", example=EXAMPLE_ENV
        )
        error.name = None
        return error


def check_job_env(env: Mapping[Any, Any] | None) -> dict[str, str]:
    """``env`` as a plain ``{name: value}`` of strings; JobEnvError for the first bad entry."""
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise JobEnvError.not_a_mapping(env)
    checked: dict[str, str] = {}
    for name, value in env.items():
        if not isinstance(name, str) or not name.isidentifier() or not name.isascii():
            raise JobEnvError("a name must be letters, digits and '_', not starting with a digit", name, value)
        if name in RESERVED:
            raise JobEnvError(
                "torchrun's own variables are set by the launcher for each rank and cannot be overridden", name, value
            )
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise JobEnvError(f"a value must be a string, got {type(value).__name__}", name, value)
        text = str(value)
        if "\0" in text:
            raise JobEnvError("a value cannot contain a NUL character", name, value)
        checked[name] = text
    return checked


def parse_assignments(assignments: list[str]) -> dict[str, str]:
    """``["NCCL_DEBUG=INFO", "HF_HOME=/data/hf"]`` -> a dict (the form ``--env`` takes)."""
    env: dict[str, str] = {}
    for assignment in assignments:
        name, sep, value = assignment.partition("=")
        if not sep:
            raise JobEnvError("give it as NAME=VALUE", assignment)
        if not name:
            raise JobEnvError("the name before '=' is missing", assignment)
        env[name] = value
    return env
