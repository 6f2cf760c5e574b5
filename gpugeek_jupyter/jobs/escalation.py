"""Stopping an attempt's ranks: cancel, then end the workers of those that do not stop.

The policy, as :class:`StopEscalation` decides it (the watch carries it out):

1. Every rank is cancelled (``JobCancelled`` raised in its thread); a failed rank closes its process
   group, which breaks its peers out of their collectives.
2. ``CANCEL_GRACE_S`` later the ranks still running are asked where they are. Those running outside
   a collective are ended first (stuck in C code; their worker process exits and the nanny starts a
   fresh one), so that their peers' collectives fail and return. A worker that cannot even say where
   its rank is has a frozen interpreter: only its nanny can end it, and it is handed over at once.
   When every running rank waits in a collective and none is frozen, one of them is ended.
3. Each round after that ends every rank still running: ``CANCEL_GRACE_S`` later, or ``NANNY_END_S``
   after workers were handed to their nannies (a nanny takes a while to end a frozen worker).
4. An ended worker whose rank has not answered ``KILL_WAIT_S`` after the last ending never will.

A second interrupt ends every rank still running at once.

The policy sees only times and what the ranks said (:class:`RankCondition`); it needs no dask::

    >>> escalation = StopEscalation()
    >>> escalation.start(now=0.0)
    >>> escalation.round_due(now=1.0, pending={"a", "b"})
    False
    >>> escalation.decide({"a": RankCondition.RUNNING, "b": RankCondition.IN_COLLECTIVE}, now=1.5)
    EndWorkers(kill=('a',), nanny=())
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from enum import Enum
from typing import Any

CANCEL_GRACE_S = 1.5  # a cancelled rank has this long to stop before its worker process is ended
NANNY_END_S = 5.0  # a nanny ends a frozen worker (SIGKILL) within about 2 s; peers then fail
KILL_WAIT_S = 5.0  # how long an ended worker may take to be seen gone


@dataclass
class Deadline:
    """A moment on the monotonic clock, or none while not armed."""

    at: float | None = None

    def arm(self, at: float) -> None:
        self.at = at

    def due(self, now: float) -> bool:
        return self.at is not None and now >= self.at


class RankCondition(str, Enum):
    """What a rank's worker said when asked where the rank is (``rank.where_rank``)."""

    FROZEN = "frozen"  # no answer: the worker's interpreter is frozen, only its nanny can end it
    IN_COLLECTIVE = "in a collective"  # running, waiting in a collective for its peers
    RUNNING = "running"  # running, outside any collective
    NOT_RUNNING = "not running"  # its code has ended (its answer is on the way), or it could not say

    @classmethod
    def of(cls, where: Mapping[str, Any], address: str) -> RankCondition:
        """The condition of the rank at ``address`` from the workers' ``where_rank`` answers."""
        if address not in where:
            return cls.FROZEN
        answer = where[address]
        if not isinstance(answer, dict) or not answer.get("running"):
            return cls.NOT_RUNNING
        return cls.IN_COLLECTIVE if answer.get("collective") else cls.RUNNING


@dataclass(frozen=True)
class EndWorkers:
    """The workers to end now: ``kill`` from within (``rank.kill_rank``), ``nanny`` through their
    nannies (frozen ones). Addresses in sorted order."""

    kill: tuple[str, ...] = ()
    nanny: tuple[str, ...] = ()

    @property
    def addresses(self) -> set[str]:
        return set(self.kill) | set(self.nanny)

    def __bool__(self) -> bool:
        return bool(self.kill or self.nanny)


class StopEscalation:
    """Decides, from times and the ranks' conditions, when to end which workers of a stopping attempt."""

    def __init__(
        self, cancel_grace_s: float = CANCEL_GRACE_S, nanny_end_s: float = NANNY_END_S, kill_wait_s: float = KILL_WAIT_S
    ) -> None:
        self.cancel_grace_s = cancel_grace_s
        self.nanny_end_s = nanny_end_s
        self.kill_wait_s = kill_wait_s
        self.killed: set[str] = set()  # ranks whose workers were ended
        self.next_round = Deadline()  # when to look for ranks that ignored the cancel
        self.answer_by = Deadline()  # ended workers whose ranks have not answered by then never will

    def start(self, now: float) -> None:
        """The ranks were cancelled (again) at ``now``: the grace period starts over."""
        self.next_round.arm(now + self.cancel_grace_s)

    def round_due(self, now: float, pending: Set[str]) -> bool:
        """A round of :meth:`decide` is due: some rank still to answer was not ended yet."""
        return bool(pending - self.killed) and self.next_round.due(now)

    def candidates(self, pending: Set[str], gone: Set[str]) -> list[str]:
        """The ranks a round asks where they are: still to answer, neither ended nor gone."""
        return sorted(pending - self.killed - gone)

    def decide(self, conditions: Mapping[str, RankCondition], now: float, everyone: bool | None = None) -> EndWorkers:
        """Which of these ranks to end now, remembered as ended at ``now``.

        ``everyone`` None: the first round ends the stuck ranks only (outside a collective, or frozen),
        later ones every rank still running; True: every rank still running (a second interrupt).
        """
        if everyone is None:
            everyone = bool(self.killed)
        frozen = sorted(a for a, c in conditions.items() if c is RankCondition.FROZEN)
        running = sorted(a for a, c in conditions.items() if c in (RankCondition.RUNNING, RankCondition.IN_COLLECTIVE))
        if not everyone:  # the stuck ones first: their peers' collectives then fail and return
            stuck = [a for a in running if conditions[a] is RankCondition.RUNNING]
            running = stuck or ([] if frozen else running[:1])
        decision = EndWorkers(kill=tuple(running), nanny=tuple(frozen))
        if decision:
            self.killed |= decision.addresses
            self.answer_by.arm(now + self.kill_wait_s)
        return decision

    def round_done(self, decision: EndWorkers, now: float) -> None:
        """A round ended ``decision``'s workers at ``now``: when the next one is due."""
        self.next_round.arm(now + (self.nanny_end_s if decision.nanny else self.cancel_grace_s))

    def not_answering(self, now: float, pending: Set[str]) -> list[str]:
        """Ended ranks still to answer once :attr:`answer_by` has passed: they never will."""
        return sorted(pending & self.killed) if self.answer_by.due(now) else []

    def wake_times(self, pending: Set[str]) -> list[float]:
        """When the watch should look again (a round, or ended ranks' answers due)."""
        times = []
        if self.next_round.at is not None and pending - self.killed:
            times.append(self.next_round.at)
        if self.answer_by.at is not None and pending & self.killed:
            times.append(self.answer_by.at)
        return times
