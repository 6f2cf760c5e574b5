"""``JobResult``: what a job gives back, and the errors a failed job raises in a notebook."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import JobFailedError, JobInterruptedError, JobTimeoutError
from ..store import JobStatus

if TYPE_CHECKING:
    import pandas


def labelled_traceback(rank: int, traceback: str) -> list[str]:
    """A rank's traceback as the notebook shows it: each line labelled ``[rank N]``."""
    return [f"[rank {rank}] {line}" for line in traceback.rstrip("\n").splitlines()]


@dataclass
class RankReport:
    """How one rank ended."""

    rank: int
    host: str
    address: str
    status: str  # ok | failed | cancelled | died | killed
    exit_code: int | None
    error: str | None = None
    traceback: str | None = None
    peer_failure: bool = False

    def describe(self) -> str:
        where = f"rank {self.rank} (host {self.host})"
        if self.status == "died":
            return f"{where}: {self.error}"
        if self.status == "killed":
            return f"{where} did not stop when asked (worker process ended and restarted)"
        if self.status == "cancelled":
            return f"{where} stopped"
        if self.peer_failure:
            return f"{where} stopped (a peer went away)"
        return f"{where}: {self.error}"


@dataclass
class JobResult:
    """The outcome of a job: ``ok``, one exit code and one value per rank, timing, and why it failed.

    >>> result = job.run(script_path="train.py", hyperparams={"lr": 3e-5})   # doctest: +SKIP
    >>> result.ok, result.returncodes, result.duration_s                     # doctest: +SKIP
    (True, [0, 0], 4.2)
    """

    job_id: str
    pool: str
    kind: str  # cell | script
    status: JobStatus
    returncodes: list[int | None]
    values: list[Any]
    duration_s: float
    restarts: int = 0
    failure: str | None = None  # one line
    timed_out: bool = False
    failed_rank: int | None = None
    traceback: str | None = None  # the failing rank's, user frames only
    ranks: list[RankReport] = field(default_factory=list)
    output: list[str] = field(default_factory=list)  # everything each rank wrote, by rank
    where: str | None = None  # where the ranks were when the job timed out or was stuck, grouped
    sizes: list[int] = field(default_factory=list)  # the world size, each time it changed (min_ranks)
    waited_s: float = 0.0  # how long it waited in its pool's queue first (not part of duration_s)
    values_dropped: str | None = None  # why ``values`` is empty: too large to keep (detached jobs)

    @property
    def ok(self) -> bool:
        return self.status is JobStatus.SUCCEEDED

    def __repr__(self) -> str:
        state = "ok" if self.ok else f"{self.status.value}: {self.failure}"
        return (
            f"<JobResult {self.job_id} on {self.pool!r} {state}; returncodes={self.returncodes}, "
            f"duration_s={self.duration_s:.2f}, restarts={self.restarts}>"
        )

    def logs(self, rank: int = 0) -> str:
        """Everything ``rank`` wrote during the job, from its log on disk (bounded: the start and the
        end of a very long one; see :mod:`gpugeek_jupyter.jobs.logs`)."""
        from .logs import JobLogs

        return JobLogs.read(self.job_id, rank)

    def metrics(self) -> pandas.DataFrame:
        """Every value the ranks logged with ``gg.log``, one row each: ``job, attempt, rank, step,
        time, name, value`` (kept with the job on disk, see :mod:`gpugeek_jupyter.jobs.metrics`).

        >>> result.metrics().pivot_table(index="step", columns="rank", values="value")   # doctest: +SKIP
        """
        from .metrics import metrics_frame

        return metrics_frame(self.job_id)

    def report(self) -> str:
        """The failing rank's traceback, each line labelled with its rank, then the one-line reason."""
        lines: list[str] = []
        if self.traceback and self.failed_rank is not None:
            lines.extend(labelled_traceback(self.failed_rank, self.traceback))
        if self.where and not self.ok:
            lines.append("where the ranks were: " + self.where)
        lines.append(f"{self.error_class().__name__}: {self.failure}")
        return "\n".join(lines)

    def error_class(self) -> type[JobFailedError]:
        if self.status is JobStatus.CANCELLED:
            return JobInterrupted
        if self.timed_out:
            return JobTimedOut
        return JobFailed

    def raise_for_status(self) -> JobResult:
        """Raise the job's error (with the rank's traceback) unless it succeeded; else return self."""
        if self.ok:
            return self
        error = self.error_class()(self.failure or "the job failed")
        error.result = self  # type: ignore[attr-defined]
        raise error


class _RendersRankTraceback:
    """IPython shows ``_render_traceback_()`` instead of the local traceback: the rank's is the useful one."""

    result: JobResult

    def _render_traceback_(self) -> list[str]:
        return self.result.report().splitlines()


class JobFailed(_RendersRankTraceback, JobFailedError):
    """A rank raised, exited non-zero, or its worker died."""


class JobTimedOut(_RendersRankTraceback, JobTimeoutError):
    """The job ran past ``--timeout``; the message names the ranks that had not arrived."""


class JobInterrupted(_RendersRankTraceback, JobInterruptedError):
    """The notebook's interrupt stopped the job on every rank."""
