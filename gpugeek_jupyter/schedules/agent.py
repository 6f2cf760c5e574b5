"""The agent's side of schedules: a plugin of the per-user agent that runs each due occurrence as a
detached job (``agent_plugin(service)``, loaded by :mod:`gpugeek_jupyter.detached.process`).

Every :data:`TICK_S` it reads the active schedules from the registry (so a schedule made, paused
or deleted in any process counts at the next tick) and handles those that are due:

- **Occurrences missed** while no agent ran (it was killed, or the machine was off) run once when
  the agent is back, never as a burst, as anacron does: the run records how many it stood for
  (``missed``), and the next occurrence is the first one after now.
- **Overlap** (the previous run still going): ``skip`` (default) records a ``skipped`` run;
  ``queue`` lets one run wait for the previous one's end (a further one is skipped); ``replace``
  cancels the previous run's job and runs the new one after it.
- **Failures**: a failed run counts; ``max_failures`` of them in a row pause the schedule, saying so
  with the last failure (a success in between starts the count again). The next occurrence of a
  schedule still active runs as usual.
- **Pools**: an existing kept pool, or one launched for the run (``<schedule>-<run>``) and stopped
  after it; the pool's budget and walltime apply to the run as to any job.
- **Checkpoints**: each run gets ``GPUGEEK_CHECKPOINT_DIR`` (the schedule's folder with
  ``resume="latest"``, so ``gg.checkpoint`` there continues from the previous runs' newest whole
  checkpoint; a folder of the run's own otherwise) and ``GPUGEEK_RESUME_FROM`` (that checkpoint, or
  empty), recorded as the run's ``resumed_from``.
- **Restarts**: runs an earlier agent left ``running`` are followed to their job's end (a job on a
  pool that died with that agent ends failed, ``pool lost``); one left waiting is skipped.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..config import get_config
from ..errors import NotFoundError
from ..jobs.request import JobRequest, new_job_id
from ..spec import PoolSpec
from ..store import RunStatus, ScheduleRecord, ScheduleRun, ScheduleStatus
from ._schedule import CHECKPOINT_DIR_VARIABLE, RESUME_FROM_VARIABLE, checkpoint_folder, timing_of

log = logging.getLogger(__name__)

TICK_S = 0.25
JOB_POLL_S = 0.2
SWEEP_S = 1.0  # a followed job of an earlier agent: lost pools are swept this often


def agent_plugin(service: Any) -> ScheduleRunner:
    return ScheduleRunner(service)


@dataclass
class Flight:
    """A run in progress: its thread, its row, and its job once recorded."""

    run_id: int
    thread: threading.Thread | None = None
    job_id: str | None = None
    cancel_reason: str | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def alive(self) -> bool:
        return not self.done.is_set()


class ScheduleRunner:
    """Runs the user's schedules inside the agent (start / busy / close: the agent's plugin hooks)."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self.registry = service.manager.registry
        self._flights: dict[str, Flight] = {}  # schedule id -> its run in progress
        self._waiting: dict[str, int] = {}  # schedule id -> the run waiting for it to end
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpugeek-schedules", daemon=True)

    # -- plugin hooks -----------------------------------------------------------------------------
    def start(self) -> None:
        self._adopt()
        self._thread.start()

    def busy(self) -> bool:
        """Active schedules keep the agent up (their next run must come), as do runs in progress."""
        with self._lock:
            flying = any(f.alive() for f in self._flights.values())
        return flying or bool(self.registry.active_schedules())

    def close(self) -> None:
        """Stop ticking; runs in progress end with their jobs (the agent cancels those next)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    # -- the loop ---------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self.tick(time.time())
            except Exception:  # one bad tick must not end the schedules: say so, go on
                log.exception("schedules: a tick failed")

    def tick(self, now: float) -> None:
        active = {s.id: s for s in self.registry.active_schedules()}
        self._drop_waiting_of_inactive(active)
        for record in active.values():
            with self._lock:
                flight = self._flights.get(record.id)
                waiting = self._waiting.get(record.id)
            if waiting is not None and (flight is None or not flight.alive()):
                with self._lock:
                    del self._waiting[record.id]
                self.registry.start_run(waiting)
                self._launch(record, self.registry.run(waiting))
                flight = self._flights.get(record.id)
            if record.next_run_at <= now:
                self._occur(record, now, flight)

    def _occur(self, record: ScheduleRecord, now: float, flight: Flight | None) -> None:
        timing = timing_of(record)
        later = timing.count_between(record.next_run_at, now)  # due ones after the first, up to now
        due = record.next_run_at
        missed = 0
        if later:  # the agent was down: one run stands for all of them
            missed = later + 1
            due = _last_due(timing, record.next_run_at, now)
        self.registry.set_next_run(record.id, timing.next_after(now))
        busy = flight is not None and flight.alive()
        if not busy:
            run = self.registry.add_run(record.id, due, RunStatus.RUNNING, missed=missed)
            self._launch(record, run)
            return
        assert flight is not None
        holder = f"run {flight.run_id}" + (f" ({flight.job_id})" if flight.job_id else "")
        if record.overlap == "skip":
            self.registry.add_run(record.id, due, RunStatus.SKIPPED, missed, f"{holder} was still running")
            return
        with self._lock:
            already = self._waiting.get(record.id)
        if already is not None:
            self.registry.add_run(
                record.id, due, RunStatus.SKIPPED, missed, f"{holder} was still running and run {already} waited"
            )
            return
        run = self.registry.add_run(record.id, due, RunStatus.WAITING, missed=missed)
        with self._lock:
            self._waiting[record.id] = run.id
        if record.overlap == "replace":
            self._cancel(flight, f"replaced by the schedule's next run ({run.id})")

    def _drop_waiting_of_inactive(self, active: dict[str, ScheduleRecord]) -> None:
        with self._lock:
            gone = {s: r for s, r in self._waiting.items() if s not in active}
            for schedule_id in gone:
                del self._waiting[schedule_id]
        for run_id in gone.values():
            self.registry.end_run(run_id, RunStatus.SKIPPED, "the schedule was paused or deleted while it waited")

    # -- one run ----------------------------------------------------------------------------------
    def _launch(self, record: ScheduleRecord, run: ScheduleRun) -> None:
        flight = Flight(run.id)
        flight.thread = threading.Thread(
            target=self._run, args=(record, run, flight), name=f"gpugeek-schedule-{record.name}-{run.id}", daemon=True
        )
        with self._lock:
            self._flights[record.id] = flight
        flight.thread.start()

    def _run(self, record: ScheduleRecord, run: ScheduleRun, flight: Flight) -> None:
        status, reason = RunStatus.FAILED, None
        pool_name: str | None = None
        made = False
        try:
            pool_name, made = self._pool_for(record, run)
            job_id = self._submit(record, run, pool_name)
            flight.job_id = job_id
            if flight.cancel_reason is not None:  # replaced while its pool started
                self._cancel(flight, flight.cancel_reason)
            status, reason = self._follow(job_id)
        except Exception as e:
            reason = str(e) or type(e).__name__
            log.info("schedule %s run %d: %s", record.name, run.id, reason)
        finally:
            if made and pool_name is not None:
                self._stop_pool(pool_name)
            self._end(record, run.id, status, reason)
            flight.done.set()

    def _pool_for(self, record: ScheduleRecord, run: ScheduleRun) -> tuple[str, bool]:
        """The run's pool's name, and whether it was made for the run."""
        if record.pool_name is not None:
            try:
                pool = self.service.manager.get(record.pool_name)
            except NotFoundError:
                raise NotFoundError(
                    f"pool {record.pool_name!r} no longer exists (relaunch it with keep=True, or delete the "
                    "schedule and make one that launches a pool for each run)"
                ) from None
            if not pool.status.is_live:
                raise NotFoundError(f"pool {record.pool_name!r} no longer runs ({pool.status.value})")
            return pool.name, False
        import json

        options = {**json.loads(record.pool_spec_json or "{}"), "name": f"{record.name}-{run.id}"}
        spec = PoolSpec.from_dict(options)
        answer = self.service.launch(spec.to_dict())
        if "error" in answer:
            raise RuntimeError(f"its pool did not launch: {answer['error']}")
        return str(answer["name"]), True

    def _submit(self, record: ScheduleRecord, run: ScheduleRun, pool_name: str) -> str:
        request: JobRequest = pickle.loads(record.request)
        request.job_id = new_job_id()
        folder = checkpoint_folder(record, run.id)
        newest = newest_checkpoint(folder) if record.resume == "latest" else None
        request.env = {**request.env, CHECKPOINT_DIR_VARIABLE: folder, RESUME_FROM_VARIABLE: newest or ""}
        request.submitted_by = f"schedule {record.name}, run {run.id}"
        answer = self.service.submit(pool_name, pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))
        if "error" in answer:
            raise RuntimeError(answer["error"])
        self.registry.run_submitted(run.id, answer["job_id"], pool_name, newest)
        return str(answer["job_id"])

    def _follow(self, job_id: str) -> tuple[RunStatus, str | None]:
        """Wait for the job's end; the run's outcome."""
        swept = 0.0
        while True:
            record = self.registry.job(job_id)
            if record.status.is_final:
                return RunStatus(record.status.value), record.failure_reason
            if time.monotonic() - swept > SWEEP_S:
                swept = time.monotonic()
                self.registry.mark_lost_pools(get_config().lost_after_seconds)
            time.sleep(JOB_POLL_S)

    def _cancel(self, flight: Flight, reason: str) -> None:
        flight.cancel_reason = reason
        if flight.job_id is not None:
            self.service.cancel(flight.job_id, reason)

    def _stop_pool(self, pool_name: str) -> None:
        try:
            self.service.manager.stop(pool_name, reason="its scheduled run ended")
        except Exception:
            log.exception("schedules: pool %s made for a run did not stop", pool_name)

    def _end(self, record: ScheduleRecord, run_id: int, status: RunStatus, reason: str | None) -> None:
        if not self.registry.end_run(run_id, status, reason):
            return
        if status is RunStatus.CANCELLED:
            return  # replaced, or the agent stopped: not a failure of the script
        after = self.registry.count_outcome(record.id, failed=status is RunStatus.FAILED, why=reason)
        if after.status is ScheduleStatus.PAUSED and status is RunStatus.FAILED:
            log.warning("schedule %s: %s", record.name, after.reason)

    # -- after a restart --------------------------------------------------------------------------
    def _adopt(self) -> None:
        """Runs an earlier agent left open: end those whose job ended (one on a pool that died with
        that agent ends now, swept first), follow those whose job goes on, close the others. Before
        the first tick, so a catch-up occurrence never finds a dead run in its way."""
        self.registry.mark_lost_pools(get_config().lost_after_seconds)
        for run in self.registry.open_runs():
            if run.status is RunStatus.WAITING:
                self.registry.end_run(run.id, RunStatus.SKIPPED, "the agent stopped while it waited")
            elif run.job_id is None:
                self.registry.end_run(run.id, RunStatus.LOST, "the agent stopped before the run's job was recorded")
            elif (job := self.registry.job(run.job_id)).status.is_final:
                self._end(
                    self.registry.schedule(run.schedule_id), run.id, RunStatus(job.status.value), job.failure_reason
                )
            else:
                self._follow_adopted(run)

    def _follow_adopted(self, run: ScheduleRun) -> None:
        record = self.registry.schedule(run.schedule_id)
        flight = Flight(run.id, job_id=run.job_id)

        def follow() -> None:
            try:
                assert run.job_id is not None
                status, reason = self._follow(run.job_id)
                self._end(record, run.id, status, reason)
            except Exception:
                log.exception("schedules: following run %d of %s", run.id, record.name)
            finally:
                flight.done.set()

        flight.thread = threading.Thread(target=follow, name=f"gpugeek-schedule-{record.name}-{run.id}", daemon=True)
        with self._lock:
            self._flights[record.id] = flight
        flight.thread.start()


def _last_due(timing: Any, first: float, now: float) -> float:
    """The latest occurrence at or before ``now`` (``first`` is due, and more came after it)."""
    t = first
    while (following := timing.next_after(t)) <= now:
        t = following
        if timing.every_s is not None:  # jump: intervals are arithmetic
            steps = int((now - t) // timing.every_s)
            t += steps * timing.every_s
    return t


def newest_checkpoint(folder: str) -> str | None:
    """The newest whole checkpoint in ``folder``, of either kind (rank-0 file or sharded), by step."""
    from ..jobs.checkpoint_dir import CheckpointDir

    found: list[tuple[int, str]] = []
    for sharded in (False, True):
        try:
            store = CheckpointDir(folder, sharded=sharded)
            whole = store.whole()
        except (OSError, ValueError):
            continue
        if whole:
            step, name = whole[-1]
            found.append((step, str(store.path(name))))
    return max(found)[1] if found else None
