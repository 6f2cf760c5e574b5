"""What runs on each worker: one rank of a job.

The dask worker process is the rank's process: the nanny started it with multiprocessing *spawn*,
never fork, and it lives across jobs, so its process group stays warm between cells. Jobs run one
after the other on one thread of that process, the rank thread, never on the worker's event loop,
which stays free to answer the scheduler, forward output and take a cancel request.

The driver (:mod:`.runner`) calls these functions with the worker's ``run`` handler:

- :func:`prepare_generation` on every worker when the process group must be (re)built: drops the
  old group, takes the worker's slot, and on rank 0's worker starts the rendezvous store
  (torchrun's "agent store") on a port its OS picks;
- :func:`run_rank` runs the job and answers a :class:`~.payload.RankOutcome` (pickled); after its
  first call a worker serves it under an op of its own (:func:`.transport.answers_directly`);
- :func:`cancel_rank`, :func:`where_rank`, :func:`kill_rank` stop a job, say where a rank is, and,
  last resort for a rank stuck in C code, end the worker process so the nanny starts a fresh one;
- :func:`stack_rank` says where whatever job runs here is, with its stack (``%gpugeek_where``).

A rank that fails destroys its process group at once: its sockets close, so peers blocked in a
collective get an error instead of waiting for the gloo/NCCL timeout.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import ctypes
import functools
import importlib
import inspect
import linecache
import logging
import os
import pickle
import queue
import stat
import sys
import tempfile
import threading
import time
import traceback
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from . import capture, children, descriptors, rank_display, rank_group_init, rank_names
from .capture import Forwarder
from .diagnose import describe_stack, format_user_traceback, is_peer_failure, one_line
from .env import RANK_VARIABLES, build_worker_env, compile_cache_env, error_file_path, interface_of
from .layout import RankSlot
from .payload import OUTPUT_TOPIC, CellCode, RankJob, RankOutcome, ScriptCode, outcome_to_wire
from .rank_shell import rank_get_ipython
from .rank_stack import stack_frames
from .transport import answers_directly

log = logging.getLogger(__name__)

EXIT_CODE_KILLED = 70  # a worker ended by kill_rank exits with this status (EX_SOFTWARE)


class JobCancelled(BaseException):
    """Raised inside a rank's thread when the job is stopped (another rank failed, timeout, interrupt).

    A ``BaseException``, like ``KeyboardInterrupt``, so ``except Exception`` in user code does not
    swallow it.
    """


# -- per-process state ----------------------------------------------------------------------------
@dataclass
class _ActiveJob:
    job_id: str
    launch: str  # this attempt's token: a late cancel meant for an earlier attempt does not match
    rank: int
    thread: threading.Thread | None = None
    filename: str = ""
    in_user_code: bool = False
    cancelled: bool = False
    injected: bool = False  # a JobCancelled was raised into the thread
    finished: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Runtime:
    def __init__(self) -> None:
        self.generation: str | None = None
        self.group_ready = False
        self.group_builds = 0  # of this generation's group here (more than one: a cell destroyed it on every rank)
        self.store: Any = None  # TCPStore server when this worker is rank 0's
        self.active: _ActiveJob | None = None
        self.own_gpu: str | None = None
        self.slot: RankSlot | None = None  # this worker's place in the current generation
        self.thread: threading.Thread | None = None
        self.work: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.parent_env = dict(os.environ)  # the worker's environment before any job touched it
        self.lock = threading.Lock()
        # what scripts left (their __main__ namespaces: models, DDP reducers, process groups), kept
        # until the runner recycles this worker process after the script, as torchrun's processes end:
        # freed here instead, a gloo process group's destructor can wait, holding the GIL, for its own
        # thread that waits for the GIL (it still has to drop a work item captured during backward),
        # and the whole worker freezes
        self.script_leftovers: list[Any] = []
        # the processes below this worker between jobs, taken after each job has answered (off the
        # critical path, and listed only when a process was created since): a job that fails ends
        # those it started, and only those
        self.known_children = children.KnownChildren()
        # the names cells assigned on this rank, kept for the next cells (a REPL per rank) until the
        # process group is rebuilt: what they hold may be bound to the old group (DDP models)
        self.namespace: dict[str, Any] | None = None
        # the names cells had assigned when the group was rebuilt, and not since: a cell that reads one
        # is told where it went (IPython keeps names across a failed cell; a rebuilt group does not)
        self.dropped_names: frozenset[str] = frozenset()
        self.loop: asyncio.AbstractEventLoop | None = None  # where cells with a top-level await run
        # a detached job's last outcome here (job id, outcome), kept for a new agent to collect should
        # the one that launched it have died (jobs/readopt.py); replaced by the next such job
        self.kept_outcome: tuple[str, RankOutcome] | None = None

    def busy(self) -> bool:
        return _running(self.active)


def _running(active: _ActiveJob | None, launch: str | None = None) -> bool:
    if active is None or active.finished or active.thread is None or not active.thread.is_alive():
        return False
    return launch is None or active.launch == launch


_runtime = _Runtime()
DROPPED_NAME_NOTE = (
    "dropped with the rank's other names when the process group was rebuilt after a failed or interrupted "
    "cell, a change of workers, a script or a cell that left it on some ranks: run the cell that assigned it again"
)


# -- entry points for client.run --------------------------------------------------------------------
def prepare_generation(generation: str, slots: dict[str, RankSlot], dask_worker: Any = None) -> dict[str, Any]:
    """Forget the old process group and take this worker's slot; rank 0's worker also starts a fresh
    rendezvous store (torchrun's agent store) on a port its OS picks.

    Returns this worker's facts: pid, whether a previous job still runs (``busy``, and which:
    ``busy_job``), its GPU, the file its descriptor 2 goes to during jobs (``stderr_file``), and on
    the master the store's port (MASTER_PORT).
    """
    facts: dict[str, Any] = {"pid": os.getpid(), "busy": _runtime.busy(), "port": None, "own_gpu": _own_gpu()}
    with contextlib.suppress(OSError):  # a crash's last words, for the driver on this host
        facts["stderr_file"] = str(descriptors.stderr_file())
    if facts["busy"]:
        facts["busy_job"] = _runtime.active.job_id if _runtime.active is not None else None
        return facts
    # with those dropped before and not assigned since (the names every cell is given, rank, dist,
    # gg, ..., are never missing, so never looked up here)
    if _runtime.namespace is not None:
        _runtime.dropped_names |= {name for name in _runtime.namespace if not name.startswith("__")}
    _runtime.namespace = None  # freed while the old group still exists, as a cell's names were
    rank_names.reset()
    _drop_group()
    slot = slots[dask_worker.address]
    _runtime.generation, _runtime.slot, _runtime.store = generation, slot, None
    _runtime.group_builds = 0
    if slot.rank == 0:
        _runtime.store = _rendezvous_store(slot)
        facts["port"] = int(_runtime.store.port)
    return facts


def _rendezvous_store(slot: RankSlot) -> Any:
    """torchrun's agent store for a new process group, listening on ``MASTER_ADDR`` (rank 0's host)
    only, on a port the OS picks. (``TCPStore`` by itself listens on every interface; it is given a
    socket bound to that address instead.) Where the address cannot be bound: every interface."""
    import socket

    from torch.distributed import TCPStore

    try:
        family, kind, proto, _, address = socket.getaddrinfo(slot.host, 0, type=socket.SOCK_STREAM)[0]
        listener = socket.socket(family, kind, proto)
        try:
            listener.bind(address)
            listener.listen(socket.SOMAXCONN)
        except BaseException:
            listener.close()
            raise
    except OSError as e:
        log.info("rendezvous store: cannot listen on %s only (%s); listening on every interface", slot.host, e)
        return TCPStore(slot.host, 0, slot.world_size, is_master=True, wait_for_workers=False)
    port = listener.getsockname()[1]
    store = TCPStore(
        slot.host, port, slot.world_size, is_master=True, wait_for_workers=False, master_listen_fd=listener.detach()
    )
    return store


@answers_directly
async def run_rank(job_blob: bytes, dask_worker: Any = None) -> bytes:
    """Run this worker's rank of a job on its rank thread; answer when it has finished, with its
    :class:`~.payload.RankOutcome` pickled (:func:`~.payload.outcome_from_wire` reads it).

    A rank that fails also says so at once on the output topic, so that the driver can stop the
    other ranks before they answer.
    """
    job: RankJob = pickle.loads(job_blob)  # plain data: the notebook's objects are a cloudpickle inside
    slot = _runtime.slot
    early = None
    if slot is None or _runtime.generation != job.generation:
        early = RankOutcome(
            rank=slot.rank if slot else -1,
            status="stale",
            exit_code=None,
            pid=os.getpid(),
            error="the process group was rebuilt since",
        )
    elif _runtime.busy():
        early = RankOutcome(
            rank=slot.rank,
            status="busy",
            exit_code=None,
            pid=os.getpid(),
            host=slot.host,
            error="a previous job is still running on this worker",
        )
    if early is not None:
        _report_end(dask_worker, job, early)
        return outcome_to_wire(early)
    assert slot is not None
    loop = asyncio.get_running_loop()
    done: asyncio.Future[RankOutcome] = loop.create_future()
    active = _ActiveJob(job_id=job.job_id, launch=job.launch, rank=slot.rank)
    forwarder = Forwarder(dask_worker, loop, job.job_id, job.launch, slot.rank, job.stream)

    def finish(outcome: RankOutcome) -> None:
        if not done.done():
            done.set_result(outcome)

    def body() -> None:
        outcome = RankOutcome(rank=slot.rank, status="failed", exit_code=1, pid=os.getpid(), host=slot.host)
        try:
            outcome = _execute(job, slot, job.cuda_visible.get(slot.address), active, forwarder)
        except BaseException as e:  # a bug of ours, or a cancel that landed outside the user's code
            outcome.error = f"the rank's runner failed: {one_line(e)}"
            outcome.traceback = "".join(traceback.format_exception(e))
            _drop_group()
        finally:
            if job.keep_outcome:  # first: a collector never sees the job neither running nor ended
                _runtime.kept_outcome = (job.job_id, outcome)
            active.finished = True
            if outcome.status != "ok":
                _report_end(dask_worker, job, outcome)
            loop.call_soon_threadsafe(finish, outcome)
            _runtime.known_children.now()

    capture.install(threading.get_ident())
    active.thread = _rank_thread()
    _runtime.active = active
    _runtime.work.put(body)
    return outcome_to_wire(await done)


def _rank_thread() -> threading.Thread:
    """The thread that runs this worker's jobs, one after the other (started on first use).

    One thread for the worker's life: thread-local state (the CUDA device, grad mode) carries from
    cell to cell as it does in the notebook. A job stuck in it ends with the worker process.
    """
    with _runtime.lock:
        if _runtime.thread is None or not _runtime.thread.is_alive():
            _runtime.thread = threading.Thread(target=_serve, name="gpugeek-rank", daemon=True)
            _runtime.thread.start()
        return _runtime.thread


def _serve() -> None:
    while True:
        work = _runtime.work.get()
        try:
            work()
        except BaseException as e:  # work() reports its own errors; this keeps the thread alive
            log.warning("rank thread: %s", one_line(e))


def _report_end(worker: Any, job: RankJob, outcome: RankOutcome) -> None:
    try:
        worker.log_event(
            OUTPUT_TOPIC, {"job": job.job_id, "launch": job.launch, "rank": outcome.rank, "ended": outcome.status}
        )
    except Exception as e:  # the answer still carries it
        log.info("could not report the end of rank %d early: %s", outcome.rank, e)


def orphaned_rank(job_id: str, release: bool = False) -> dict[str, Any]:
    """Where job ``job_id`` is on this worker, for an agent that took it over: ``ended`` with the
    rank's outcome, ``running`` (its launch and rank), or ``unknown``; ``release`` drops a kept outcome."""
    kept = _runtime.kept_outcome
    if kept is not None and kept[0] == job_id:
        if release:
            _runtime.kept_outcome = None
        return {"state": "ended", "outcome": kept[1]}
    active = _runtime.active
    if active is not None and active.job_id == job_id and _running(active):
        return {"state": "running", "launch": active.launch, "rank": active.rank}
    return {"state": "unknown"}


def cancel_rank(launch: str) -> dict[str, Any]:
    """Stop the job's user code on this worker (an exception raised in its thread)."""
    active = _runtime.active
    if not _running(active, launch):
        return {"running": False}
    assert active is not None and active.thread is not None
    with active.lock:
        active.cancelled = True
        if active.in_user_code and active.thread.ident is not None:
            _async_raise(active.thread.ident, JobCancelled)
            active.injected = True
    return {"running": True}


def where_rank(launch: str) -> dict[str, Any]:
    """Where the job's thread is now: in a collective (which) or in user code (which line)."""
    active = _runtime.active
    if not _running(active, launch):
        return {"running": False}
    assert active is not None and active.thread is not None
    frame = sys._current_frames().get(active.thread.ident or -1)
    return {"running": True, **describe_stack(frame, active.filename)}


def stack_rank(dask_worker: Any = None) -> dict[str, Any]:
    """Where this worker's rank is now, whatever job it runs (``%gpugeek_where``, from any process):
    :func:`where_rank`'s answer plus the job id, the rank and the stack (:func:`.rank_stack.stack_frames`).

    ``{"running": False}`` when no job runs here; ``job_id`` and ``rank`` of the last job are kept, so a
    rank that finished before its peers says so.
    """
    active, slot = _runtime.active, _runtime.slot
    facts: dict[str, Any] = {"running": False, "pid": os.getpid()}
    if active is not None:
        facts.update(job_id=active.job_id, rank=active.rank, host=slot.host if slot else None)
        facts["world_size"] = slot.world_size if slot else None
    if not _running(active):
        return facts
    assert active is not None and active.thread is not None
    frame = sys._current_frames().get(active.thread.ident or -1)  # one snapshot for both views
    recorded = flight_recorder()
    return {
        **facts,
        "running": True,
        **describe_stack(frame, active.filename),
        "frames": stack_frames(frame, active.filename),
        **({"flight_recorder": recorded} if recorded is not None else {}),
    }


FLIGHT_RECORDER_VARIABLES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
FLIGHT_RECORDER_ENTRIES = 8  # the newest collectives of each rank kept in a where report


def flight_recorder() -> list[dict[str, Any]] | None:
    """The newest collectives torch's flight recorder holds for this process (NCCL's, and gloo's in
    recent torch), oldest first, when it is on (``TORCH_FR_BUFFER_SIZE`` or
    ``TORCH_NCCL_TRACE_BUFFER_SIZE`` > 0 when the process group was made); None when it is off."""
    if not any(os.environ.get(v, "0").strip() not in ("", "0") for v in FLIGHT_RECORDER_VARIABLES):
        return None
    import json

    try:
        import torch

        dump = getattr(torch._C._distributed_c10d, "_dump_fr_trace_json", None) or getattr(
            torch._C._distributed_c10d, "_dump_nccl_trace_json", None
        )
        if dump is None:
            return None
        entries = json.loads(dump(True, False)).get("entries", [])
    except Exception as e:  # an aid to the report: never a reason for it to fail
        log.info("the flight recorder could not be read: %s", e)
        return None
    return [
        {
            "seq": entry.get("collective_seq_id"),
            "op": entry.get("profiling_name"),
            "state": entry.get("state"),
            "group": (entry.get("process_group") or [None, None])[1],
            "sizes": entry.get("input_sizes"),
        }
        for entry in entries[-FLIGHT_RECORDER_ENTRIES:]
    ]


def kill_rank(launch: str | None, dask_worker: Any = None) -> bool:
    """End this worker process if the job's thread is still alive (stuck in C code); the nanny restarts it.

    ``launch`` None: whatever job is still running here (a worker found busy before a new job).
    """
    active = _runtime.active
    if not _running(active, launch):
        return False
    assert active is not None
    log.warning(
        "job %s: rank %d did not stop when cancelled; ending worker process %d", active.job_id, active.rank, os.getpid()
    )
    children.end_all_children("its worker is ended")
    if dask_worker is not None:
        dask_worker.loop.call_later(0.05, os._exit, EXIT_CODE_KILLED)
    else:
        os._exit(EXIT_CODE_KILLED)
    return True


# -- the rank's thread ------------------------------------------------------------------------------
def _execute(
    job: RankJob, slot: RankSlot, cuda_visible: str | None, active: _ActiveJob, forwarder: Forwarder
) -> RankOutcome:
    started = time.monotonic()
    outcome = RankOutcome(rank=slot.rank, status="ok", pid=os.getpid(), host=slot.host)
    env = build_worker_env(
        slot,
        master_addr=job.master_addr,
        master_port=job.master_port,
        run_id=job.job_id,
        restart_count=job.attempt,
        max_restarts=job.max_restarts,
        error_file=error_file_path(_private_error_root(), job.job_id, job.attempt, slot.local_rank),
        parent_env=_runtime.parent_env,
        host_interface=interface_of(slot.host) if slot.group_world_size > 1 else None,
    )
    if cuda_visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible
    children.allow_children()
    children_before = _runtime.known_children.last()  # as the previous job left them
    is_script = isinstance(job.code, ScriptCode)
    error_dir = os.path.dirname(env["TORCHELASTIC_ERROR_FILE"])
    if is_script:  # for torch's @record; a few ms of file system work, so only where scripts use it
        os.makedirs(error_dir, exist_ok=True)
    active.filename = job.code.abspath if isinstance(job.code, ScriptCode) else job.code.filename
    _apply_environment(env)
    compile_cache = compile_cache_env(job.pool, _runtime.parent_env, os.path.expanduser("~"))
    ours = next(iter(compile_cache.values()), None)  # .../gpugeek-jupyter/compile/<pool>/<kind>
    if ours is not None:  # made private: compiled code of the user's models
        _private_dir(os.path.dirname(os.path.dirname(os.path.dirname(ours))))
    os.environ.update(compile_cache)
    restore_job_env = _apply_job_environment(job.env)
    try:
        with capture.captured(forwarder):
            try:
                if is_script:
                    assert isinstance(job.code, ScriptCode)
                    _drop_group()  # a script builds its own group, as under torchrun
                    outcome.exit_code = _run_script(job.code, active)
                    if outcome.exit_code != 0:
                        outcome.status = "failed"
                        outcome.error = f"exited with status {outcome.exit_code}"
                else:
                    assert isinstance(job.code, CellCode)
                    outcome.value_blob = _run_cell(job, job.code, slot, active, outcome)
            except JobCancelled:
                outcome.status, outcome.exit_code, outcome.error = "cancelled", None, "stopped"
                _hold_group(outcome, not is_script)
            except BaseException as e:  # the user's error, reported with its traceback
                outcome.status, outcome.exit_code = "failed", 1
                outcome.peer_failure = is_peer_failure(e)
                _hold_group(outcome, not is_script and not outcome.peer_failure)
                dropped = isinstance(e, NameError) and e.name in _runtime.dropped_names
                if dropped:
                    e.add_note(DROPPED_NAME_NOTE)
                outcome.error = one_line(e) + (f" ({DROPPED_NAME_NOTE})" if dropped else "")
                outcome.traceback = format_user_traceback(e)
            finally:
                _clear_pending_cancel(active)
                if is_script or (outcome.status != "ok" and not outcome.group_kept):
                    _drop_group()  # closes our sockets: peers waiting on us fail now, not at the timeout
                forwarder.flush()
    except JobCancelled:  # landed after the user code, during clean-up: the job had finished anyway
        outcome.status, outcome.exit_code, outcome.error = "cancelled", None, "stopped"
        _drop_group()
    finally:
        restore_job_env()
        if sys.stdin is not None and sys.stdin.closed:  # exit() closes it: the next cells' help() reads it
            sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - the process's, for its life
    if outcome.status != "ok" or is_script:  # a script's worker is recycled next; a cell's keep theirs
        children.end_new_children(children_before, f"job {job.job_id} {outcome.status}")
    if is_script:
        with contextlib.suppress(OSError):
            os.rmdir(error_dir)  # only when empty: an error file written by @record stays
    if not is_script and outcome.status == "ok":
        outcome.sequences = group_sequences()  # the driver compares the ranks' (AttemptWatch.group_intact)
        outcome.left_group = _runtime.group_ready and not _group_up()  # the cell destroyed it
    outcome.output = forwarder.collected
    outcome.sent = forwarder.sent
    outcome.replay = forwarder.replay if forwarder.sent else None
    outcome.duration_s = time.monotonic() - started
    return outcome


def _apply_environment(env: dict[str, str]) -> None:
    """Put the rank's variables into the worker's environment (only those that changed).

    They stay there until the next job, as a torchrun rank keeps them for its life; the worker's own
    environment, as it was before any job, is kept apart as the parent environment.
    """
    for key in RANK_VARIABLES + ("CUDA_VISIBLE_DEVICES",):
        value = env.get(key)
        if value is None:
            if key in os.environ and key not in _runtime.parent_env:
                del os.environ[key]
        elif os.environ.get(key) != value:
            os.environ[key] = value
    threads = env.get("OMP_NUM_THREADS")
    if threads and threads.isdigit():
        import torch

        if torch.get_num_threads() != int(threads):
            torch.set_num_threads(int(threads))


def _apply_job_environment(job_env: dict[str, str]) -> Callable[[], None]:
    """Set the job's own variables (``--env``); the returned function puts the old values back."""
    saved = {key: os.environ.get(key) for key in job_env}
    os.environ.update(job_env)

    def restore() -> None:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    return restore


@contextlib.contextmanager
def _user_code(active: _ActiveJob) -> Iterator[None]:
    """Marks the span where a cancel may raise JobCancelled in this thread."""
    with active.lock:
        if active.cancelled:
            raise JobCancelled()
        active.in_user_code = True
    try:
        yield
    finally:
        _clear_pending_cancel(active)


def _clear_pending_cancel(active: _ActiveJob) -> None:
    """Close the span; a JobCancelled raised into it that has not landed yet lands here, harmlessly.

    (Clearing it with ``PyThreadState_SetAsyncExc(id, NULL)`` would leave the interpreter's
    eval-breaker signalled for good: every thread of the worker would take the slow path.)
    """
    with active.lock:
        active.in_user_code = False
        injected, active.injected = active.injected, False
    if injected:
        try:
            for _ in range(10_000):  # a pending asynchronous exception lands at the first backward jump
                pass
        except JobCancelled:
            pass


def _async_raise(thread_id: int, exc_type: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc_type))


def _own_gpu() -> str | None:
    """The GPU this worker owns (:func:`gpugeek_jupyter.devices.own_gpu`), as the worker started: jobs change the environment."""
    from ..devices import initial_environ, own_gpu

    if _runtime.own_gpu is None:
        _runtime.own_gpu = own_gpu(initial_environ()) or ""
    return _runtime.own_gpu or None


def gpu_links() -> Any:
    """The NVLink wiring of this worker's own GPU (a :class:`gpugeek_jupyter.nvml.GpuLinks`; None
    without one), for the rank layout: GPUs joined by NVLink become neighbouring ranks."""
    from ..nvml import gpu_links as links_of

    own = _own_gpu()
    return links_of(own) if own else None


def _device(slot: RankSlot) -> Any:
    import torch

    if _own_gpu() is not None and torch.cuda.is_available():
        index = slot.local_rank if slot.local_rank < torch.cuda.device_count() else 0
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def _store_again(job: RankJob, slot: RankSlot) -> Any:
    """The generation's rendezvous store under a prefix of this build's own: ``env://`` would meet
    under the first build's (``/worker/attempt_<n>``), whose keys still name the old group's sockets."""
    from torch.distributed import PrefixStore, TCPStore
    from torch.distributed.constants import default_pg_timeout

    store = TCPStore(job.master_addr, job.master_port, slot.world_size, is_master=False, timeout=default_pg_timeout)
    return PrefixStore(f"/gpugeek/build_{_runtime.group_builds}/attempt_{job.attempt}", store)


def _ensure_group(job: RankJob, device: Any, slot: RankSlot) -> None:
    import torch.distributed as dist

    if _runtime.group_ready and dist.is_initialized():
        return
    _drop_group(keep_generation=True)
    _build_group(job, device, slot, job.backend, {})
    _runtime.group_ready = True


def _build_group(job: RankJob, device: Any, slot: RankSlot, backend: str | None, options: dict[str, Any]) -> None:
    """Build this generation's default group, on every rank together, on ``backend`` (None: the
    job's); ``options``: torch's ``timeout``, ``pg_options``, ``device_id``, as a cell that builds
    it itself asks."""
    import torch.distributed as dist

    if device.type == "cuda":
        options = {"device_id": device, **options}
    init = rank_group_init.torch_init_process_group()
    backend = backend or job.backend
    if _runtime.group_builds:  # a cell destroyed it on every rank: built again together, names kept
        init(backend, store=_store_again(job, slot), rank=slot.rank, world_size=slot.world_size, **options)
    else:
        init(backend, init_method="env://", **options)
    _runtime.group_builds += 1
    # whole on every rank before any runs the job's code: a rank that returned from gloo's mesh
    # first and failed at once (a bad argument) closed its pairs while a peer still connected them,
    # and that peer's error read "Gloo connectFullMesh failed" instead of the job's own
    dist.barrier()


def _private_dir(path: str) -> bool:
    """Make ``path`` a folder of this user's, 0700 (made, or narrowed when it is ours); False when
    it exists and belongs to someone else (then it is not used). A folder found private before
    costs one ``lstat`` (each job asks): it must still be that same folder, ours and 0700."""
    known = _private_dirs.get(path)
    if known is not None:
        with contextlib.suppress(OSError):
            info = os.lstat(path)
            if (info.st_dev, info.st_ino, info.st_uid, info.st_mode) == known:
                return True
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
        if info.st_uid != os.getuid() or not stat.S_ISDIR(info.st_mode):  # a link is not a folder to lstat
            return False
        if info.st_mode & 0o077:
            os.chmod(path, 0o700)
            info = os.lstat(path)
        _private_dirs[path] = (info.st_dev, info.st_ino, info.st_uid, info.st_mode)
        return True
    except OSError as e:
        log.info("could not make %s private: %s", path, e)
        return False


_private_dirs: dict[str, tuple[int, int, int, int]] = {}  # path -> what lstat said once it was private


@functools.cache
def _private_error_root() -> str:
    """Where torch's ``@record`` writes a rank's error (``TORCHELASTIC_ERROR_FILE``): a folder of
    this user's in the temporary directory, 0700 (tracebacks can hold data), never one another
    user made there first."""
    shared = os.path.join(tempfile.gettempdir(), f"gpugeek-jobs-{os.getuid()}")
    return shared if _private_dir(shared) else tempfile.mkdtemp(prefix="gpugeek-jobs-")


def _drop_group(keep_generation: bool = False) -> None:
    """Destroy this process's default group, if any (later jobs rebuild it)."""
    _runtime.group_ready = False
    if not keep_generation:
        _runtime.generation = None
    if "torch.distributed" not in sys.modules:
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception as e:
            log.warning("could not destroy the process group cleanly: %s", e)
    elif dist.is_available():
        _forget_unfinished_group()
    if "torch.distributed.tensor" in sys.modules:  # meshes over the old groups must not be found again
        from .parallel import forget_meshes

        forget_meshes()


def _group_up() -> bool:
    import torch.distributed as dist

    return bool(dist.is_initialized())


def group_sequences() -> dict[str, int] | None:
    """How many calls this process has made on each of its process groups (torch's sequence numbers:
    collectives, and on gloo point-to-point calls too), by the group's name: torch names groups in
    the order they are made, which every rank follows, so two ranks of one group that have made the
    same calls on it say the same number. None when torch cannot say (then a failed job drops its group)."""
    try:
        import torch.distributed.distributed_c10d as c10d

        world: Any = c10d._world
        return {str(world.pg_names[group]): int(group._get_sequence_number_for_group()) for group in list(world.pg_map)}
    except Exception:
        return None


def _hold_group(outcome: RankOutcome, eligible: bool) -> None:
    """After a failure or a stop: keep the process group on hold when it is up and torch can say
    where each of its groups stands (``outcome.sequences``), for the driver to judge whether every
    rank stopped at the same call; else it is dropped when the job ends."""
    outcome.sequences = group_sequences() if eligible and _runtime.group_ready and _group_up() else None
    outcome.group_kept = outcome.sequences is not None


def drop_kept_group(generation: str, dask_worker: Any = None) -> bool:
    """Drop the process group a failed rank kept (its peers may wait for it in a collective it will
    never call: closing its sockets makes theirs fail now); whether there was one to drop."""
    if _runtime.generation != generation or _runtime.busy():
        return False
    _drop_group()
    return True


def drop_held_group(job_id: str, dask_worker: Any = None) -> bool:
    """Drop the process group this worker's rank kept when detached job ``job_id`` failed or stopped
    here, for an agent that took the job over from a dead one (it knows no generation; its peers
    may wait for this rank in a collective); whether there was one to drop."""
    kept = _runtime.kept_outcome
    if kept is None or kept[0] != job_id or not kept[1].group_kept or _runtime.busy():
        return False
    _drop_group()
    return True


def _forget_unfinished_group() -> None:
    """Put torch's group counter back to 0 when no group exists here.

    torch names the default group (and the store prefix its ranks meet under) from a counter it moves
    on before connecting, and puts back only in ``destroy_process_group``, which a group that never
    came up cannot reach: after an ``init_process_group`` that failed (a peer's worker died while the
    group was being built), this worker's next group would be named "1" while its fresh peers' is
    "0", and every rank would wait for the others until the job's timeout.
    """
    import torch.distributed.distributed_c10d as c10d

    world: Any = getattr(c10d, "_world", None)
    if world is not None and world.group_count:
        world.group_count = 0


def _run_cell(job: RankJob, code: CellCode, slot: RankSlot, active: _ActiveJob, outcome: RankOutcome) -> bytes | None:
    import cloudpickle
    import torch
    import torch.distributed as dist

    from .helpers import Helpers

    device = _device(slot)
    _register_sources({code.filename: code.source, **code.sources})
    body, last = compile_cell(code.source, code.filename)
    helpers = Helpers(
        rank=slot.rank, world_size=slot.world_size, local_rank=slot.local_rank, device=device, amp=job.amp
    )
    namespace = _runtime.namespace
    if namespace is None:
        namespace = _runtime.namespace = {"__name__": "__main__", "__builtins__": builtins}
    # the group is built outside the span a cancel may raise into, so that no JobCancelled lands
    # inside torch's init_process_group half way; a cancel while it is built takes effect as the
    # user's code would start, a peer that is gone makes the init fail by itself (and
    # _forget_unfinished_group undoes what it had done), and a rank stuck there ends with its worker
    _ensure_group(job, device, slot)
    rank_group_init.install()
    with _user_code(active), rank_group_init.in_cell(functools.partial(_build_group, job, device, slot)):
        for alias, module in code.imports:
            namespace[alias] = importlib.import_module(module)
        rank_names.forget(code.owner, code.forget)
        outcome.replaced = tuple(rank_names.receive(namespace, cloudpickle.loads(code.names_blob)))
        namespace.update(rank=slot.rank, world_size=slot.world_size, device=device, dist=dist, gg=helpers)
        namespace["get_ipython"] = rank_get_ipython(namespace, slot.rank, code.ipython)
        rank_display.use_on_ranks(namespace)
        _rank_loop()
        with helpers.autocast():
            _run_code(body, namespace)
            value = _run_code(last, namespace) if last is not None else None
    outcome.dropped = tuple(rank_names.dropped(namespace))
    if _runtime.dropped_names:  # a name assigned again is the cell's, not one the rebuild dropped
        _runtime.dropped_names -= namespace.keys()
    if not code.has_value or (code.rank0_only and slot.rank != 0):
        return None
    try:
        blob: bytes = cloudpickle.dumps(to_cpu(value, torch))
        return blob
    except Exception as e:
        raise TypeError(
            f"the value of the cell's last expression ({type(value).__name__}) cannot be sent back: {e} "
            f"(end the cell with a value that pickles, e.g. a float, a list or a CPU tensor)"
        ) from e


def _run_code(code: types.CodeType, namespace: dict[str, Any]) -> Any:
    """Run compiled cell code; code with a top-level ``await`` runs on this rank's event loop, one
    for the worker's life, as IPython runs such a cell on its kernel's loop."""
    result = eval(code, namespace)
    if code.co_flags & inspect.CO_COROUTINE:
        loop = _rank_loop()
        try:
            result = loop.run_until_complete(result)
        except BaseException as e:
            if isinstance(e, JobCancelled) or loop.is_running():
                _runtime.loop = None  # stopped mid-step: a fresh loop for the next cell
            raise
    return result


def _rank_loop() -> asyncio.AbstractEventLoop:
    """This rank thread's event loop, also its current one (``asyncio.ensure_future`` in a cell
    finds it, as in a notebook), made on first use."""
    loop = _runtime.loop
    if loop is None or loop.is_closed():
        loop = _runtime.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
    return loop


def compile_cell(source: str, filename: str) -> tuple[types.CodeType, types.CodeType | None]:
    """The cell's statements, and its last expression separately when it ends with one whose value
    is shown (not ``x;``: IPython's quiet line, whose value then never travels back).

    Compiled anew at every run, as IPython compiles a notebook cell: code objects reused with a
    fresh namespace would meet torch.compile's per-code-object cache, whose compiled function was
    installed in the first run's globals (``NameError: __compiled_fn_...`` on the second run).
    """
    import ast

    tree, last = _split_cell(source, filename)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT  # `await x` in a cell, as in IPython
    body = compile(tree, filename, "exec", flags=flags)
    return body, (compile(last, filename, "eval", flags=flags) if last is not None else None)


@functools.lru_cache(maxsize=64)
def _split_cell(source: str, filename: str) -> tuple[Any, Any]:
    """The cell's syntax tree without its shown last expression, and that expression (``None``
    when the cell shows nothing): parsed once per source, as a cell is usually run again as it
    is. ``compile`` reads a tree without changing it, so each run still gets code objects of its own."""
    import ast

    from .cell_source import ends_with_semicolon

    tree = ast.parse(source, filename=filename)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not ends_with_semicolon(source):
        last = ast.Expression(tree.body[-1].value)
        tree.body.pop()
    return tree, last


def to_cpu(value: Any, torch: Any) -> Any:
    """Tensors (also inside lists, tuples and dicts) moved to the CPU and detached from the rank's
    graph, keeping what the notebook reads of them: ``requires_grad``, and a ``Parameter`` stays one."""
    if isinstance(value, torch.nn.Parameter):
        return torch.nn.Parameter(value.detach().cpu(), requires_grad=value.requires_grad)
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().requires_grad_(value.requires_grad)
    if isinstance(value, list):
        return [to_cpu(v, torch) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(to_cpu(v, torch) for v in value)
    if isinstance(value, dict):
        return {k: to_cpu(v, torch) for k, v in value.items()}
    return value


def _run_script(code: ScriptCode, active: _ActiveJob) -> int:
    """Run a script as ``python script.py ARGS`` would under torchrun; its exit status."""
    saved_argv, saved_path, saved_main = sys.argv, list(sys.path), sys.modules.get("__main__")
    saved_cwd = os.getcwd()
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=code.abspath, __builtins__=builtins, __spec__=None, __cached__=None)
    _register_sources({code.abspath: code.source})
    try:
        if os.path.isdir(code.cwd):
            os.chdir(code.cwd)
        sys.argv = [code.path, *code.args]
        sys.path.insert(0, os.path.dirname(code.abspath))
        sys.modules["__main__"] = main
        compiled = compile(code.source, code.abspath, "exec")
        try:
            with _user_code(active):
                exec(compiled, main.__dict__)
        except SystemExit as e:
            return _exit_status(e)
        return 0
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
        with contextlib.suppress(OSError):
            os.chdir(saved_cwd)
        _runtime.script_leftovers.append(main)  # see _Runtime.script_leftovers


def _exit_status(e: SystemExit) -> int:
    """What the interpreter would exit with for ``SystemExit(code)``."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def _register_sources(sources: dict[str, str]) -> None:
    """Give tracebacks the cell's lines (and those of notebook functions it calls); a source
    already there as it is now is left alone (each run of a cell registers it again)."""
    for filename, text in sources.items():
        ours = _registered.get(filename)
        if ours is not None and ours[0] == text and linecache.cache.get(filename) is ours[1]:
            continue
        entry = (len(text), None, text.splitlines(True), filename)
        linecache.cache[filename] = entry
        _registered[filename] = (text, entry)


_registered: dict[str, tuple[str, tuple[Any, ...]]] = {}  # filename -> the text and the linecache entry made of it
