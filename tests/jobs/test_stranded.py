"""The rule that ends a job whose rank waits in a call for a rank that will never enter it."""

from __future__ import annotations

from gpugeek_jupyter.jobs.layout import WorkerInfo, plan_layout
from gpugeek_jupyter.jobs.stranded import PEER_WAIT_S, StrandedCollectives, calls_ahead

LAYOUT = plan_layout([WorkerInfo(f"tcp://h:{i}", str(i), "h") for i in range(3)])
BARRIER = {"running": True, "collective": "dist.barrier()", "at": "line 3: dist.barrier()", "peers": [0, 1, 2]}


def test_a_rank_waiting_for_a_finished_one_is_named_after_the_wait_not_before() -> None:
    stranded = StrandedCollectives("job-1", LAYOUT, LAYOUT.addresses)
    assert stranded.check.at is None  # every rank runs it and none finished: nobody looks
    stranded.rank_finished(1, now=100.0)
    assert stranded.check.at == 101.0
    where = {"tcp://h:0": BARRIER, "tcp://h:2": BARRIER}
    assert stranded.judge(where, now=101.0) is None
    assert stranded.judge(where, now=101.0 + PEER_WAIT_S - 0.1) is None
    message = stranded.judge(where, now=101.0 + PEER_WAIT_S)
    assert message is not None
    assert message.startswith("job job-1 cannot complete: rank 0 in dist.barrier() at line 3: dist.barrier() waits")
    assert "rank 1, which finished the job" in message and "rank 2 in dist.barrier()" in message, message
    assert "`if rank == 0:`" in message and "--ranks" not in message, message


def test_leaving_the_call_starts_the_wait_over() -> None:
    stranded = StrandedCollectives("job-1", LAYOUT, LAYOUT.addresses)
    stranded.rank_finished(2, now=0.0)
    assert stranded.judge({"tcp://h:0": BARRIER}, now=1.0) is None
    assert stranded.judge({"tcp://h:0": {"running": True, "collective": None, "at": "line 5"}}, now=4.0) is None
    assert stranded.judge({"tcp://h:0": BARRIER}, now=5.0) is None
    assert stranded.judge({"tcp://h:0": BARRIER}, now=5.0 + PEER_WAIT_S) is not None


def test_calls_that_do_not_need_the_finished_rank_or_whose_group_is_unknown_never_count() -> None:
    stranded = StrandedCollectives("job-1", LAYOUT, LAYOUT.addresses)
    stranded.rank_finished(1, now=0.0)
    subgroup = {**BARRIER, "collective": "dist.all_reduce()", "peers": [0, 2]}
    backward = {"running": True, "collective": "backward() (gradient all-reduce)", "at": "line 9: loss.backward()"}
    computing = {"running": True, "collective": None, "at": "line 4: time.sleep(60)"}
    for now in (1.0, 10.0, 100.0):
        assert stranded.judge({"tcp://h:0": subgroup, "tcp://h:2": backward}, now=now) is None
        assert stranded.judge({"tcp://h:0": computing, "tcp://h:2": computing}, now=now + 1) is None


def test_a_cell_on_some_ranks_is_looked_at_from_the_start_and_says_which_did_not_take_part() -> None:
    stranded = StrandedCollectives("job-2", LAYOUT, ["tcp://h:0"])
    assert stranded.check.at is not None
    where = {"tcp://h:0": BARRIER}
    stranded.judge(where, now=0.0)
    message = stranded.judge(where, now=PEER_WAIT_S)
    assert message is not None
    assert "waits for ranks 1-2, which did not take part (the cell ran on rank 0 only)" in message, message


def test_finished_and_absent_ranks_together_are_both_named() -> None:
    stranded = StrandedCollectives("job-3", LAYOUT, ["tcp://h:0", "tcp://h:1"])
    stranded.rank_finished(1, now=0.0)
    stranded.judge({"tcp://h:0": BARRIER}, now=0.0)
    message = stranded.judge({"tcp://h:0": BARRIER}, now=PEER_WAIT_S) or ""
    assert "waits for ranks 1-2, which finished or did not take part" in message, message


def test_a_rank_that_ended_the_previous_cell_ahead_of_the_others_is_said_to_be_waiting_for_that_call() -> None:
    previous = {0: {"0": 7, "1": 2}, 1: {"0": 6, "1": 2}, 2: {"0": 6, "1": 2}}
    assert calls_ahead(previous) == {0: (1, [1, 2])}
    stranded = StrandedCollectives("job-4", LAYOUT, LAYOUT.addresses, previous)
    stranded.rank_finished(1, now=0.0)
    stranded.rank_finished(2, now=0.0)
    where = {"tcp://h:0": {**BARRIER, "collective": "dist.all_reduce()", "at": "line 2: dist.all_reduce(t)"}}
    stranded.judge(where, now=0.0)
    message = stranded.judge(where, now=PEER_WAIT_S)
    assert message is not None
    assert "rank 0 in dist.all_reduce() at line 2: dist.all_reduce(t) waits for ranks 1-2, which finished" in message
    assert "rank 0 had made 1 call more on its process group than ranks 1-2 by the end of the previous cell" in message
    assert "async_op=True" in message and "not under a condition" not in message, message


def test_ranks_in_step_or_unknown_are_ahead_of_nobody() -> None:
    assert calls_ahead({0: {"0": 3}, 1: {"0": 3}}) == {}
    assert calls_ahead({0: None, 1: {"0": 3}}) == {}
    assert calls_ahead({}) == {}
    # per group: a subgroup only some ranks belong to is compared among its members
    assert calls_ahead({0: {"0": 4, "1": 9}, 1: {"0": 4, "1": 7}, 2: {"0": 4}}) == {0: (2, [1])}
