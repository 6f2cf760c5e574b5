"""The cancel -> end escalation of a stopping attempt, fed times and what the ranks said; no dask."""

from __future__ import annotations

from gpugeek_jupyter.jobs.escalation import (
    CANCEL_GRACE_S,
    KILL_WAIT_S,
    NANNY_END_S,
    EndWorkers,
    RankCondition,
    StopEscalation,
)

FROZEN, IN_COLLECTIVE, RUNNING, NOT_RUNNING = (
    RankCondition.FROZEN,
    RankCondition.IN_COLLECTIVE,
    RankCondition.RUNNING,
    RankCondition.NOT_RUNNING,
)


def cancelled_at(now: float) -> StopEscalation:
    escalation = StopEscalation()
    escalation.start(now)
    return escalation


def test_nothing_is_due_before_the_ranks_were_cancelled() -> None:
    escalation = StopEscalation()
    assert not escalation.round_due(now=1e9, pending={"a"})
    assert escalation.wake_times({"a"}) == []


def test_a_cancelled_rank_has_the_grace_period_to_stop() -> None:
    escalation = cancelled_at(10.0)
    assert not escalation.round_due(10.0 + CANCEL_GRACE_S - 0.01, {"a"})
    assert escalation.round_due(10.0 + CANCEL_GRACE_S, {"a"})
    assert escalation.wake_times({"a"}) == [10.0 + CANCEL_GRACE_S]


def test_cancelling_again_starts_the_grace_period_over() -> None:
    escalation = cancelled_at(0.0)
    escalation.start(1.0)
    assert not escalation.round_due(CANCEL_GRACE_S, {"a"})
    assert escalation.round_due(1.0 + CANCEL_GRACE_S, {"a"})


def test_no_round_once_every_rank_still_to_answer_was_ended() -> None:
    escalation = cancelled_at(0.0)
    escalation.decide({"a": RUNNING}, now=2.0)
    assert not escalation.round_due(100.0, {"a"})
    assert not escalation.round_due(100.0, set())


def test_the_first_round_ends_ranks_outside_a_collective_and_spares_their_peers() -> None:
    decision = cancelled_at(0.0).decide({"a": IN_COLLECTIVE, "b": RUNNING, "c": IN_COLLECTIVE, "d": RUNNING}, now=2.0)
    assert decision == EndWorkers(kill=("b", "d"), nanny=())


def test_the_first_round_ends_one_rank_when_all_wait_in_a_collective() -> None:
    decision = cancelled_at(0.0).decide({"c": IN_COLLECTIVE, "a": IN_COLLECTIVE, "b": IN_COLLECTIVE}, now=2.0)
    assert decision == EndWorkers(kill=("a",), nanny=())


def test_frozen_workers_go_to_their_nannies_at_once_and_spare_ranks_in_collectives() -> None:
    decision = cancelled_at(0.0).decide({"a": IN_COLLECTIVE, "b": FROZEN, "c": IN_COLLECTIVE}, now=2.0)
    assert decision == EndWorkers(kill=(), nanny=("b",))


def test_frozen_and_stuck_ranks_are_ended_together() -> None:
    decision = cancelled_at(0.0).decide({"a": RUNNING, "b": FROZEN, "c": IN_COLLECTIVE}, now=2.0)
    assert decision == EndWorkers(kill=("a",), nanny=("b",))


def test_ranks_no_longer_running_are_left_to_answer() -> None:
    escalation = cancelled_at(0.0)
    assert not escalation.decide({"a": NOT_RUNNING, "b": NOT_RUNNING}, now=2.0)
    assert escalation.killed == set()
    assert escalation.decide({"a": NOT_RUNNING, "b": IN_COLLECTIVE}, now=2.0, everyone=True).kill == ("b",)


def test_after_the_first_ending_every_rank_still_running_is_ended() -> None:
    escalation = cancelled_at(0.0)
    assert escalation.decide({"a": RUNNING, "b": IN_COLLECTIVE, "c": IN_COLLECTIVE}, now=2.0).kill == ("a",)
    decision = escalation.decide({"b": IN_COLLECTIVE, "c": IN_COLLECTIVE, "d": NOT_RUNNING}, now=4.0)
    assert decision == EndWorkers(kill=("b", "c"), nanny=())
    assert escalation.killed == {"a", "b", "c"}


def test_a_second_interrupt_ends_every_running_rank_at_once() -> None:
    decision = cancelled_at(0.0).decide({"a": IN_COLLECTIVE, "b": RUNNING, "c": FROZEN}, now=0.1, everyone=True)
    assert decision == EndWorkers(kill=("a", "b"), nanny=("c",))


def test_the_next_round_comes_a_grace_period_after_an_ending_from_within() -> None:
    escalation = cancelled_at(0.0)
    decision = escalation.decide({"a": RUNNING, "b": IN_COLLECTIVE}, now=1.5)
    escalation.round_done(decision, now=1.6)
    assert not escalation.round_due(1.6 + CANCEL_GRACE_S - 0.01, {"a", "b"})
    assert escalation.round_due(1.6 + CANCEL_GRACE_S, {"a", "b"})


def test_the_next_round_waits_for_the_nannies_after_frozen_workers_were_handed_over() -> None:
    escalation = cancelled_at(0.0)
    decision = escalation.decide({"a": FROZEN, "b": IN_COLLECTIVE}, now=1.5)
    escalation.round_done(decision, now=1.6)
    assert not escalation.round_due(1.6 + NANNY_END_S - 0.01, {"a", "b"})
    assert escalation.round_due(1.6 + NANNY_END_S, {"a", "b"})


def test_a_round_that_ends_nothing_looks_again_a_grace_period_later() -> None:
    escalation = cancelled_at(0.0)
    decision = escalation.decide({"a": NOT_RUNNING}, now=1.5)
    escalation.round_done(decision, now=1.5)
    assert escalation.round_due(1.5 + CANCEL_GRACE_S, {"a"})


def test_an_ended_rank_that_never_answers_is_given_up_after_the_kill_wait() -> None:
    escalation = cancelled_at(0.0)
    escalation.decide({"a": RUNNING, "b": IN_COLLECTIVE}, now=2.0)
    assert escalation.not_answering(2.0 + KILL_WAIT_S - 0.01, {"a", "b"}) == []
    assert escalation.not_answering(2.0 + KILL_WAIT_S, {"a", "b"}) == ["a"]
    assert escalation.not_answering(2.0 + KILL_WAIT_S, {"b"}) == []


def test_a_later_ending_gives_every_ended_rank_the_kill_wait_again() -> None:
    escalation = cancelled_at(0.0)
    escalation.decide({"a": RUNNING, "b": IN_COLLECTIVE}, now=2.0)
    escalation.decide({"b": IN_COLLECTIVE}, now=4.0)
    assert escalation.not_answering(2.0 + KILL_WAIT_S, {"a", "b"}) == []
    assert escalation.not_answering(4.0 + KILL_WAIT_S, {"a", "b"}) == ["a", "b"]


def test_the_watch_wakes_for_ended_ranks_only_while_one_is_still_to_answer() -> None:
    escalation = cancelled_at(0.0)
    decision = escalation.decide({"a": RUNNING, "b": NOT_RUNNING}, now=2.0)
    escalation.round_done(decision, now=2.0)
    assert escalation.wake_times({"a", "b"}) == [2.0 + CANCEL_GRACE_S, 2.0 + KILL_WAIT_S]
    assert escalation.wake_times({"b"}) == [2.0 + CANCEL_GRACE_S]  # "a" answered: no busy wait past its deadline
    assert escalation.wake_times(set()) == []


def test_candidates_are_the_ranks_still_to_answer_neither_ended_nor_gone() -> None:
    escalation = cancelled_at(0.0)
    escalation.decide({"a": RUNNING}, now=2.0)
    assert escalation.candidates(pending={"a", "b", "c", "d"}, gone={"c"}) == ["b", "d"]


def test_a_ranks_condition_is_read_from_its_where_answer() -> None:
    where = {
        "in-collective": {"running": True, "collective": "all_reduce", "at": "train.py:3"},
        "running": {"running": True, "at": "train.py:9"},
        "finished": {"running": False},
        "error": RuntimeError("could not say"),
    }
    assert {a: RankCondition.of(where, a) for a in [*where, "silent"]} == {
        "in-collective": IN_COLLECTIVE,
        "running": RUNNING,
        "finished": NOT_RUNNING,
        "error": NOT_RUNNING,
        "silent": FROZEN,
    }
