"""What the agent does for its clients: owns kept pools, runs detached jobs, keeps their output.

One :class:`AgentService` per agent process, shared with every client through the agent's
manager (:mod:`.connection`), so each method is called on a thread of the manager's and answers
plain data. A detached job runs on a thread of its own here, through the same
:class:`~gpugeek_jupyter.jobs.agent.JobAgent` as an attached one (queue, restarts, timeouts,
checkpoints alike); its output goes to its stream (:mod:`.stream`) and, as for every job, to each
rank's log; its result (every rank's value) to a 0600 file beside them (:mod:`.results`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from ..config import get_config
from ..jobs.request import JobRequest
from ..polling import wait_for
from ..spec import PoolSpec
from .results import save_result
from .stream import StreamWriter

if TYPE_CHECKING:
    from ..jobs.result import JobResult

log = logging.getLogger(__name__)

AGENT_OWNER = "gpugeek agent"
STOPPING = "the gpugeek agent is stopping; try again in a moment (a new one starts)"
# kept pools whose cluster is not the agent's (an outside scheduler; a DaskCluster the operator keeps)
ATTACHED_AGAIN = ("address", "kubernetes")
ATTACH_AGAIN_WITHIN_S = 24 * 3600.0  # a kept attached pool whose agent was killed is attached again this long after
ROW_WAIT_S = 10.0  # a submitted job's registry row is written within this (its queue entry)


class AgentService:
    """The agent's one shared object."""

    def __init__(self) -> None:
        from ..runtime import get_pool_manager

        self.started = time.monotonic()
        self.manager = get_pool_manager()
        self.manager.owner = f"{AGENT_OWNER} (pid {os.getpid()})"
        # its kept Slurm pools run their scheduler apart, and bring an agent back should this one die
        self.manager.restart_command = (sys.executable, "-m", "gpugeek_jupyter.detached", "--ensure")
        self._runs: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._busy_at = time.monotonic()
        self.stopping = threading.Event()
        self._plugins: dict[str, Any] = {}
        self._taken_over_cancels: dict[str, str] = {}  # taken-over job id -> why it is to stop

    def register_plugin(self, plugin: Any, name: str) -> None:
        """Run ``plugin`` in this agent under ``name`` (once: a second one of that name replaces the
        first). Its hooks: ``start()``, ``busy() -> bool`` (a busy plugin keeps the agent from its idle
        exit, as a kept pool does) and ``close()`` (before the agent's jobs are cancelled)."""
        old = self._plugins.pop(name, None)
        if old is not None:
            old.close()
        self._plugins[name] = plugin
        plugin.start()

    # -- what clients call ----------------------------------------------------------------------
    def ping(self) -> dict[str, Any]:
        from .._version import __version__

        return {"pid": os.getpid(), "version": __version__, "uptime_s": round(time.monotonic() - self.started, 1)}

    def launch(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Launch a kept pool from ``spec`` (``PoolSpec.to_dict()``); its name, or the error's words."""
        if self.stopping.is_set():
            return {"error": STOPPING, "error_class": "AgentUnavailableError"}
        try:
            pool = self.manager.launch(PoolSpec.from_dict(spec))
        except Exception as e:  # the client shows it: the launch is the client's
            return {"error": str(e), "error_class": type(e).__name__}
        self._touch()
        return {"name": pool.name}

    def submit(self, pool_name: str, request_blob: bytes) -> dict[str, Any]:
        """Run a job (a pickled :class:`JobRequest`) on kept pool ``pool_name`` from now on, detached;
        its id, or the error's words."""
        if self.stopping.is_set():
            return {"error": STOPPING, "error_class": "AgentUnavailableError"}
        try:
            request: JobRequest = pickle.loads(request_blob)
            request.validate()
            pool = self.manager.get(pool_name)
        except Exception as e:
            return {"error": str(e), "error_class": type(e).__name__}
        run = threading.Thread(target=self._run, args=(pool, request), name=f"gpugeek-detached-{request.job_id}")
        with self._lock:
            self._runs[request.job_id] = run
        run.start()
        self._touch()
        self._wait_for_row(request.job_id, run)  # so that its handle finds it at once
        return {"job_id": request.job_id}

    def _wait_for_row(self, job_id: str, run: threading.Thread) -> None:
        from ..errors import NotFoundError

        def recorded_or_ended() -> bool:
            try:
                self.manager.registry.job(job_id)
            except NotFoundError:
                return not run.is_alive()
            return True

        wait_for(recorded_or_ended, timeout=ROW_WAIT_S, interval=0.01)

    def cancel(self, job_id: str, reason: str) -> dict[str, Any]:
        """Ask detached job ``job_id`` to stop (queued: it leaves the queue); whether it was ours."""
        from ..jobs.agent import cancel_job

        with self._lock:
            ours = job_id in self._runs and self._runs[job_id].is_alive()
        if ours and not cancel_job(job_id, reason):  # not the job agent's: one this agent took over
            self._taken_over_cancels[job_id] = reason
        return {"cancelled": ours}

    def status(self) -> dict[str, Any]:
        with self._lock:
            running = sorted(j for j, t in self._runs.items() if t.is_alive())
        return {"jobs": running, "pools": self.kept_pools()}

    def kept_pools(self) -> list[str]:
        """The live pools this agent owns."""
        return sorted(p.name for p in self.manager.pools() if p.owned and p.status.is_live)

    def shutdown(self) -> dict[str, Any]:
        """Stop the agent: its detached jobs are cancelled, its pools stopped."""
        self.stopping.set()
        return {"stopping": True}

    # -- life -----------------------------------------------------------------------------------
    def idle_for(self) -> float:
        """Seconds since the agent last had a live kept pool or a detached job (0 while it has)."""
        with self._lock:
            busy = any(t.is_alive() for t in self._runs.values())
            self._runs = {j: t for j, t in self._runs.items() if t.is_alive()}
        if busy or self.kept_pools() or any(plugin.busy() for plugin in list(self._plugins.values())):
            self._touch()
        return time.monotonic() - self._busy_at

    def should_exit(self) -> bool:
        return self.stopping.is_set() or self.idle_for() > get_config().agent_idle_seconds

    def close(self) -> None:
        from ..jobs.agent import cancel_job

        for plugin in list(self._plugins.values()):
            plugin.close()
        with self._lock:
            runs = dict(self._runs)
        for job_id, run in runs.items():
            if run.is_alive() and not cancel_job(job_id, "the gpugeek agent stopped"):
                self._taken_over_cancels[job_id] = "the gpugeek agent stopped"
        for run in runs.values():
            run.join(timeout=30)
        self.manager.shutdown()

    def take_back(self) -> list[str]:
        """Take back the pools a previous agent kept that outlived it (kept Slurm pools, whose
        scheduler runs in a keeper process), and follow their running detached jobs to the end;
        the pools' names. Called once, at start."""
        from ..pools.slurm.kept_scheduler import pools_to_take_back, take_back

        names = []
        for record in pools_to_take_back(self.manager.registry, AGENT_OWNER):
            try:
                pool = take_back(self.manager, record)
            except Exception:  # the keeper gives up in time and records why
                log.exception("could not take back pool %s", record.name)
                continue
            names.append(pool.name)
            for job in pool.registry.open_jobs(pool.id):
                if job.status.value == "running":
                    self._follow(pool, job)
        return names + self._attach_again()

    def _attach_again(self) -> list[str]:
        """Kept pools attached by address (``--backend address``) or on Kubernetes whose agent was
        killed: their scheduler is not the agent's (an outside one; a pod the operator keeps), so
        they are connected again under their name (a new record, a Kubernetes pool with the
        credentials its pods hold; what ran on them then failed with the old agent). Only pools lost so within
        :data:`ATTACH_AGAIN_WITHIN_S`, and only the newest of each name (a name used since is left)."""
        from ..store import OWNER_EXITED

        registry = self.manager.registry
        registry.mark_lost_pools(get_config().lost_after_seconds)
        names = []
        for record in registry.recent_pools(ended_since=time.time() - ATTACH_AGAIN_WITHIN_S):
            if (
                record.backend not in ATTACHED_AGAIN
                or record.status.value != "lost"
                or record.reason != OWNER_EXITED
                or not record.owner.startswith(AGENT_OWNER)
                or registry.latest_pool(record.name).id != record.id
            ):
                continue
            try:
                pool = self.manager.launch(PoolSpec.from_dict(record.spec), reconnect=True)
            except Exception as e:  # the scheduler is gone too: nothing to attach to
                log.info("kept pool %s not attached again: %s", record.name, e)
                continue
            registry.add_event(
                pool.id,
                "attached-again",
                f"attached again by a new gpugeek agent (its agent died with pool {record.id})",
            )
            names.append(pool.name)
        return names

    def _follow(self, pool: Any, job: Any) -> None:
        run = threading.Thread(target=self._run_taken_over, args=(pool, job), name=f"gpugeek-detached-{job.id}")
        with self._lock:
            self._runs[job.id] = run
        run.start()

    def _run_taken_over(self, pool: Any, job: Any) -> None:
        from ..jobs.readopt import follow_orphaned_job

        stream = StreamWriter.resume(job.id)
        status, failure = "failed", None
        result: JobResult | None = None
        try:
            result = follow_orphaned_job(
                pool,
                job,
                since=stream.last_at,
                on_output=stream.output,
                on_progress=stream.progress,
                on_notice=stream.notice,
                cancelled=lambda: self._taken_over_cancels.get(job.id),
            )
            status, failure = result.status.value, result.failure
            save_result(result)
        except BaseException as e:
            failure = f"the agent could not follow the job: {type(e).__name__}: {e}"
            log.exception("taken-over job %s", job.id)
            with contextlib.suppress(Exception):
                pool.registry.finish_job(job.id, "failed", job.restarts, [], failure, {"taken_over": True})
        finally:
            _end_stream(stream, status, failure, result)

    def _touch(self) -> None:
        self._busy_at = time.monotonic()

    def _run(self, pool: Any, request: JobRequest) -> None:
        from ..jobs.agent import agent_for

        stream = StreamWriter(request.job_id)
        status, failure = "failed", None
        result: JobResult | None = None
        try:
            result = agent_for(pool).run(
                request,
                on_output=stream.output,
                on_notice=stream.notice,
                on_progress=stream.progress,
                on_wait=lambda wait: stream.notice(wait.describe()) if wait is not None else None,
                on_metrics=stream.metrics,
            )
            status, failure = result.status.value, result.failure
            save_result(result)
        except BaseException as e:  # the job's row says so too (record.crashed)
            failure = f"the agent could not run the job: {type(e).__name__}: {e}"
            log.exception("detached job %s", request.job_id)
        finally:
            _end_stream(stream, status, failure, result)


def _end_stream(stream: StreamWriter, status: str, failure: str | None, result: JobResult | None) -> None:
    """The stream's end line, with the failing rank's traceback when the job has one."""
    if result is None or result.failed_rank is None:
        stream.end(status, failure)
    else:
        stream.end(status, failure, failed_rank=result.failed_rank, traceback=result.traceback)
