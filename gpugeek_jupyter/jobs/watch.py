"""Watching one attempt of a job: output, failures, deaths, timeout and interrupt, then the verdict.

The watch reads the attempt's :mod:`.events` and dispatches on their type. Stopping (a rank failed
or died, a timeout, an interrupt, the pool stopping) cancels every rank; which workers are then
ended, and when, is :class:`~.escalation.StopEscalation`'s to decide.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..polling import wait_for
from . import rank as rank_side
from .descriptors import last_words
from .env import interface_of
from .escalation import Deadline, EndWorkers, RankCondition, StopEscalation
from .events import (
    CancelRequested,
    Events,
    JobEvent,
    PoolStopping,
    RankAnswered,
    RankEnded,
    RankLineage,
    RankMetrics,
    RankOutput,
    RankProgress,
    WorkerRemoved,
    rank_event,
)
from .layout import Layout
from .logs import JobLogs, rank_state
from .output import format_ranks
from .payload import RankOutcome, outcome_from_wire
from .process_group import ProcessGroup
from .result import RankReport
from .roster import WorkerRoster
from .slow_ranks import SlowRanks
from .state import AttemptResult, AttemptState, StopCause
from .stranded import Sequences, StrandedCollectives, calls_ahead
from .transport import PoolTransport, WorkerGone

log = logging.getLogger(__name__)

OutputCallback = Callable[[int, str, str], None]  # (rank, "stdout" | "stderr", text)
# (rank, a progress bar's state): {"id", "desc", "n", "total", "unit", "elapsed", "rate", "closed"}
ProgressCallback = Callable[[int, dict[str, Any]], None]

TICK_S = 1.0  # the watch looks at its deadlines at least this often
# how long the other ranks have to answer after a rank failed or stopped with its process group kept
# (and its names) before that group is dropped, breaking any peer out of a collective it would wait
# in for ever (then the group is rebuilt, as after any other failure)
KEPT_GROUP_GRACE_S = 0.5
# how long the other ranks go on after one failed before they are stopped: ranks that run the same
# code often fail alike a moment later, and then each says its own error ("ranks 1-7 failed with
# the same error", their names kept in step) rather than "stopped" half way through the same cell
PEER_STOP_DELAY_S = 0.2
OUTPUT_DRAIN_S = 2.0  # late output events are awaited this long after the last rank answered
INTERRUPTED_FROM_THE_NOTEBOOK = "interrupted from the notebook"  # the stop message of an interrupt


@dataclass(frozen=True)
class AttemptPlan:
    """What one attempt launched: the job, the launch's token, the group, and the time limit."""

    job_id: str
    launch: str  # the token the ranks' events carry: words from an earlier launch are told apart
    group: ProcessGroup
    launched: list[str]  # the addresses of the ranks that run it: every rank, or those of --ranks
    deadline: float | None = None  # the job's timeout, as a moment on the monotonic clock
    timeout: float | None = None  # the same, in seconds (for its message)
    # time.time() just before the launch: the nannies' reports of how a process ended count from here
    started_at: float = 0.0
    # the ranks' sequence numbers on their groups as the group's previous cell ended (see .stranded)
    previous_sequences: Sequences = field(default_factory=dict)


@dataclass(frozen=True)
class AttemptSinks:
    """Where what the ranks send goes."""

    logs: JobLogs
    on_output: OutputCallback
    on_progress: ProgressCallback | None = None
    slow_ranks: SlowRanks | None = None  # told the ranks' gg.log values, names a lagging rank
    on_lineage: Callable[[dict[str, Any]], None] | None = None  # a rank's lineage record, to keep


class AttemptWatch:
    """Follows one attempt: output, failures, deaths, timeout and interrupt, until every rank answered.

    Its clocks: the job's timeout; :class:`~.stranded.StrandedCollectives`' look at ranks waiting
    for one that will never come; the stop's escalation (:class:`~.escalation.StopEscalation`);
    when the ranks' states reach the disk (:meth:`.logs.JobLogs.write_states_when_due`).
    """

    def __init__(
        self, transport: PoolTransport, roster: WorkerRoster, plan: AttemptPlan, events: Events, sinks: AttemptSinks
    ) -> None:
        self.transport, self.roster, self.events = transport, roster, events
        self.plan, self.sinks = plan, sinks
        self.job_id, self.launch, self.group = plan.job_id, plan.launch, plan.group
        self.layout = layout = plan.group.layout
        self.logs = sinks.logs
        self.timeout_at = Deadline(plan.deadline)
        self.answers: dict[str, RankOutcome | BaseException] = {}
        self.launched = list(plan.launched)
        self.slots = [slot for slot in layout.slots if slot.address in set(self.launched)]
        self.pending = set(self.launched)
        self.stranded = StrandedCollectives(plan.job_id, layout, self.launched, plan.previous_sequences)
        self.where: str | None = None  # where the ranks were when the job was timed out or stuck
        self.logs.ranks_running(slot.rank for slot in self.slots)
        self.ended: list[int] = []  # ranks that reported a failure, in order
        self.received: dict[int, int] = {}  # output events seen per rank
        self.stopping: StopCause | None = None
        self.stop_message: str | None = None
        self.escalation = StopEscalation()
        self.gone: set[str] = set()  # ranks whose worker process died or was ended
        self.kept_groups_due = Deadline()  # when the groups failed ranks kept are dropped (others still run)
        self.peers_stop_due = Deadline()  # when the ranks still running after one failed are stopped
        self.kept_groups_dropped = False
        self.started_at = plan.started_at or time.time()

    @property
    def killed(self) -> set[str]:
        """Ranks whose worker process was ended because they did not stop."""
        return self.escalation.killed

    # -- the loop ------------------------------------------------------------------------------
    def wait(self) -> None:
        interrupted = False
        while self.pending:
            try:
                if interrupted:  # handled here, so that an interrupt during the handling is not lost
                    interrupted = False
                    self.interrupt()
                self._step()
            except KeyboardInterrupt:
                interrupted = True
        try:
            self._drain_output()
        except KeyboardInterrupt:
            log.info("job %s: stopped waiting for the ranks' last output", self.job_id)

    def _step(self) -> None:
        now = time.monotonic()
        event = self._next_event(timeout=max(0.0, self._wake_at(now) - now))
        if event is not None:
            self._handle(event)
        now = time.monotonic()
        self.logs.write_states_when_due(now)
        if self.stopping is None and self.timeout_at.due(now):
            self._time_out()
        if self.stopping is None and self.stranded.check.due(now):
            self._look_for_stranded_ranks()
        if self.kept_groups_due.due(now):
            self._drop_kept_groups()
        if self.peers_stop_due.due(now):
            self.peers_stop_due.at = None
            self._stop(StopCause.FAILED, None)
        if self.escalation.round_due(now, self.pending):
            ended = self._end_stuck()
            self.escalation.round_done(ended, time.monotonic())
        for address in self.escalation.not_answering(now, self.pending):  # ended, never seen gone
            self._answered(address, RuntimeError("the worker did not answer after it was ended"))

    def _wake_at(self, now: float) -> float:
        """The nearest of the watch's deadlines (at most ``TICK_S`` away)."""
        wake = [now + TICK_S, *self.escalation.wake_times(self.pending)]
        if self.logs.states_due_at is not None:
            wake.append(self.logs.states_due_at)
        for due in (self.kept_groups_due, self.peers_stop_due):
            if due.at is not None:
                wake.append(due.at)
        if self.stopping is None:
            wake += [d.at for d in (self.timeout_at, self.stranded.check) if d.at is not None]
        return min(wake)

    def _next_event(self, timeout: float) -> JobEvent | None:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def _handle(self, event: JobEvent) -> None:
        if self._rank_words(event):
            return
        match event:
            case RankEnded(launch=launch, rank=rank) if launch == self.launch:  # not a late word from an earlier launch
                self._rank_failed(rank)
            case RankAnswered(address=address, answer=answer):
                self._answered(address, answer)
            case PoolStopping(reason=reason):
                self.pool_stopping(reason)
            case CancelRequested(reason=reason):
                self.cancel_requested(reason)
            case WorkerRemoved(address=address) if address in self.pending and address not in self.killed:
                self.gone.add(address)  # its answer (an error) follows; the others stop now
                self._stop(StopCause.FAILED, None)

    def interrupt(self) -> None:
        if self.stopping is StopCause.INTERRUPTED:
            self._end_stuck(everyone=True)  # a second interrupt: do not wait for the grace period
            return
        self.stopping, self.stop_message = StopCause.INTERRUPTED, INTERRUPTED_FROM_THE_NOTEBOOK
        self._cancel()

    def _interrupted_how(self) -> str:
        """``interrupted``, or who cancelled it (a detached job's cancel says)."""
        if self.stop_message in (None, INTERRUPTED_FROM_THE_NOTEBOOK):
            return "interrupted"
        return str(self.stop_message)

    def cancel_requested(self, reason: str) -> None:
        """Stop the job as an interrupt does, saying who asked (a detached job's cancel)."""
        if self.stopping is not StopCause.INTERRUPTED:
            self.stopping, self.stop_message = StopCause.INTERRUPTED, reason
            self._cancel()

    def pool_stopping(self, reason: str) -> None:
        """The pool is about to stop (budget, idle timeout, a stop from elsewhere): end the job first."""
        if self.stopping is not StopCause.POOL_STOPPED:
            self.stopping, self.stop_message = StopCause.POOL_STOPPED, reason
            self._cancel()

    # -- events --------------------------------------------------------------------------------
    def _fresh(self, event: RankOutput | RankProgress | RankMetrics | RankLineage) -> bool:
        """Count a word of this launch's ranks; False for one already had from its rank's answer
        (the answer carries copies of a rank's few words: ``RankOutcome.replay``)."""
        if event.launch != self.launch or event.seq < 0:
            return True  # a late word (of an earlier launch, or after its rank's code ended): shown, not counted
        had = self.received.get(event.rank, 0)
        if 0 <= event.seq < had:
            return False
        self.received[event.rank] = max(had + 1, event.seq + 1)
        return True

    def _replay(self, messages: list[dict[str, Any]]) -> None:
        """The words a rank's answer carries, those the events have not brought yet."""
        for message in messages:
            try:
                event = rank_event(message)
            except (KeyError, TypeError, ValueError):
                continue
            self._rank_words(event)

    def _rank_words(self, event: JobEvent | None) -> bool:
        """Show or keep a rank's output, bar state or ``gg.log`` values; False for any other event."""
        match event:
            case RankOutput():
                self._output(event)
            case RankProgress():
                self._progress(event)
            case RankMetrics():
                self._metrics(event)
            case RankLineage():
                self._lineage(event)
            case _:
                return False
        return True

    def _output(self, event: RankOutput) -> None:
        if self._fresh(event):
            self._show(event.rank, event.stream, event.text)

    def _progress(self, event: RankProgress) -> None:
        if not self._fresh(event):
            return
        if self.sinks.on_progress is None:
            return
        try:
            self.sinks.on_progress(event.rank, dict(event.progress))
        except Exception as e:  # the display failing must not lose the job
            log.warning("could not show the progress of rank %s: %s", event.rank, e)

    def _metrics(self, event: RankMetrics) -> None:
        if event.launch == self.launch and self._fresh(event):
            self.logs.write_metrics(event.rank, event.rows)
            if self.sinks.slow_ranks is not None:
                self.sinks.slow_ranks.add(event.rank, event.rows)

    def _lineage(self, event: RankLineage) -> None:
        if self._fresh(event) and self.sinks.on_lineage is not None:
            try:
                self.sinks.on_lineage(event.record)
            except Exception as e:  # the registry failing must not lose the job
                log.warning(
                    "job %s: could not keep rank %d's lineage record %s: %s", self.job_id, event.rank, event.record, e
                )

    def _show(self, rank: int, stream: str, text: str) -> None:
        self._keep(rank, text)
        try:
            self.sinks.on_output(rank, stream, text)
        except Exception as e:  # the display failing must not lose the job
            log.warning("could not show output of rank %d: %s", rank, e)

    def _keep(self, rank: int, text: str) -> None:
        self.logs.write(rank, text)

    def _rank_failed(self, rank: int, at_once: bool = False) -> None:
        """A rank failed (or reported that it will): stop the others ``PEER_STOP_DELAY_S`` from now,
        or ``at_once`` (its worker is gone)."""
        if rank not in self.ended:
            self.ended.append(rank)
        if at_once:
            self._stop(StopCause.FAILED, None)
        elif self.stopping is None and self.peers_stop_due.at is None:
            self.peers_stop_due.arm(time.monotonic() + PEER_STOP_DELAY_S)

    def _answered(self, address: str, wire: bytes | BaseException) -> None:
        if address not in self.pending:
            return
        answer = outcome_from_wire(wire) if isinstance(wire, bytes) else wire
        self.pending.discard(address)
        self.answers[address] = answer
        if isinstance(answer, RankOutcome):
            self.gone.discard(address)  # it answered: its process is alive
            if answer.replay:
                self._replay(answer.replay)
            done = {"ok": "done", "cancelled": "stopped", "busy": "failed", "stale": "stopped"}
            self.logs.update_states({answer.rank: done.get(answer.status, answer.status)})
            if self.pending:  # the others may wait for it in a call it will never make
                self.stranded.rank_finished(answer.rank, time.monotonic())
            for stream, text in answer.output:  # --no-stream: shown now, in one piece
                self._show(answer.rank, stream, text)
            if answer.status != "ok":
                if answer.group_kept and self.pending and self.kept_groups_due.at is None:
                    self.kept_groups_due.arm(time.monotonic() + KEPT_GROUP_GRACE_S)
                self._rank_failed(answer.rank)
        else:
            self.gone.add(address)
            self._rank_failed(self.layout.slot_of(address).rank, at_once=True)

    def group_intact(self) -> bool:
        """Every launched rank answered, done or stopped with its group kept, no group was dropped,
        and every rank of every group stopped at the same call (torch's sequence numbers): the
        process group, and the ranks' names, serve the next job as they are, as IPython keeps a
        notebook's names across a failed cell."""
        answers = list(self.answers.values())
        return (
            not self.kept_groups_dropped
            and not self.gone
            and not self.pending
            and set(self.answers) == set(self.launched)
            and all(isinstance(a, RankOutcome) and (a.status == "ok" or a.group_kept) for a in answers)
            and in_step([a.sequences for a in answers if isinstance(a, RankOutcome)])
        )

    def sequences_at_end(self) -> dict[int, dict[str, int] | None] | None:
        """Each rank's groups' sequence numbers as its cell ended, by rank (see ``rank.group_sequences``);
        None unless every launched rank answered."""
        outcomes = [a for a in self.answers.values() if isinstance(a, RankOutcome)]
        if self.pending or len(outcomes) != len(self.launched):
            return None
        return {outcome.rank: outcome.sequences for outcome in outcomes}

    def ranks_that_left_the_group(self) -> list[int]:
        """The ranks of a done cell that destroyed their process group (``dist.destroy_process_group()``)."""
        return sorted(a.rank for a in self.answers.values() if isinstance(a, RankOutcome) and a.left_group)

    def _drop_kept_groups(self) -> None:
        """Other ranks still run past the grace: those that failed let go of their groups (see
        ``KEPT_GROUP_GRACE_S``)."""
        self.kept_groups_due.at = None
        if not self.pending:
            return
        kept = [a for a, answer in self.answers.items() if isinstance(answer, RankOutcome) and answer.group_kept]
        self.kept_groups_dropped = True
        self.transport.fire(rank_side.drop_kept_group, kept, self.group.generation)

    # -- stopping ------------------------------------------------------------------------------
    def _stop(self, reason: StopCause, message: str | None) -> None:
        if self.stopping is None:
            self.stopping, self.stop_message = reason, message
            self._cancel()

    def _cancel(self) -> None:
        self.escalation.start(time.monotonic())
        self.transport.fire(rank_side.cancel_rank, sorted(self.pending - self.gone), self.launch)

    def _end_stuck(self, everyone: bool | None = None) -> EndWorkers:
        """Ask the ranks that did not stop where they are, and end the workers the escalation picks."""
        candidates = self.escalation.candidates(self.pending, self.gone)
        where = self.transport.ask(rank_side.where_rank, candidates, self.launch, timeout=2.0) if candidates else {}
        if self.stopping is not StopCause.FAILED:  # stuck after an interrupt, a timeout or a stop: say where
            self._note_where(where, candidates)
        # a worker that cannot even say where its rank is has a frozen interpreter (e.g. a C extension
        # waiting, with the GIL held, for a thread that needs the GIL): only its nanny can end it
        conditions = {a: RankCondition.of(where, a) for a in candidates}
        ended = self.escalation.decide(conditions, time.monotonic(), everyone)
        self.gone |= ended.addresses
        if ended.kill:
            self.transport.fire(rank_side.kill_rank, list(ended.kill), self.launch)
        self.roster.end_workers(list(ended.nanny))
        return ended

    def _note_where(self, where: dict[str, Any], asked: list[str]) -> None:
        """Keep the first report of where the ranks were (``group_where``'s text): a rank that did
        not answer is 'not responding'; ranks that had answered are 'finished'."""
        if self.where is not None or not asked:
            return
        from .where import group_where

        entries: dict[int, dict[str, Any] | None] = {}
        for slot in self.slots:
            if slot.address in asked:
                answer = where.get(slot.address)
                entries[slot.rank] = answer if isinstance(answer, dict) else None
            elif slot.address in self.answers:
                entries[slot.rank] = {"running": False}
        try:
            self.where = group_where(entries)
        except Exception as e:  # the report is an aid: the job's ending must not depend on it
            log.info("job %s: could not say where the ranks were: %s", self.job_id, e)

    def _look_for_stranded_ranks(self) -> None:
        """End the job when a rank waits in a call for a rank that will never enter it (see :mod:`.stranded`)."""
        waiting = sorted(self.pending - self.gone)
        where = self.transport.ask(rank_side.where_rank, waiting, self.launch, timeout=2.0) if waiting else {}
        message = self.stranded.judge(where, time.monotonic())
        if message is not None:
            self._stop(StopCause.CANNOT_COMPLETE, message)

    def _time_out(self) -> None:
        where = self.transport.ask(rank_side.where_rank, sorted(self.pending - self.gone), self.launch, timeout=3.0)
        where.update({a: {"running": False} for a in self.answers})
        self._note_where(where, sorted(self.pending - self.gone))
        absent = {slot.address for slot in self.layout.slots} - set(self.launched)
        where.update({a: {"absent": True} for a in absent})
        self._stop(StopCause.TIMEOUT, timeout_message(self.job_id, self.plan.timeout or 0.0, self.layout, where))

    def _drain_output(self) -> None:
        """Wait for output events the ranks sent before answering (they travel on another channel)."""
        expected = {a.rank: a.sent for a in self.answers.values() if isinstance(a, RankOutcome)}
        deadline = time.monotonic() + OUTPUT_DRAIN_S
        while any(self.received.get(r, 0) < n for r, n in expected.items()):
            event = self._next_event(timeout=max(0.0, deadline - time.monotonic()))
            if event is None:
                log.warning("job %s: some output of the ranks did not arrive", self.job_id)
                return
            self._rank_words(event)

    # -- the verdict ---------------------------------------------------------------------------
    def outcome(self) -> AttemptResult:
        result = self._outcome()
        result.where = self.where
        for rank, report in sorted(result.ranks.items()):  # the logs' readers see why a rank failed
            if report.traceback and not report.peer_failure:
                self.logs.write_traceback(rank, report.traceback)
        # on disk only if the attempt's states were written while it ran; else in the job's row
        self.logs.set_states({rank: rank_state(r.status) for rank, r in result.ranks.items()}, write=False)
        return result

    def _outcome(self) -> AttemptResult:
        import cloudpickle

        ranks = {slot.rank: self._report(slot.address) for slot in self.slots}
        answers = {slot.rank: self.answers.get(slot.address) for slot in self.slots}
        if all(isinstance(a, RankOutcome) and a.status == "ok" for a in answers.values()):
            try:
                values = {r: cloudpickle.loads(a.value_blob) if a.value_blob else None for r, a in answers.items()}  # type: ignore[union-attr]
            except Exception as e:  # e.g. a class this process cannot import
                return AttemptResult(
                    AttemptState.FAILED,
                    ranks,
                    failure=f"job {self.job_id}: the cell's values cannot be read here: {type(e).__name__}: {e}",
                )
            return AttemptResult(AttemptState.SUCCEEDED, ranks, values)
        reports = [ranks[r] for r in sorted(ranks)]
        if self.stopping is StopCause.POOL_STOPPED:
            return AttemptResult(
                AttemptState.POOL_STOPPED,
                ranks,
                stop_reason=self.stop_message,
                failure=f"job {self.job_id} was stopped with its pool: {self.stop_message} ({_summary(reports)})",
            )
        if self.stopping is StopCause.INTERRUPTED:
            return AttemptResult(
                AttemptState.INTERRUPTED,
                ranks,
                failure=f"job {self.job_id} was {self._interrupted_how()}; every rank stopped ({_summary(reports)})",
            )
        if self.stopping is StopCause.TIMEOUT:
            return AttemptResult(AttemptState.TIMED_OUT, ranks, failure=self.stop_message)
        if self.stopping is StopCause.CANNOT_COMPLETE:
            return AttemptResult(AttemptState.CANNOT_COMPLETE, ranks, failure=self.stop_message)
        # nothing of the user's failed: the job met a rebuilt group, a busy worker or a worker that had
        # gone before the job reached it; it runs again once the pool is whole
        not_started = [
            a
            for a in answers.values()
            if isinstance(a, WorkerGone) or (isinstance(a, RankOutcome) and a.status in ("busy", "stale"))
        ]
        own_failures = [
            a
            for a in answers.values()
            if not isinstance(a, WorkerGone)
            and not (
                isinstance(a, RankOutcome) and (a.status in ("ok", "busy", "stale", "cancelled") or a.peer_failure)
            )
        ]
        state = AttemptState.NOT_STARTED if not_started and not own_failures else AttemptState.FAILED
        attempt = AttemptResult(state, ranks)
        died = [self.layout.slot_of(a).rank for a in self.gone if a not in self.killed]
        primary = _primary_failure(reports, self.ended + sorted(died) + [r.rank for r in reports])
        if primary is not None:
            attempt.failed_rank, attempt.traceback = primary.rank, primary.traceback
            others = _group_others(primary, reports)
            attempt.failure = f"job {self.job_id} failed on {primary.describe()}" + (
                f"; {'; '.join(others)}" if others else ""
            )
            finished = [r.rank for r in reports if r.status == "ok"]
            if primary.peer_failure and finished:  # its peer left a call it never made (a script's rank exits)
                attempt.failure += (
                    f"; {format_ranks(finished)} had finished the job: a collective needs every rank of its "
                    "group to call it (call it on every rank, not under a condition such as `if rank == 0:`)"
                )
        else:
            attempt.failure = f"job {self.job_id} failed ({_summary(reports)})"
        return attempt

    def _report(self, address: str) -> RankReport:
        slot = self.layout.slot_of(address)
        answer = self.answers.get(address)
        report = RankReport(rank=slot.rank, host=slot.host, address=address, status="died", exit_code=None)
        if isinstance(answer, RankOutcome):
            report.status = {"busy": "failed", "stale": "cancelled"}.get(answer.status, answer.status)
            report.exit_code, report.error = answer.exit_code, answer.error
            report.traceback, report.peer_failure = answer.traceback, answer.peer_failure
        elif address in self.killed:
            report.status = "killed"
            report.error = "did not stop and its worker process was ended"
        else:
            pid = self.group.pids.get(address)
            death = self.transport.death_of(address, self.started_at)
            report.exit_code = death.get("exitcode")
            report.error = describe_death(f"its worker process{f' (pid {pid})' if pid else ''} at {address}", death)
            stderr_file = self.group.stderr_files.get(address)
            words = self._last_words(slot.host, address, stderr_file) if stderr_file else None
            if words is not None:  # what it wrote to stderr before it died
                report.traceback = f"the last words of rank {slot.rank} on stderr (pid {pid}):\n{words}\n"
            if answer is not None:
                log.info("rank %d: %s", slot.rank, answer)
        return report

    def _last_words(self, host: str, address: str, path: str) -> str | None:
        """What the dead worker at ``address`` wrote to its stderr file ``path`` in its job: read here
        when it ran on this host, else by a live worker of its host (another rank's, or the one its
        nanny started in its place, waited for up to :data:`LAST_WORDS_WAIT_S`); None when nothing
        was written or no worker there answers (then the file stays on that host, named)."""
        if interface_of(host) is not None:
            return last_words(path)

        def neighbour() -> str | None:
            there = [a for a, info in self.transport.live_workers().items() if info.get("host") == host]
            return next((a for a in sorted(there) if a != address), None)

        reader = wait_for(neighbour, timeout=LAST_WORDS_WAIT_S, interval=0.2)
        if reader is None:
            return f"(no worker of {host} is left to read them: they are in {path} there)"
        return self.transport.ask(last_words, [reader], path, timeout=3.0).get(reader)


LAST_WORDS_WAIT_S = 5.0  # for a live worker on a dead rank's host, to read its last words there


def in_step(sequences: list[dict[str, int] | None]) -> bool:
    """The ranks' groups' sequence numbers (by group name, as each rank ended) agree: no rank made a
    call on a group that another rank of it did not make, so nothing waits in the group for a peer."""
    return None not in sequences and not calls_ahead(dict(enumerate(sequences)))


def describe_death(process: str, death: dict[str, Any]) -> str:
    """How a rank's worker process ended, as torchrun says it (``exitcode: 3``), from what its nanny
    reported (:meth:`.transport.PoolTransport.death_of`): the exit status or signal, and for dask's
    memory kill the memory in use and the worker's limit."""
    code = death.get("exitcode")
    restarts = "the pool restarts it"
    if "rss" in death:
        limit = death.get("memory_limit")
        share = death.get("terminate")
        over = f"{float(share) * 100:.0f}%" if share else "the share set"
        of_limit = f", over {over} of its {_gib(limit)} memory limit" if limit else ""
        return (
            f"{process} was ended by its nanny for memory: {_gib(death['rss'])} in use{of_limit}"
            f"{f' (exitcode: {code})' if code is not None else ''}; {restarts}. Give each worker more memory "
            "(launch the pool with a larger worker_memory, e.g. 16GiB, or with fewer workers per host), or let "
            "it go further before the kill with dask's distributed.worker.memory.terminate (e.g. 0.98; false: no kill)"
        )
    if code is None:
        return f"{process} died during the job (killed, or out of memory); {restarts}"
    if code < 0:
        return f"{process} was killed by signal {-code} ({_signal_name(-code)}) during the job (exitcode: {code}); {restarts}"
    return f"{process} exited with status {code} during the job (exitcode: {code}); {restarts}"


def _gib(size: Any) -> str:
    return f"{float(size) / 2**30:.1f} GiB"


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"


def _primary_failure(reports: list[RankReport], arrival: list[int]) -> RankReport | None:
    """The rank that caused the failure: the first to fail on its own, else the first that died.

    Ranks that failed with the first one's very error are one cause, whichever answered first:
    the lowest of them is named, so the same code fails with the same message every run.
    """
    by_rank = {r.rank: r for r in reports}
    ordered = [by_rank[r] for r in arrival if r in by_rank]
    for candidates in (
        [r for r in ordered if r.status == "failed" and not r.peer_failure],
        [r for r in ordered if r.status == "died"],
        [r for r in ordered if r.status == "failed"],
        [r for r in ordered if r.status == "killed"],
    ):
        if candidates:
            first = candidates[0]
            alike = [r for r in candidates if r.error == first.error] if first.error else [first]
            return min(alike, key=lambda r: r.rank)
    return None


def _group_others(primary: RankReport, reports: list[RankReport]) -> list[str]:
    """The other ranks' ends, ranks that ended alike in one phrase: ``ranks 1-7 failed with the same
    error``, ``ranks 2-3 (host h) stopped``."""
    same = [
        r.rank
        for r in reports
        if r is not primary and r.status == primary.status == "failed" and r.error == primary.error
        if not r.peer_failure and r.error
    ]
    groups: dict[str, list[int]] = {}
    for report in reports:
        if report is primary or report.status == "ok" or report.rank in same:
            continue
        key = report.describe().replace(f"rank {report.rank} ", "\x00 ", 1)
        groups.setdefault(key, []).append(report.rank)
    phrases = [f"{format_ranks(same)} failed with the same error"] if same else []
    phrases += [key.replace("\x00", format_ranks(ranks), 1) for key, ranks in groups.items()]
    return phrases


def _summary(reports: list[RankReport]) -> str:
    """Every rank's end, ranks that ended alike in one phrase (``ranks 0-7 (host h) stopped``)."""
    groups: dict[str, list[int]] = {}
    for report in reports:
        groups.setdefault(report.describe().replace(f"rank {report.rank} ", "\x00 ", 1), []).append(report.rank)
    return "; ".join(key.replace("\x00", format_ranks(ranks), 1) for key, ranks in groups.items())


def timeout_message(job_id: str, timeout: float, layout: Layout, where: dict[str, Any]) -> str:
    """Which ranks wait in a collective and which had not arrived (and where they are)."""
    waiting: dict[str, list[int]] = {}
    behind: list[tuple[int, str]] = []
    for slot in layout.slots:
        info = where.get(slot.address)
        if isinstance(info, dict) and info.get("collective"):
            waiting.setdefault(info["collective"], []).append(slot.rank)
        elif isinstance(info, dict) and info.get("absent"):
            behind.append((slot.rank, "did not take part (--ranks)"))
        elif isinstance(info, dict) and info.get("running"):
            behind.append((slot.rank, f"at {info.get('at') or 'an unknown line'}"))
        elif isinstance(info, dict):
            behind.append((slot.rank, "had finished"))
        else:
            behind.append((slot.rank, "did not answer"))
    head = f"job {job_id} timed out after {timeout:g} s"
    if waiting:
        waits = "; ".join(f"{format_ranks(r)} waiting in {name}" for name, r in waiting.items())
        if behind:
            late = ", ".join(f"rank {r} {where}" for r, where in behind)
            return f"{head}: {format_ranks([r for r, _ in behind])} had not arrived ({late}); {waits}"
        return f"{head}: {waits} (every rank is in a collective: do they call the same ones in the same order?)"
    running = ", ".join(f"rank {r} {where}" for r, where in behind)
    return f"{head}: no rank was in a collective ({running})"
