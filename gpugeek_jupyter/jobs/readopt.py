"""Following a job whose driver died: a detached job taken over by a new agent, to its end.

A detached job runs on its pool's workers while the agent that launched it watches; on a pool whose
scheduler outlives that agent (a kept Slurm pool), the ranks go on when the agent is killed. The
next agent takes the pool back and calls :func:`follow_orphaned_job` for the job: it replays what
the ranks printed meanwhile (the scheduler keeps the newest ``distributed.admin.low-level-log-length``
events of the output topic; older ones are gone, and the stream says so), follows them live, asks
each worker where the job is, and when every rank has ended, collects their outcomes (each rank of
a detached job keeps its own until it is taken: ``rank.orphaned_rank``) and records the job's end.

What a taken-over job no longer has: restarts (its failure is final) and a timeout (its driver
counted it); a cancel still stops it on every rank.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..polling import wait_for
from ..store import JobStatus
from .events import RankOutput, RankProgress, rank_event
from .payload import OUTPUT_TOPIC, RankOutcome
from .rank import cancel_rank, drop_held_group, orphaned_rank
from .result import JobResult
from .transport import PoolTransport, own_client
from .watch import OutputCallback, ProgressCallback

if TYPE_CHECKING:
    from ..pools import Pool
    from ..store import JobRecord as JobRow

log = logging.getLogger(__name__)

POLL_S = 0.5
PEER_GRACE_S = 5.0  # after one rank failed, the others get this long before they are cancelled
LOST_GRACE_S = 10.0  # a rank no worker knows of for this long is lost
OUTPUT_GRACE_S = 2.0  # after the last rank ended, its last output events get this long to arrive


class _Output:
    """The job's rank events, each once and in order: the scheduler's log first, then live ones."""

    def __init__(self, job_id: str, since: float, on_output: OutputCallback, on_progress: ProgressCallback) -> None:
        self.job_id = job_id
        self.since = since
        self.on_output = on_output
        self.on_progress = on_progress
        self.seen: set[tuple[str, int, int]] = set()
        self.sent: dict[int, int] = {}  # rank -> output events seen (its outcome says how many it sent)
        self.lock = threading.Lock()
        self.live: list[dict[str, Any]] | None = []  # heard while the replay is written, then taken

    def receive(self, message: dict[str, Any]) -> None:
        with self.lock:
            if self.live is not None:
                self.live.append(message)
                return
        self._take(time.time(), message)

    def replay(self, logged: list[tuple[float, Any]]) -> int:
        """Write the scheduler's logged events (after ``since``), then those heard meanwhile."""
        count = 0
        for at, message in sorted(logged, key=lambda e: e[0]):
            if at > self.since and self._take(at, message):
                count += 1
        with self.lock:
            live, self.live = self.live or [], None
        for message in live:
            self._take(time.time(), message)
        return count

    def _take(self, at: float, message: Any) -> bool:
        if not isinstance(message, dict) or message.get("job") != self.job_id or "seq" not in message:
            return False
        key = (str(message.get("launch", "")), int(message["rank"]), int(message["seq"]))
        with self.lock:
            if key in self.seen:
                return False
            self.seen.add(key)
            self.sent[key[1]] = self.sent.get(key[1], 0) + 1
        try:
            event = rank_event(message)
        except (KeyError, TypeError, ValueError):
            return False
        if isinstance(event, RankOutput):
            self.on_output(event.rank, event.stream, event.text)
        elif isinstance(event, RankProgress):
            self.on_progress(event.rank, event.progress)
        return True


def follow_orphaned_job(
    pool: Pool,
    job: JobRow,
    since: float,
    on_output: OutputCallback,
    on_progress: ProgressCallback,
    on_notice: Callable[[str], None],
    cancelled: Callable[[], str | None] = lambda: None,
) -> JobResult:
    """Follow ``job`` (running on ``pool`` when its driver died) to its end and record it; its result.

    ``since``: the time of the last event the job's stream holds (older output is not replayed);
    ``cancelled()`` says why to stop it (None: go on).
    """
    client = own_client(pool.scheduler_address, pool.security)
    output = _Output(job.id, since, on_output, on_progress)
    try:
        PoolTransport(client, pool.name).subscribe(OUTPUT_TOPIC, output.receive)  # confirmed: nothing missed
        logged = client.get_events(OUTPUT_TOPIC)
        replayed = output.replay(list(logged))
        on_notice(
            f"a new gpugeek agent follows this job (the one that ran it ended): {replayed} output events "
            "from meanwhile replayed from the scheduler's log (it keeps the newest only), then live"
        )
        outcomes, cancel_reason = _wait_for_ranks(client, job, cancelled)
        _wait_for_output(output, outcomes)
        client.run(orphaned_rank, job.id, True)  # the ranks drop what they kept
    finally:
        client.close()
    result = _result(pool, job, outcomes, cancel_reason)
    pool.registry.finish_job(
        job.id,
        status=result.status,
        restarts=job.restarts,
        rank_exits=result.returncodes,
        failure_reason=result.failure,
        summary={"duration_s": round(result.duration_s, 4), "failed_rank": result.failed_rank, "taken_over": True},
    )
    return result


def _wait_for_ranks(
    client: Any, job: JobRow, cancelled: Callable[[], str | None]
) -> tuple[dict[int, RankOutcome], str | None]:
    outcomes: dict[int, RankOutcome] = {}
    cancel_reason: str | None = None
    failed_at: float | None = None
    unseen_since = time.monotonic()
    while True:
        answers = client.run(orphaned_rank, job.id)
        running = {a["rank"]: (address, a["launch"]) for address, a in answers.items() if a["state"] == "running"}
        holding = [a for a, answer in answers.items() if answer["state"] == "ended" and answer["outcome"].group_kept]
        for answer in answers.values():
            if answer["state"] == "ended":
                outcomes[answer["outcome"].rank] = answer["outcome"]
        if not running:
            if len(outcomes) >= job.ranks:
                return outcomes, cancel_reason
            if time.monotonic() - unseen_since > LOST_GRACE_S:  # no worker knows the missing ranks
                for rank in range(job.ranks):
                    outcomes.setdefault(
                        rank,
                        RankOutcome(rank=rank, status="failed", exit_code=None, error="its worker is gone"),
                    )
                return outcomes, cancel_reason
        else:
            unseen_since = time.monotonic()
        if failed_at is None and any(o.status != "ok" for o in outcomes.values()):
            failed_at = time.monotonic()
        why = cancel_reason or cancelled()
        peers_failed = failed_at is not None and time.monotonic() - failed_at > PEER_GRACE_S
        if running and (why is not None or peers_failed):
            cancel_reason = why
            for address, launch in running.values():
                client.run(cancel_rank, launch, workers=[address])
            if holding:  # a failed rank kept its group: a peer waiting for it in a collective gets out
                client.run(drop_held_group, job.id, workers=holding)
        time.sleep(POLL_S)


def _wait_for_output(output: _Output, outcomes: dict[int, RankOutcome]) -> None:
    """Give the output the ranks sent before answering up to ``OUTPUT_GRACE_S`` to arrive."""

    def all_arrived() -> bool:
        with output.lock:
            return all(output.sent.get(rank, 0) >= o.sent for rank, o in outcomes.items())

    wait_for(all_arrived, timeout=OUTPUT_GRACE_S, interval=0.05)


def _result(pool: Pool, job: JobRow, outcomes: dict[int, RankOutcome], cancel_reason: str | None) -> JobResult:
    import cloudpickle

    ranks = [outcomes[r] for r in sorted(outcomes)]
    failed = [o for o in ranks if o.status != "ok"]
    # the rank whose own error ended the job: before one stopped for it, before a peer's failure
    first = min(failed, key=lambda o: (o.peer_failure, o.status != "failed", o.rank), default=None)
    if cancel_reason is not None:
        status, failure = JobStatus.CANCELLED, f"cancelled: {cancel_reason}"
    elif first is not None:
        status, failure = JobStatus.FAILED, f"rank {first.rank} failed: {first.error or first.status}"
    else:
        status, failure = JobStatus.SUCCEEDED, None
    return JobResult(
        job_id=job.id,
        pool=pool.name,
        kind=job.kind,
        status=status,
        returncodes=[o.exit_code for o in ranks],
        values=[cloudpickle.loads(o.value_blob) if o.value_blob else None for o in ranks],
        duration_s=time.time() - (job.started_at or time.time()),
        restarts=job.restarts,
        failure=failure,
        failed_rank=first.rank if first is not None and cancel_reason is None else None,
        traceback=first.traceback if first is not None else None,
    )
