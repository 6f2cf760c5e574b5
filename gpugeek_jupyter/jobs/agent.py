"""The jobs agent: runs a job on every worker of a pool, one rank per worker, attempt by attempt.

Modelled on torchelastic's ``SimpleElasticAgent``: :meth:`JobAgent.run` owns the loop (wait for the
workers, build the process group when needed, launch the ranks, watch them, decide from the
attempt's :class:`~.state.AttemptState` whether to run again) and leaves each step to a module of
its own:

- :mod:`.roster`: which workers can take ranks, waiting for lost ones to be replaced;
- :mod:`.process_group`: a generation of the process group, kept warm between jobs;
- :mod:`.watch`: one attempt's output, failures, deaths, timeout and interrupt, then its result;
- :mod:`.record`: the one writer of the job's registry row;
- :mod:`.transport`: the only module that speaks to dask.

The process group is rebuilt when the workers change, after any failure, and around scripts (they
build their own; their workers are recycled afterwards, as torchrun starts fresh processes per run).
"""

from __future__ import annotations

import collections
import logging
import pickle
import queue
import secrets
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import GpugeekError, JobFailedError, PerSurface, Phrase, Value
from ..interrupts import outside_imports
from ..pools.versions import pool_software
from ..store import JobStatus
from . import rank as rank_side
from .events import CancelRequested, Events, PoolStopping, WorkerRemoved, rank_event
from .lineage import describe_software
from .logs import JobLogs, MetricsCallback
from .names import RanksHold, Shipment
from .output import format_ranks
from .payload import CANCEL_TOPIC, OUTPUT_TOPIC, CellCode, RankJob, RankOutcome, ScriptCode
from .pool_queue import PoolQueue, WaitCallback
from .process_group import ProcessGroup, ProcessGroupBuilder
from .rank_means import RankMeans
from .record import JobRecord
from .request import JobRequest, new_job_id
from .result import JobResult
from .roster import WorkerRoster
from .slow_ranks import SlowRanks
from .state import AttemptResult, AttemptState
from .tracking import MlflowRun, both, job_cost_usd, start_run
from .transport import PoolTransport
from .watch import AttemptPlan, AttemptSinks, AttemptWatch, OutputCallback, ProgressCallback

if TYPE_CHECKING:
    from ..pools import Pool
    from ..telemetry import Columns
    from .openlineage import LineageEvents

log = logging.getLogger(__name__)

NoticeCallback = Callable[[str], None]

NOT_STARTED_RETRIES = 2  # an attempt that met a rebuilt group or a vanished worker runs again this often
STOP_JOB_WAIT_S = 15.0  # a stopping pool waits this long for its running job to end
ENDED_JOBS_KEPT = 64  # the newest jobs whose ranks' late output still reaches their logs


class JobAgent:
    """Runs jobs on one pool, one at a time, keeping its process group warm between them."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.client = pool.client
        self.transport = PoolTransport(pool.client, pool.name)
        self.roster = WorkerRoster(pool, self.transport, self._worker_removed)
        self.groups = ProcessGroupBuilder(pool, self.transport, self.roster)
        self.group: ProcessGroup | None = None
        self._lock = threading.Lock()
        self._events: dict[str, Events] = {}  # job id -> what its watch hears
        # the newest jobs this agent ran -> ranks whose late output was marked as such
        self._ended: collections.OrderedDict[str, set[int]] = collections.OrderedDict()
        self._subscribed = False
        self._follows_cancels = False
        self._warm_generation: str | None = None  # the generation whose group every rank has joined
        self.queue = PoolQueue(pool)
        self._waiting: dict[str, str | None] = {}  # job id -> why it is to leave the queue (None: it waits on)
        self.holds = RanksHold()  # what the ranks hold of this process's notebook values
        # the generation of the group the last cell on every rank ran in, and its ranks' sequence
        # numbers on its groups as that cell ended (a rank ahead of the others made a call they did not)
        self._sequences_at_end: tuple[str, dict[int, dict[str, int] | None]] | None = None
        self._last_job: str | None = (
            None  # this agent's newest job: when it was the pool's previous one, the group is warm
        )

    # -- public --------------------------------------------------------------------------------
    @outside_imports  # the first job imports lazily while dask's threads import
    def run(
        self,
        request: JobRequest,
        on_output: OutputCallback | None = None,
        on_notice: NoticeCallback | None = None,
        on_progress: ProgressCallback | None = None,
        on_wait: WaitCallback | None = None,
        on_metrics: MetricsCallback | None = None,
    ) -> JobResult:
        """Run ``request`` on every worker, once its turn in the pool's queue came (``on_wait`` is
        told while it waits); the result also when the job failed. ``on_metrics(attempt, rank,
        rows)`` is told each batch of the ranks' ``gg.log`` values once kept.

        A ``KeyboardInterrupt`` (the notebook's interrupt) stops the job on every rank and returns a
        ``cancelled`` result; while the job waits, it leaves the queue (``cancelled while queued``).
        ``request.wait=False`` raises :class:`~gpugeek_jupyter.errors.PoolBusyError` on a busy pool.
        """
        request.validate()
        for notice in request.notices:
            (on_notice or log.info)(notice)
        output = on_output or (lambda rank, stream, text: None)
        if on_progress is None:  # a caller that asked for output but not for progress: bars as lines
            from .progress_text import TextProgress

            on_progress = TextProgress.through_output(output)
        job_id = request.job_id
        self._follow_cancels()
        record = JobRecord(self.pool, job_id, request)
        self._waiting[job_id] = None
        try:
            turn = self.queue.wait_turn(
                record,
                wait=request.wait,
                on_wait=on_wait,
                cancelled=lambda: self._waiting.get(job_id),
                submitted_by=request.submitted_by,
            )
        finally:
            self._waiting.pop(job_id, None)
        if turn.cancelled is not None:
            return JobResult(
                job_id=job_id,
                pool=self.pool.name,
                kind=request.kind,
                status=JobStatus.CANCELLED,
                returncodes=[],
                values=[],
                duration_s=0.0,
                failure=turn.cancelled,
                waited_s=turn.waited_s,
            )
        try:
            with self._lock:
                if turn.previous != self._last_job:  # another process ran ranks here since: its group is gone
                    self.group = None
                self._last_job = job_id
                result = self._run(job_id, record, request, output, on_notice or log.info, on_progress, on_metrics)
        except BaseException as e:  # between the turn and the run: the row must not stay running
            record.crashed(e)
            raise
        result.waited_s = turn.waited_s
        return result

    def end_job_before_stop(self, reason: str, timeout: float) -> bool:
        """Stop the running job, if any, because the pool is stopping; True once no job runs.

        The job's ranks are cancelled, then their workers ended when they do not stop (as for an
        interrupt), so even code that swallows exceptions and ignores signals ends; the job is
        recorded as cancelled with ``reason``.
        """
        for events in list(self._events.values()):
            events.put(PoolStopping(reason))
        if not self._lock.acquire(timeout=timeout):
            return False
        self._lock.release()
        self.roster.wait_for_restarts()
        return True

    def cancel(self, job_id: str, reason: str) -> bool:
        """Stop job ``job_id`` from another thread (a detached job's cancel): a waiting job leaves the
        queue, a running one stops as when interrupted; whether it was this agent's."""
        if job_id in self._waiting:
            self._waiting[job_id] = reason
            return True
        events = self._events.get(job_id)
        if events is None:
            return False
        events.put(CancelRequested(reason))
        return True

    # -- the loop ------------------------------------------------------------------------------
    def _run(
        self,
        job_id: str,
        record: JobRecord,
        request: JobRequest,
        on_output: OutputCallback,
        on_notice: NoticeCallback,
        on_progress: ProgressCallback | None,
        on_metrics: MetricsCallback | None = None,
    ) -> JobResult:
        started = time.monotonic()  # a timeout counts from here: the wait in the queue is apart
        deadline = started + request.timeout if request.timeout else None
        events: Events = queue.Queue()
        self._events[job_id] = events
        logs = JobLogs(job_id)
        run = self._tracking_run(job_id, request)
        lineage_events = self._lineage_events(job_id, request)
        logs.on_metrics = both(on_metrics, run.metrics if run is not None else None)
        record.also_tell = run.lineage if run is not None else None
        restarts, not_started = 0, 0
        sizes: list[int] = []  # the world size of each attempt that ran, when it changed (elastic jobs)
        try:
            self._subscribe()
            while True:
                attempt = self._attempt(
                    job_id, restarts, request, events, deadline, on_output, logs, record, on_progress, on_notice
                )
                if attempt.state is not AttemptState.NOT_STARTED and (not sizes or sizes[-1] != len(attempt.ranks)):
                    sizes.append(len(attempt.ranks))
                if attempt.state is AttemptState.NOT_STARTED and not_started < NOT_STARTED_RETRIES:
                    not_started += 1
                    continue
                if not attempt.state.restartable or restarts >= request.max_restarts:
                    break
                restarts += 1
                logs.mark_attempt(restarts)
                on_notice(f"job {job_id}: restarting ({restarts}/{request.max_restarts}) after {attempt.failure}")
        except JobFailedError as e:  # the pool could not give us workers
            attempt = AttemptResult(AttemptState.FAILED, failure=str(e))
            record.started(int(self.pool.spec.count))
        except KeyboardInterrupt:  # while waiting for workers, before any rank started
            attempt = AttemptResult(AttemptState.INTERRUPTED, failure=f"job {job_id} was interrupted before it started")
        finally:
            self._events.pop(job_id, None)
            self._ended[job_id] = set()  # its threads' late output goes to its logs from now on
            while len(self._ended) > ENDED_JOBS_KEPT:
                self._ended.popitem(last=False)
            logs.close()
        reports = attempt.reports()
        result = JobResult(
            job_id=job_id,
            pool=self.pool.name,
            kind=request.kind,
            status=attempt.status,
            returncodes=[r.exit_code for r in reports],
            values=attempt.values_in_rank_order(),
            duration_s=time.monotonic() - started,
            restarts=restarts,
            failure=attempt.failure,
            failed_rank=attempt.failed_rank,
            traceback=attempt.traceback,
            timed_out=attempt.state is AttemptState.TIMED_OUT,
            ranks=reports,
            output=[logs.text(r.rank) for r in reports],
            where=attempt.where,
            sizes=sizes or [len(reports)],
        )
        record.finished(result)
        if run is not None:
            unsent = run.end(result, job_cost_usd(self.pool.registry, job_id) if record.written else None)
            if unsent is not None:
                on_notice(unsent)
        if lineage_events is not None:
            records = self.pool.registry.lineage_of(job_id) if record.written else []
            unsent = lineage_events.end(result, records)
            if unsent is not None:
                on_notice(unsent)
        return result

    def _telemetry(self, start: float, end: float, collect: bool = True) -> Columns:
        """The pool's telemetry samples between ``start`` and ``end`` (with ``collect``, the workers'
        newest fetched first): MLflow's system metrics, a slow rank's likely cause."""
        from .. import telemetry

        return telemetry.samples_between(self.pool, start, end, collect)

    def _lineage_events(self, job_id: str, request: JobRequest) -> LineageEvents | None:
        """The job's OpenLineage events when ``GpugeekConfig.openlineage_target`` is set (see :mod:`.openlineage`)."""
        from ..config import get_config

        target = get_config().openlineage_target
        if not target:
            return None
        from .openlineage import job_name, start_events

        script = request.code.abspath if isinstance(request.code, ScriptCode) else None
        return start_events(target, job_id, job_name(self.pool.name, script))

    def _tracking_run(self, job_id: str, request: JobRequest) -> MlflowRun | None:
        """The job's MLflow run when ``GpugeekConfig.mlflow_tracking_uri`` is set (see :mod:`.tracking`)."""
        from ..config import get_config

        uri = request.track if isinstance(request.track, str) else get_config().mlflow_tracking_uri
        if not uri or request.track is False:
            return None
        spec = self.pool.spec
        params = {**request.hyperparams, "pool.gpu_type": spec.gpu_type, "pool.count": spec.count}
        params["pool.backend"] = spec.backend
        tags = {"gpugeek.job_id": job_id, "gpugeek.pool": self.pool.name, "gpugeek.kind": request.kind}
        tags["gpugeek.code_sha256"] = request.sha256
        software = pool_software(self.pool)
        if software:
            tags["gpugeek.software"] = describe_software(software)
        means = RankMeans(request.world_size(int(spec.count))) if get_config().mlflow_metrics == "mean" else None
        return start_run(uri, job_id, params, tags, self._telemetry, means)

    def _attempt(
        self,
        job_id: str,
        attempt_no: int,
        request: JobRequest,
        events: Events,
        deadline: float | None,
        on_output: OutputCallback,
        logs: JobLogs,
        record: JobRecord,
        on_progress: ProgressCallback | None = None,
        on_notice: NoticeCallback | None = None,
    ) -> AttemptResult:
        layout, changed = self.roster.ready_layout(request.min_ranks)
        request.check_ranks(layout.world_size)
        if changed or request.kind == "script" or self.group is None:
            self.group = self.groups.build(layout)
        group = self.group
        if request.ranks is not None and self._warm_generation != group.generation:
            self._warm_up()  # a cell on some ranks cannot bring the others into the group
        code, shipment = request.code, None
        if request.names is not None and isinstance(code, CellCode):  # send only what the ranks lack
            shipment = self.holds.plan(request.names, group.generation, request.ranks is None, code)
            code = shipment.code
        job = RankJob(
            job_id=job_id,
            attempt=attempt_no,
            max_restarts=request.max_restarts,
            generation=group.generation,
            backend=group.backend,
            master_addr=group.layout.master.host,
            master_port=group.master_port,
            code=code,
            amp=request.amp,
            stream=request.stream,
            launch=secrets.token_hex(4),
            cuda_visible=dict(group.cuda_visible),
            env=dict(request.env),
            pool=self.pool.name,
            keep_outcome=request.submitted_by is not None,  # detached: a new agent may have to collect it
        )
        blob = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)  # plain data; names are cloudpickled inside
        chosen = set(request.ranks) if request.ranks is not None else None
        launched = [s.address for s in group.layout.slots if chosen is None or s.rank in chosen]
        ended = self._sequences_at_end
        plan = AttemptPlan(
            job_id,
            job.launch,
            group,
            launched,
            deadline,
            request.timeout,
            started_at=time.time(),
            previous_sequences=ended[1] if ended is not None and ended[0] == group.generation else {},
        )
        self.transport.report_exits()  # the nannies say how a worker ended (asked once per pool)
        interrupted = False
        try:
            self.transport.launch(events, launched, rank_side.run_rank, blob)
            record.started(len(launched))
        except KeyboardInterrupt:
            interrupted = True
        # the watch is made while the ranks run (what they send meanwhile waits on ``events``); an
        # interrupt while it is made is taken as one: the ranks started, so a watch must stop them
        while True:
            try:
                watch = self._watch(plan, events, logs, on_output, on_progress, on_notice, record)
                break
            except KeyboardInterrupt:
                interrupted = True
        if interrupted:
            watch.interrupt()
        watch.wait()
        attempt = watch.outcome()
        if shipment is not None:
            self._took_names(shipment, attempt, watch, on_notice or log.info)
        sequences = watch.sequences_at_end() if request.kind == "cell" and request.ranks is None else None
        self._sequences_at_end = (group.generation, sequences) if sequences is not None else None
        left = watch.ranks_that_left_the_group() if attempt.ok else []
        if attempt.ok and request.ranks is None and request.kind == "cell" and not left:
            self._warm_generation = group.generation  # every rank has joined this generation's group
        elif left:  # each rank builds it again at its next cell: all together before a cell on some ranks
            self._warm_generation = None
        if request.kind == "script" or not (attempt.ok or watch.group_intact()):  # a script's group is gone with it
            self.group = None  # and a failed job's, unless no rank of it called torch.distributed
        # on every rank (a script's last line) they build it again together, names kept; on some, the
        # others would wait for them in a group they left: built again for the next cell
        if 0 < len(left) < len(group.layout.slots):
            self.group = None
            self.holds.lost()
            (on_notice or log.info)(
                f"{format_ranks(left)} ended the cell without its process group "
                "(dist.destroy_process_group() ran there, not on every rank): the group is built again for the "
                "next cell, and the names the ranks held go with it"
            )
        if watch.gone:
            self.roster.mark_dead(watch.gone)
        if request.kind == "script":  # fresh processes for the next job, as torchrun starts them per run
            self.roster.restart(set(group.layout.addresses) - watch.gone, "a script ran in them")
        return attempt

    def _watch(
        self,
        plan: AttemptPlan,
        events: Events,
        logs: JobLogs,
        on_output: OutputCallback,
        on_progress: ProgressCallback | None,
        on_notice: NoticeCallback | None,
        record: JobRecord,
    ) -> AttemptWatch:
        """The watch of a launched attempt, with where what its ranks send goes."""
        launched = set(plan.launched)
        slots = [slot for slot in plan.group.layout.slots if slot.address in launched]
        hosts = {slot.rank: slot.host for slot in slots}
        workers = {slot.rank: slot.address for slot in slots}
        tell = on_notice or log.info

        def say_slow(line: str) -> None:
            tell(line)
            record.note("slow_rank", line)  # the panel's job view and the monitor show it too

        slow_ranks = SlowRanks(plan.job_id, hosts, say_slow, workers, self._telemetry)
        sinks = AttemptSinks(logs, on_output, on_progress, slow_ranks, on_lineage=record.lineage)
        return AttemptWatch(self.transport, self.roster, plan, events, sinks)

    def _took_names(
        self, shipment: Shipment, attempt: AttemptResult, watch: AttemptWatch, on_notice: NoticeCallback
    ) -> None:
        """Record what the ranks hold now; say which of their own names the notebook's replaced."""
        outcomes = [a for a in watch.answers.values() if isinstance(a, RankOutcome)]
        if not attempt.ok:
            # a group kept through the failure keeps what the ranks held before; of this cell's
            # names, some may have arrived: they count as not sent, and the next cell sends them again
            if not watch.group_intact():
                self.holds.lost()  # the group is rebuilt: what the ranks held goes with it
            return
        self.holds.took(shipment, tuple(sorted({n for o in outcomes for n in o.dropped})))
        replaced = sorted({n for o in outcomes for n in o.replaced})
        if replaced:
            listed = ", ".join(repr(n) for n in replaced)
            on_notice(
                f"the notebook's new value of {listed} replaced what the ranks had assigned to "
                f"{'it' if len(replaced) == 1 else 'them'} (the notebook changed it since it last sent it; "
                "unchanged notebook names leave the ranks' own)"
            )

    def _warm_up(self) -> None:
        """Bring every rank into the current group with an empty cell (joining is collective: a cell
        run on some ranks only would wait for the others)."""
        from .cell import prepare_cell

        program = prepare_cell("None", {})
        request = JobRequest(code=program.code, sha256=program.sha256)
        job_id = f"{new_job_id()}-warm-up"
        events: Events = queue.Queue()
        self._events[job_id] = events
        try:
            attempt = self._attempt(
                job_id,
                0,
                request,
                events,
                time.monotonic() + 60.0,
                lambda rank, stream, text: None,
                JobLogs(job_id, on_disk=False),
                JobRecord(self.pool, job_id, request, kept=False),
            )
        finally:
            self._events.pop(job_id, None)
        if not attempt.ok:
            raise JobFailedError(
                f"pool '{self.pool.name}': its ranks could not join the process group: {attempt.failure}"
            )

    # -- events --------------------------------------------------------------------------------
    def _subscribe(self) -> None:
        """Receive rank output (confirmed, so that no early output is missed)."""
        if not self._subscribed:
            self.transport.subscribe(OUTPUT_TOPIC, self._dispatch)
            self._subscribed = True

    def _follow_cancels(self) -> None:
        """Stop this agent's jobs when another process asks (:mod:`.cancel`), from its first job on
        (confirmed, so that a cancel sent once the job is in the queue is not missed)."""
        if not self._follows_cancels:
            self.transport.subscribe(CANCEL_TOPIC, self._cancel_requested)
            self._follows_cancels = True

    def _cancel_requested(self, message: dict[str, Any]) -> None:
        job_id, reason = message.get("job"), message.get("reason")
        if isinstance(job_id, str):
            self.cancel(job_id, reason if isinstance(reason, str) and reason else "cancelled from another process")

    def _dispatch(self, message: dict[str, Any]) -> None:
        job_id = message.get("job", "")
        events = self._events.get(job_id)
        if events is None and message.get("late") and job_id in self._ended:
            self._keep_late(job_id, message)
            return
        if events is not None:
            try:
                event = rank_event(message)
            except (KeyError, TypeError, ValueError) as e:  # not one of ours (another release on the workers?)
                log.warning("job %s: dropped a rank's event it could not read (%r): %r", message["job"], e, message)
                return
            events.put(event)

    def _keep_late(self, job_id: str, message: dict[str, Any]) -> None:
        """What a thread of an ended job printed afterwards: into the job's logs (``%gpugeek_logs``),
        never into whatever cell runs now; the first of each rank's after a line that says so."""
        try:
            rank, text = int(message["rank"]), str(message["text"])
        except (KeyError, TypeError, ValueError):
            return
        said = self._ended.get(job_id)  # the job's thread may just have let it go
        if said is None:
            return
        if rank not in said:
            said.add(rank)
            text = "[gpugeek] written after the job ended:\n" + text
        logs = JobLogs(job_id)
        try:
            logs.write(rank, text)
        finally:
            logs.close()

    def _worker_removed(self, address: str) -> None:
        for events in list(self._events.values()):
            events.put(WorkerRemoved(address))


# -- one agent per pool ----------------------------------------------------------------------------
_agents: dict[int, JobAgent] = {}
_agents_lock = threading.Lock()


def end_jobs_before_stop(manager: Any, pool: Pool, reason: str) -> None:
    """The pool's running job ends, recorded with ``reason``, before its workers go (else it would
    fail as if its workers had died)."""
    with _agents_lock:
        agent = _agents.get(pool.id)
    if agent is not None and not agent.end_job_before_stop(reason, timeout=STOP_JOB_WAIT_S):
        log.warning(
            "pool %s: its job did not end within %.0f s of the stop; stopping the pool anyway",
            pool.name,
            STOP_JOB_WAIT_S,
        )


def cancel_job(job_id: str, reason: str) -> bool:
    """Stop job ``job_id`` wherever it runs or waits in this process; whether it was found."""
    with _agents_lock:
        agents = list(_agents.values())
    return any(agent.cancel(job_id, reason) for agent in agents)


def agent_for(pool: Pool) -> JobAgent:
    """The agent of ``pool`` in this process (made on first use, remade if the pool's client changed)."""
    with _agents_lock:
        agent = _agents.get(pool.id)
        if agent is not None and agent.client is pool.client and pool.client.status == "running":
            return agent
    if not pool.status.is_live or pool.client.status != "running":
        raise GpugeekError(
            Phrase(
                "pool {name} is {status}; {launch}",
                name=Value(pool.name),
                status=pool.status.value,
                launch=PerSurface(
                    core="launch a new one",
                    magic="launch a new one with %gpugeek_launch",
                    python="launch a new one with gpugeek_jupyter.launch(...)",
                ),
            )
        )
    from ..pools.versions import check_pool_versions

    check_pool_versions(pool)  # before this process's first job on it (a launched pool was checked at its launch)
    with _agents_lock:
        agent = _agents[pool.id] = JobAgent(pool)
        return agent
