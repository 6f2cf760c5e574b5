"""Which rank a failed job's message names, from the ranks' reports (no pool needed)."""

from __future__ import annotations

from gpugeek_jupyter.jobs.result import RankReport
from gpugeek_jupyter.jobs.watch import _group_others, _primary_failure


def failed(rank: int, error: str, *, peer: bool = False) -> RankReport:
    return RankReport(rank, "h", f"tcp://h:{rank}", "failed", 1, error=error, peer_failure=peer)


def test_ranks_that_failed_alike_are_named_by_the_lowest_whichever_answered_first() -> None:
    reports = [failed(rank, "ValueError: math domain error") for rank in range(8)]
    primary = _primary_failure(reports, arrival=[3, 5, 0, 1, 2, 4, 6, 7])
    assert primary is not None and primary.rank == 0
    assert _group_others(primary, reports) == ["ranks 1-7 failed with the same error"]


def test_a_rank_with_its_own_error_stays_the_cause_even_if_a_lower_rank_failed_otherwise() -> None:
    reports = [failed(0, "RuntimeError: peer went away", peer=True), failed(2, "KeyError: 'x'"), failed(1, "OSError")]
    primary = _primary_failure(reports, arrival=[2, 1, 0])
    assert primary is not None and primary.rank == 2
    assert _group_others(primary, reports) == [
        "rank 0 (host h) stopped (a peer went away)",
        "rank 1 (host h): OSError",
    ]
