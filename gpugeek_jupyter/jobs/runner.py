"""The driver: runs a job on every worker of a pool, one rank per worker.

Each rank is started with the worker's own ``run`` handler (the one ``client.run`` reaches through
the scheduler), called directly on the worker, one hop less each way; through the scheduler when
this process cannot reach a worker. Each rank answers when it ends; output comes back as dask
events (``Worker.log_event`` / ``Client.subscribe_topic``), and the scheduler's ``remove-worker``
event on each worker's topic tells at once that a worker died. Nothing here needs the cluster
object, only the pool's ``Client``: the same code drives a pool this process launched and one
attached by address (whose workers are sent this package when they lack it).

The process group is built once per pool layout (``prepare_generation``) and kept warm; it is
rebuilt when the workers change, after any failure, and around scripts (they build their own).
How an attempt is watched and stopped is in :mod:`.watch`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import pickle
import queue
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import GpugeekError, JobFailedError, PerSurface, Phrase, Value
from ..store import JobStatus
from . import rank as rank_side
from .layout import Layout, cuda_visible_devices, plan_layout, workers_from_scheduler_info
from .payload import CellCode, RankJob, ScriptCode
from .result import JobResult
from .watch import Attempt, AttemptWatch, OutputCallback, WorkerGone

if TYPE_CHECKING:
    from ..pools import Pool

log = logging.getLogger(__name__)

NoticeCallback = Callable[[str], None]

DIRECT_CONNECT_S = 5.0  # a worker not reachable within this is called through the scheduler
LAYOUT_FRESH_S = 2.0  # the worker list is re-read when older than this, or after a failure
RECYCLE_TIMEOUT_S = 20.0  # a worker recycled after a script is ended outright if it has not stopped by then
STOP_JOB_WAIT_S = 15.0  # a stopping pool waits this long for its running job to end
DEAD_FORGET_S = 15.0  # an ended worker still listed this long after is taken as alive after all


@dataclass
class JobRequest:
    """What to run and how; built by :func:`~.cell.prepare_cell` or :func:`~.script.prepare_script`."""

    code: CellCode | ScriptCode
    sha256: str
    hyperparams: dict[str, Any] = field(default_factory=dict)
    timeout: float | None = None
    max_restarts: int = 0
    stream: bool = True
    amp: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # the job's own variables (checked by job_env)

    @property
    def kind(self) -> str:
        return "script" if isinstance(self.code, ScriptCode) else "cell"

    def validate(self) -> None:
        from ..errors import SpecError

        if self.timeout is not None and not self.timeout > 0:
            raise SpecError(field="timeout", value=self.timeout, rule="a number of seconds > 0", example=600)
        if not isinstance(self.max_restarts, int) or self.max_restarts < 0:
            raise SpecError(field="max_restarts", value=self.max_restarts, rule="a whole number >= 0", example=2)
        from .job_env import check_job_env

        self.env = check_job_env(self.env)
        if self.amp not in (None, "bf16", "fp16"):
            raise SpecError(field="amp", value=self.amp, rule="bf16 or fp16", example="bf16")


def _lacks_package(answer: Any) -> bool:
    """The worker could not even load our function (dask passes the error on as its text)."""
    return isinstance(answer, Exception) and "No module named 'gpugeek_jupyter" in str(answer)


def _is_comm_error(error: BaseException) -> bool:
    from distributed.comm.core import CommClosedError

    return isinstance(error, CommClosedError | OSError | asyncio.TimeoutError)


def _post_answer(events: queue.Queue[tuple[str, Any]], address: str, future: Any) -> None:
    try:
        answer = future.result()
    except BaseException as e:  # the worker died, or could not be reached at all
        answer = e
    events.put(("done", (address, answer)))


def new_job_id() -> str:
    return f"job-{secrets.token_hex(4)}"


class PoolRunner:
    """Runs jobs on one pool, one at a time, keeping its process group warm between them."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.client = pool.client
        self._lock = threading.Lock()
        self.layout: Layout | None = None
        self._layout_checked_at = 0.0
        self.generation: str | None = None
        self.backend = "gloo"
        self.master_port = 0
        self.pids: dict[str, int] = {}
        self.cuda_visible: dict[str, str | None] = {}
        # workers ended or lost (address -> when): the scheduler must drop them before the next job
        self.dead: dict[str, float] = {}
        self._queues: dict[str, queue.Queue[tuple[str, Any]]] = {}
        self._subscribed = False
        self._unreachable: set[str] = set()  # workers this process cannot connect to directly
        self._reached: set[str] = set()  # workers it has connected to
        self._followed: set[str] = set()  # workers whose scheduler events we receive
        self._shipped = False  # this package was sent to the workers (they did not have it)
        self._tasks: set[asyncio.Future[Any]] = set()  # running calls (asyncio keeps only weak references)
        self._restarting: Any = None  # the nannies' restart of recycled workers, while it runs

    # -- public --------------------------------------------------------------------------------
    def run(
        self,
        request: JobRequest,
        on_output: OutputCallback | None = None,
        on_notice: NoticeCallback | None = None,
    ) -> JobResult:
        """Run ``request`` on every worker; the result also when the job failed.

        A ``KeyboardInterrupt`` (the notebook's interrupt) stops the job on every rank and returns a
        ``cancelled`` result.
        """
        request.validate()
        with self._lock:
            return self._run(request, on_output or (lambda rank, stream, text: None), on_notice or log.info)

    def end_job_before_stop(self, reason: str, timeout: float) -> bool:
        """Stop the running job, if any, because the pool is stopping; True once no job runs.

        The job's ranks are cancelled, then their workers ended when they do not stop (as for an
        interrupt), so even code that swallows exceptions and ignores signals ends; the job is
        recorded as cancelled with ``reason``.
        """
        for events in list(self._queues.values()):
            events.put(("pool-stopping", reason))
        if not self._lock.acquire(timeout=timeout):
            return False
        self._lock.release()
        restarting = self._restarting
        if restarting is not None:  # a recycle cut short by the stop would leave errors in the logs
            try:
                restarting.result(timeout=RECYCLE_TIMEOUT_S + 5.0)
            except Exception as e:
                log.info("pool %s: the restart of its workers did not finish before the stop: %s", self.pool.name, e)
        return True

    # -- one job -------------------------------------------------------------------------------
    def _run(self, request: JobRequest, on_output: OutputCallback, on_notice: NoticeCallback) -> JobResult:
        job_id = new_job_id()
        started = time.monotonic()
        deadline = started + request.timeout if request.timeout else None
        registry = self.pool.registry  # the registry that holds this pool's row
        events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._queues[job_id] = events
        outputs: dict[int, list[str]] = {}
        recorded = False
        attempt_no, retries = 0, 0
        attempt: Attempt | None = None
        try:
            self._subscribe()
            while True:
                layout = self._ready_layout()
                if request.kind == "script" or self.generation is None:
                    self._prepare(layout)

                def record(world_size: int = layout.world_size) -> None:  # while the ranks run
                    nonlocal recorded
                    if not recorded:
                        registry.add_job(
                            job_id,
                            self.pool.id,
                            self.pool.name,
                            request.kind,
                            request.sha256,
                            world_size,
                            request.hyperparams,
                        )
                        recorded = True

                attempt = self._attempt(job_id, attempt_no, request, events, deadline, on_output, outputs, record)
                if attempt.retry and retries < 2:
                    retries += 1
                    continue
                restartable = not (attempt.ok or attempt.timed_out or attempt.interrupted or attempt.stopped_by)
                if not restartable or attempt_no >= request.max_restarts:
                    break
                attempt_no += 1
                on_notice(f"job {job_id}: restarting ({attempt_no}/{request.max_restarts}) after {attempt.failure}")
        except JobFailedError as e:  # the pool could not give us workers
            attempt = Attempt(reports=[], values=[], status=JobStatus.FAILED, failure=str(e))
            if not recorded:
                registry.add_job(
                    job_id,
                    self.pool.id,
                    self.pool.name,
                    request.kind,
                    request.sha256,
                    int(self.pool.spec.count),
                    request.hyperparams,
                )
                recorded = True
        except KeyboardInterrupt:  # while waiting for workers, before any rank started
            attempt = Attempt(
                reports=[],
                values=[],
                status=JobStatus.CANCELLED,
                interrupted=True,
                failure=f"job {job_id} was interrupted before it started",
            )
        except BaseException as e:
            if recorded:
                registry.set_job_status(job_id, JobStatus.FAILED, failure_reason=f"{type(e).__name__}: {e}")
            raise
        finally:
            self._queues.pop(job_id, None)
        assert attempt is not None
        result = JobResult(
            job_id=job_id,
            pool=self.pool.name,
            kind=request.kind,
            status=attempt.status,
            returncodes=[r.exit_code for r in attempt.reports],
            values=attempt.values,
            duration_s=time.monotonic() - started,
            restarts=attempt_no,
            failure=attempt.failure,
            failed_rank=attempt.failed_rank,
            traceback=attempt.traceback,
            timed_out=attempt.timed_out,
            ranks=attempt.reports,
            output=["".join(outputs.get(r.rank, [])) for r in attempt.reports],
        )
        if recorded:
            registry.finish_job(
                job_id,
                status=result.status,
                restarts=result.restarts,
                rank_exits=result.returncodes,
                failure_reason=result.failure,
                summary={"duration_s": round(result.duration_s, 4), "failed_rank": result.failed_rank},
            )
        return result

    def _attempt(
        self,
        job_id: str,
        attempt_no: int,
        request: JobRequest,
        events: queue.Queue[tuple[str, Any]],
        deadline: float | None,
        on_output: OutputCallback,
        outputs: dict[int, list[str]],
        launched: Callable[[], None],
    ) -> Attempt:
        layout = self.layout
        assert layout is not None and self.generation is not None
        job = RankJob(
            job_id=job_id,
            attempt=attempt_no,
            max_restarts=request.max_restarts,
            generation=self.generation,
            backend=self.backend,
            master_addr=layout.master.host,
            master_port=self.master_port,
            code=request.code,
            amp=request.amp,
            stream=request.stream,
            launch=secrets.token_hex(4),
            cuda_visible={a: v for a, v in self.cuda_visible.items() if v is not None},
            env=dict(request.env),
            pool=self.pool.name,
        )
        blob = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)  # plain data; names are cloudpickled inside
        watch = AttemptWatch(self, job_id, job.launch, layout, events, deadline, request.timeout, on_output, outputs)
        try:
            self._launch(events, layout.addresses, rank_side.run_rank, blob)
            launched()
        except KeyboardInterrupt:
            watch.interrupt()
        watch.wait()
        attempt = watch.outcome()
        if not attempt.ok or request.kind == "script":  # a script's group is gone with it
            self.generation = None
        if watch.gone:
            self._mark_dead(watch.gone)
        if request.kind == "script":
            self._recycle(set(layout.addresses) - watch.gone)
        return attempt

    def _recycle(self, addresses: set[str]) -> None:
        """Give the next job fresh worker processes for these, as torchrun starts fresh ones per run.

        A script leaves its process groups, models and imports behind; freeing a gloo group in a
        live worker can freeze it (see ``rank._Runtime.script_leftovers``). The nannies restart the
        workers (ending them outright if they do not stop); the next job waits for the pool to heal.
        """
        self._restart_in_background(addresses, "a script ran in them")

    def _restart_in_background(self, addresses: set[str], why: str) -> None:
        """Have the nannies restart these workers; the next job waits for the pool to heal.

        Workers without a nanny (``dask worker --no-nanny``) cannot be restarted: they stay in use.
        """
        if not addresses:
            return
        self._mark_dead(addresses)

        async def restart() -> None:
            try:
                await self.client._restart_workers(
                    workers=sorted(addresses), timeout=RECYCLE_TIMEOUT_S, raise_for_error=False
                )
            except Exception as e:  # e.g. no nanny: the same processes go on serving jobs
                log.warning("pool %s: could not restart workers %s (%s): %s", self.pool.name, sorted(addresses), why, e)
                for address in addresses:
                    self.dead.pop(address, None)

        self._restarting = asyncio.run_coroutine_threadsafe(restart(), self._loop())

    # -- dask plumbing -------------------------------------------------------------------------
    def _launch(
        self, events: queue.Queue[tuple[str, Any]], addresses: list[str], function: Callable[..., Any], *args: Any
    ) -> None:
        """Run ``function(*args)`` on each worker; each answer (a ``RankOutcome``, or the error that
        replaced it when the worker died) arrives on ``events`` as ``("done", (address, answer))``."""

        async def launch_all() -> None:  # one wake-up of the event loop for all ranks
            for address in addresses:
                task = asyncio.ensure_future(self._call(address, function, *args))
                task.add_done_callback(functools.partial(_post_answer, events, address))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

        asyncio.run_coroutine_threadsafe(launch_all(), self._loop())

    def _loop(self) -> asyncio.AbstractEventLoop:
        """The event loop of the pool's client, where its comms live."""
        return self.client.loop.asyncio_loop  # type: ignore[union-attr]

    async def _call(self, address: str, function: Callable[..., Any], *args: Any) -> Any:
        """The worker's ``run`` handler (what ``client.run`` reaches through the scheduler), called
        directly on the worker: one hop less each way. Through the scheduler when this process cannot
        reach the worker (a pool attached across networks)."""
        from distributed.core import clean_exception
        from distributed.protocol.pickle import dumps

        if address not in self._unreachable:
            try:
                connecting = self.client.rpc.connect(address)
                # a worker reached before answers at once (pooled connection); a new one gets a deadline
                comm = await (
                    connecting if address in self._reached else asyncio.wait_for(connecting, DIRECT_CONNECT_S)
                )
            except (OSError, asyncio.TimeoutError) as e:
                if address in self._reached:  # it was reachable: it went away before the job reached it
                    raise WorkerGone(f"worker {address} is gone ({e})") from e
                log.info(
                    "pool %s: worker %s not reachable directly (%s); going through the scheduler",
                    self.pool.name,
                    address,
                    e,
                )
                self._unreachable.add(address)
            else:
                self._reached.add(address)
                from distributed.core import send_recv

                try:
                    response = await send_recv(
                        comm, op="run", function=dumps(function), args=dumps(args), kwargs=dumps({}), wait=True
                    )
                finally:
                    self.client.rpc.reuse(address, comm)
                if response["status"] == "OK":
                    return response["result"]
                _, error, tb = clean_exception(**response)
                raise (error or RuntimeError(str(response))).with_traceback(tb)
        answers = await self.client.run(function, *args, workers=[address], on_error="raise", asynchronous=True)
        return answers[address]

    def fire(self, function: Callable[..., Any], addresses: list[str], *args: Any) -> None:
        """Run ``function`` on workers without waiting for the answers."""
        if addresses:
            coroutine = self.client.run(function, *args, workers=addresses, on_error="ignore", asynchronous=True)
            asyncio.run_coroutine_threadsafe(coroutine, self._loop())

    def ask(
        self, function: Callable[..., Any], addresses: list[str], *args: Any, timeout: float = 3.0
    ) -> dict[str, Any]:
        """Run ``function`` on workers and wait (at most ``timeout`` s) for their answers.

        Each worker is asked on its own, so one that cannot answer (frozen, gone) is only missing
        from the answers instead of hiding the others'.
        """

        async def ask_each() -> dict[str, Any]:
            calls = {
                a: asyncio.ensure_future(
                    self.client.run(function, *args, workers=[a], on_error="return", asynchronous=True)
                )
                for a in addresses
            }
            done, pending = await asyncio.wait(calls.values(), timeout=timeout)
            for call in pending:
                call.cancel()
            answers: dict[str, Any] = {}
            for call in done:
                if call.exception() is None:
                    answers.update(call.result())
            return answers

        if not addresses:
            return {}
        future = asyncio.run_coroutine_threadsafe(ask_each(), self._loop())
        try:
            answers = future.result(timeout=timeout + 5.0)
        except Exception as e:
            log.info("workers did not answer %s: %s", getattr(function, "__name__", function), e)
            return {}
        if len(answers) < len(addresses):
            log.info(
                "workers %s did not answer %s within %.0f s",
                sorted(set(addresses) - set(answers)),
                getattr(function, "__name__", function),
                timeout,
            )
        return answers

    def end_workers(self, addresses: list[str]) -> None:
        """End worker processes from outside, through their nannies (for workers that cannot even
        answer: a frozen interpreter); the nannies start fresh ones and the pool heals."""
        if addresses:
            log.warning("pool %s: workers %s do not answer; ending them", self.pool.name, addresses)
            self._restart_in_background(set(addresses), "they did not answer")

    def _subscribe(self) -> None:
        """Receive rank output; confirmed with a probe event so that no early output is missed."""
        if self._subscribed:
            return
        self.client.subscribe_topic(rank_side.OUTPUT_TOPIC, self._on_event)
        probe = f"probe-{secrets.token_hex(4)}"
        arrived: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._queues[probe] = arrived
        try:
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline:
                self.client.log_event(rank_side.OUTPUT_TOPIC, {"job": probe})
                try:
                    arrived.get(timeout=0.05)
                    break
                except queue.Empty:
                    continue
        finally:
            self._queues.pop(probe, None)
        self._subscribed = True

    def _on_event(self, event: tuple[float, dict[str, Any]]) -> None:
        _, message = event
        events = self._queues.get(message.get("job", "")) if isinstance(message, dict) else None
        if events is not None:
            events.put(("ended" if "ended" in message else "out", message))

    # -- workers and the process group ---------------------------------------------------------
    def _ready_layout(self) -> Layout:
        """The pool's workers as ranks; waits for a worker that was lost to be replaced (the pool heals)."""
        from ..config import get_config

        now = time.monotonic()
        if self.layout is not None and not self.dead and now - self._layout_checked_at < LAYOUT_FRESH_S:
            return self.layout
        expected = max(1, int(self.pool.spec.count))
        heal_deadline = now + get_config().worker_start_timeout
        while True:
            workers = self.client.scheduler_info(n_workers=-1).get("workers", {})
            # forget addresses the scheduler dropped (gone for good) and ones that, long after, did not go
            self.dead = {a: t for a, t in self.dead.items() if a in workers and time.monotonic() - t < DEAD_FORGET_S}
            live = {a: w for a, w in workers.items() if a not in self.dead}
            if len(live) >= expected:
                break
            if time.monotonic() > heal_deadline:
                raise JobFailedError(
                    f"pool '{self.pool.name}' has {len(live)} of its {expected} workers ready after "
                    f"{get_config().worker_start_timeout:.0f} s; see its dashboard, or stop it and launch a new one"
                )
            time.sleep(0.05)
        layout = plan_layout(workers_from_scheduler_info(live))
        if self.layout is None or layout.slots != self.layout.slots:
            self.generation = None
            self._follow_workers(layout.addresses)
        self.layout, self._layout_checked_at = layout, time.monotonic()
        return layout

    def _follow_workers(self, addresses: list[str]) -> None:
        """Hear from the scheduler the moment a worker of the layout is removed (its own event topic)."""
        for address in self._followed - set(addresses):
            self.client.unsubscribe_topic(address)
        for address in set(addresses) - self._followed:
            self.client.subscribe_topic(address, functools.partial(self._on_worker_event, address))
        self._followed = set(addresses)

    def _on_worker_event(self, address: str, event: tuple[float, dict[str, Any]]) -> None:
        _, message = event
        if isinstance(message, dict) and message.get("action") == "remove-worker":
            self.dead[address] = time.monotonic()
            self._layout_checked_at = 0.0
            for events in list(self._queues.values()):
                events.put(("removed", address))

    def _ship_package(self) -> None:
        """Send this package to workers that do not have it (a pool attached by address), with dask's
        ``upload_file``: a zip put on each worker's ``sys.path``, also on workers that join later."""
        import tempfile
        import zipfile
        from pathlib import Path

        from .._version import __version__

        root = Path(__file__).resolve().parents[1]  # the gpugeek_jupyter package
        archive = Path(tempfile.mkdtemp(prefix="gpugeek-")) / f"gpugeek_jupyter-{__version__}.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
            for path in sorted(root.rglob("*")):
                relative = path.relative_to(root.parent)
                if path.is_file() and "__pycache__" not in relative.parts and "labextension" not in relative.parts:
                    bundle.write(path, relative.as_posix())
        log.info("pool %s: its workers lack gpugeek_jupyter; sending %s", self.pool.name, archive.name)
        self.client.upload_file(str(archive))
        self._shipped = True
        from ..telemetry import withdraw

        withdraw(self.pool, "its workers lack gpugeek_jupyter")  # else a restarted worker could not start

    def _mark_dead(self, addresses: set[str]) -> None:
        now = time.monotonic()
        self.dead.update({a: now for a in addresses})
        self._layout_checked_at = 0.0
        self.generation = None

    def _prepare(self, layout: Layout) -> None:
        """New process-group generation: fresh rendezvous store on rank 0's worker, old groups dropped."""
        for _ in range(3):
            generation = secrets.token_hex(8)
            slots = {slot.address: slot for slot in layout.slots}
            facts = self.ask(rank_side.prepare_generation, layout.addresses, generation, slots, timeout=60.0)
            if any(_lacks_package(answer) for answer in facts.values()) and not self._shipped:
                self._ship_package()
                facts = self.ask(rank_side.prepare_generation, layout.addresses, generation, slots, timeout=60.0)
            errors = {a: f for a, f in facts.items() if isinstance(f, Exception) and not _is_comm_error(f)}
            if errors:
                address, error = next(iter(errors.items()))
                raise JobFailedError(f"pool '{self.pool.name}': worker {address} cannot run jobs: {error}")
            bad = [a for a in layout.addresses if not isinstance(facts.get(a), dict) or facts[a].get("busy")]
            if not bad:
                break
            log.warning("pool %s: workers %s are stuck or gone; restarting them", self.pool.name, bad)
            self.fire(rank_side.kill_rank, bad, None)
            self._mark_dead(set(bad))
            layout = self._ready_layout()
        else:
            raise JobFailedError(f"pool '{self.pool.name}': workers {bad} did not become ready for a job")
        self.master_port = int(facts[layout.master.address]["port"])
        self.pids = {a: int(facts[a]["pid"]) for a in layout.addresses}
        own = {a: facts[a].get("own_gpu") for a in layout.addresses}
        self.backend = "cpu:gloo,cuda:nccl" if all(own.values()) else "gloo"
        self.cuda_visible = {}
        for host in layout.hosts():
            on_host = [s for s in layout.slots if s.host == host]
            visible = cuda_visible_devices([own[s.address] for s in on_host])
            self.cuda_visible.update({s.address: visible for s in on_host})
        self.generation = generation
        log.info(
            "pool %s: process group generation %s, %d ranks, store port %d, %s",
            self.pool.name,
            generation,
            layout.world_size,
            self.master_port,
            self.backend,
        )


# -- one runner per pool ---------------------------------------------------------------------------
_runners: dict[int, PoolRunner] = {}
_runners_lock = threading.Lock()


def end_jobs_before_stop(manager: Any, pool: Pool, reason: str) -> None:
    """A ``PoolManager.before_stop_hooks`` hook: the pool's running job ends, recorded with ``reason``,
    before its workers go (else it would fail as if its workers had died)."""
    with _runners_lock:
        runner = _runners.get(pool.id)
    if runner is not None and not runner.end_job_before_stop(reason, timeout=STOP_JOB_WAIT_S):
        log.warning(
            "pool %s: its job did not end within %.0f s of the stop; stopping the pool anyway",
            pool.name,
            STOP_JOB_WAIT_S,
        )


def runner_for(pool: Pool) -> PoolRunner:
    """The runner of ``pool`` in this process (made on first use, remade if the pool's client changed)."""
    with _runners_lock:
        runner = _runners.get(pool.id)
        if runner is not None and runner.client is pool.client and pool.client.status == "running":
            return runner
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
    with _runners_lock:
        runner = _runners[pool.id] = PoolRunner(pool)
        return runner
