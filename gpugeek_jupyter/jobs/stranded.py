"""Ranks stranded in a collective: waiting for a rank that will never enter it.

A rank that waits in a torch.distributed call whose group holds a rank that did not run the job
(``--ranks``) or has already finished it cannot complete: nothing will ever answer it. The rule:
such a rank, seen waiting in a call that needs a finished or absent rank for ``PEER_WAIT_S`` in a
row (looked at every ``PEER_CHECK_S``, only while such ranks exist), stops the job as ``cannot
complete``, naming who waits, in which call and line, and for whom. A call whose group cannot be
told (a backward pass, which may or may not all-reduce) never counts: the rule must not end a
rank that is only computing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .escalation import Deadline
from .layout import Layout
from .output import format_ranks

PEER_CHECK_S = 1.0  # how often to look, while some rank finished or did not take part
PEER_WAIT_S = 5.0  # a call waited in this long for a rank that will never enter it cannot complete


Sequences = Mapping[int, Mapping[str, int] | None]  # rank -> its groups' sequence numbers by group name
CallsAhead = dict[int, tuple[int, list[int]]]  # rank -> (how many calls more, the ranks it is ahead of)


def calls_ahead(sequences: Sequences) -> CallsAhead:
    """From each rank's groups' sequence numbers as its cell ended (see ``rank.group_sequences``):
    the ranks that had made more calls on a group than other ranks of it, with how many more and
    which ranks made fewest; empty when they agree.

    >>> calls_ahead({0: {"0": 5}, 1: {"0": 4}})
    {0: (1, [1])}
    >>> calls_ahead({0: {"0": 5}, 1: {"0": 5}, 2: None})
    {}
    """
    ahead: CallsAhead = {}
    names = sorted({name for numbers in sequences.values() if numbers for name in numbers})
    for name in names:
        numbers = {rank: seq[name] for rank, seq in sequences.items() if seq and name in seq}
        fewest = min(numbers.values())
        behind = sorted(rank for rank, number in numbers.items() if number == fewest)
        for rank, number in numbers.items():
            if number - fewest > ahead.get(rank, (0, []))[0]:
                ahead[rank] = (number - fewest, behind)
    return ahead


class StrandedCollectives:
    """Decides, from the ranks' ``where`` answers, whether a rank waits for one that never comes.

    ``previous``: the ranks' sequence numbers as the group's previous cell ended. A rank that had
    made more calls than others then (:func:`calls_ahead`, worked out only for a message) likely
    waits now in the call its peers made to pair with that earlier one, and the message says so.
    """

    def __init__(self, job_id: str, layout: Layout, launched: list[str], previous: Sequences | None = None) -> None:
        self.job_id, self.layout = job_id, layout
        self.previous = previous or {}
        chosen = set(launched)
        self.launched = sorted(slot.rank for slot in layout.slots if slot.address in chosen)
        self.absent = {r for r in range(layout.world_size) if r not in set(self.launched)}
        self.finished: set[int] = set()
        self.check = Deadline(time.monotonic() + PEER_CHECK_S if self.absent else None)
        self.waiting_since: dict[int, float] = {}

    def rank_finished(self, rank: int, now: float) -> None:
        """A rank answered: from now on the others are looked at (a cell's ranks usually answer
        within milliseconds of each other, before the first look)."""
        self.finished.add(rank)
        if self.check.at is None:
            self.check.arm(now + PEER_CHECK_S)

    def judge(self, where: dict[str, Any], now: float) -> str | None:
        """The ``cannot complete`` message once a rank has waited ``PEER_WAIT_S`` for a rank that
        will never enter its call, else None; ``where`` maps addresses to ``where_rank`` answers."""
        self.check.arm(now + PEER_CHECK_S)
        missing = self.absent | self.finished
        blocked: dict[int, tuple[dict[str, Any], list[int]]] = {}
        for address, info in where.items():
            rank = self.layout.slot_of(address).rank
            peers = info.get("peers") if isinstance(info, dict) and info.get("collective") else None
            lacking = sorted(set(peers) & missing) if isinstance(peers, list) else []
            if lacking:
                blocked[rank] = (info, lacking)
                self.waiting_since.setdefault(rank, now)
            else:
                self.waiting_since.pop(rank, None)
        stuck = {
            r: blocked[r] for r, since in self.waiting_since.items() if r in blocked and now - since >= PEER_WAIT_S
        }
        if not stuck:
            return None
        waits = "; ".join(
            f"{format_ranks([rank])} in {info['collective']}"
            + (f" at {info['at']}" if info.get("at") else "")
            + f" waits for {format_ranks(lacking)}, which {self._why(lacking)}"
            for rank, (info, lacking) in sorted(stuck.items())
        )
        return f"job {self.job_id} cannot complete: {waits} {self._advice(stuck)}"

    def _advice(self, stuck: dict[int, tuple[dict[str, Any], list[int]]]) -> str:
        """Why the stuck ranks' peers will never come, and what to do."""
        if any(r in self.absent for _, lacking in stuck.values() for r in lacking):
            return (
                f"(the cell ran on {format_ranks(self.launched)} only); collectives need every rank of their group: "
                "run this cell on every rank, or keep collectives out of cells run with --ranks"
            )
        ahead = calls_ahead(self.previous)
        earlier = [(rank, *ahead[rank]) for rank in sorted(stuck) if rank in ahead]
        if earlier:
            return (
                "(it will never enter that call): "
                + "; ".join(
                    f"{format_ranks([rank])} had made {more} call{'s' if more > 1 else ''} more on its process group "
                    f"than {format_ranks(behind)} by the end of the previous cell"
                    for rank, more, behind in earlier
                )
                + ", one only some ranks made there (e.g. `dist.all_reduce(t, async_op=True)` under `if rank == 0:`), "
                "and this cell's call on the others was paired with it: make each collective on every rank of its group"
            )
        return (
            "(it will never enter that call); a collective needs every rank of its group to call it: "
            "call it on every rank, not under a condition such as `if rank == 0:`"
        )

    def _why(self, ranks: list[int]) -> str:
        if all(r in self.absent for r in ranks):
            return "did not take part"
        if all(r in self.finished for r in ranks):
            return "finished the job"
        return "finished or did not take part"
