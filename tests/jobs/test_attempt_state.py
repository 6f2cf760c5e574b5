"""The attempt states the agent decides from: what each means for the job and whether it may run again."""

from __future__ import annotations

from gpugeek_jupyter.jobs.result import RankReport
from gpugeek_jupyter.jobs.state import AttemptResult, AttemptState
from gpugeek_jupyter.store import JobStatus


def test_only_failed_and_not_started_attempts_may_run_again() -> None:
    assert {s for s in AttemptState if s.restartable} == {AttemptState.FAILED, AttemptState.NOT_STARTED}


def test_each_state_maps_to_the_jobs_final_status() -> None:
    assert {s: s.job_status for s in AttemptState} == {
        AttemptState.SUCCEEDED: JobStatus.SUCCEEDED,
        AttemptState.FAILED: JobStatus.FAILED,
        AttemptState.NOT_STARTED: JobStatus.FAILED,
        AttemptState.TIMED_OUT: JobStatus.FAILED,
        AttemptState.INTERRUPTED: JobStatus.CANCELLED,
        AttemptState.POOL_STOPPED: JobStatus.CANCELLED,
        AttemptState.CANNOT_COMPLETE: JobStatus.FAILED,
    }


def test_a_result_keyed_by_rank_reads_back_in_rank_order() -> None:
    def report(rank: int) -> RankReport:
        return RankReport(rank=rank, host="h", address=f"tcp://h:{rank}", status="ok", exit_code=0)

    result = AttemptResult(AttemptState.SUCCEEDED, ranks={1: report(1), 0: report(0)}, values={1: "b", 0: "a"})
    assert [r.rank for r in result.reports()] == [0, 1]
    assert result.values_in_rank_order() == ["a", "b"]
    assert result.ok and result.status is JobStatus.SUCCEEDED
    failed = AttemptResult(AttemptState.FAILED, ranks={0: report(0), 1: report(1)})
    assert failed.values_in_rank_order() == [None, None] and not failed.ok
