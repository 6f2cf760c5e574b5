"""One exception hierarchy for the whole package.

Every error a user can cause derives from :class:`GpugeekError` and carries a one-line message that
names the bad value and shows a valid example. Adapters translate these classes, and only these:
magics raise ``UsageError`` for :class:`SpecError`, the server maps :attr:`GpugeekError.http_status`.
"""

from __future__ import annotations


class GpugeekError(Exception):
    """Base class; ``http_status`` is what the server extension answers with."""

    http_status = 500


class SpecError(GpugeekError, ValueError):
    """A pool, job or price specification is invalid (bad user input)."""

    http_status = 400

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NotFoundError(GpugeekError, LookupError):
    """A pool or job name/id that the registry does not know."""

    http_status = 404


class ConflictError(GpugeekError):
    """The request clashes with existing state (e.g. a pool name already in use)."""

    http_status = 409


class BackendUnavailableError(GpugeekError):
    """The backend cannot provide what was asked (no such GPU here, no kubeconfig, ...)."""

    http_status = 422


class PoolStartError(GpugeekError):
    """A pool was asked for correctly but failed to come up."""

    http_status = 502


class JobFailedError(GpugeekError):
    """A distributed job ended with a failure on at least one rank."""

    http_status = 500


class JobTimeoutError(JobFailedError):
    """A job ran past its ``--timeout``."""


class JobInterruptedError(JobFailedError):
    """The user interrupted a running job."""


class BudgetExceededError(GpugeekError):
    """A pool spent its whole budget and was stopped."""

    http_status = 402
