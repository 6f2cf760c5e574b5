"""A rank's child processes: allowed, as under torchrun, and ended with the rank.

dask starts worker processes *daemonic* (``distributed.worker.daemon``), and multiprocessing refuses
children to daemonic processes (``daemonic processes are not allowed to have children``): every
``DataLoader(num_workers=N)``, ``multiprocessing.Pool`` and ``ProcessPoolExecutor`` of a job would
fail. A torchrun rank is an ordinary process, so a rank here clears that flag on its own process
(:func:`allow_children`). It is cleared on the worker side, so it holds on every backend, attached
clusters included; the nanny still sees a daemonic child and ends it when the nanny's process exits.

Children must not outlive their job's purpose:

- a job that is cancelled, times out or fails, and every script (its worker is recycled next), ends
  the processes it started (:func:`end_new_children`);
- a worker that is ended outright ends its children first (:func:`end_all_children`);
- children forked from the rank (DataLoader's default) are also asked to die with it by the kernel
  (``PR_SET_PDEATHSIG``), for a worker killed with SIGKILL.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import multiprocessing.util
import os
import signal
import sys

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_GRACE_S = 2.0


class _DeathSignal:
    """Registered with multiprocessing's after-fork hooks (it keeps a weak reference to this)."""

    def __call__(self) -> None:
        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


_death_signal = _DeathSignal()
_allowed = False


def allow_children() -> None:
    """Let this (worker) process start child processes, which die with it (idempotent)."""
    global _allowed
    if _allowed:
        return
    # the worker was started by a forkserver, which made that its default start method; a torchrun
    # rank has the platform's default (fork on Linux before Python 3.14), which DataLoader workers use
    multiprocessing.set_start_method(None, force=True)
    process = multiprocessing.current_process()
    if process.daemon:
        process.daemon = False  # allowed in the child: only the nanny's copy of the object has started
    if sys.platform.startswith("linux"):
        # runs in each child forked through multiprocessing; the parent it watches is the forking
        # thread, and a rank forks from its rank thread, which lives as long as the worker
        multiprocessing.util.register_after_fork(_death_signal, _DeathSignal.__call__)
    _allowed = True


def child_pids() -> set[int]:
    """Every process below this one, now (called before every job: cheap on Linux)."""
    try:
        return _descendants_from_proc(os.getpid())
    except OSError:  # no /proc/<pid>/task/<tid>/children (not Linux, or an old kernel)
        import psutil

        try:
            return {child.pid for child in psutil.Process().children(recursive=True)}
        except psutil.Error:
            return set()


def _descendants_from_proc(pid: int) -> set[int]:
    """Linux's own list of each thread's children, followed down: a few small reads, where psutil
    would scan every process of the machine (~3 ms here). One read per thread, each a bare
    ``os.open``/``os.read``: 110 µs for 27 threads, where ``open()``'s file objects cost 350 µs."""
    found: set[int] = set()
    pending = [pid]
    while pending:
        parent = pending.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except FileNotFoundError:
            continue  # ended meanwhile
        for task in tasks:
            listed = _read_proc_file(f"/proc/{parent}/task/{task}/children")
            if listed:
                kids = {int(k) for k in listed.split()}
                pending.extend(kids - found)
                found |= kids
    return found


_PROC_READ = 65536


class KnownChildren:
    """This process's descendants as last listed, listed again only once a process or thread was
    created anywhere since (the rank asks after every job; most jobs start none).

    Linux's ``/proc/loadavg`` ends with the PID it handed out last (in this PID namespace, threads
    included): while that stays, no process was started, so none can have joined the list, and a
    PID cannot have been reused. One ``pread`` (~1 µs) in place of a listing (~100 µs with a
    worker's threads). Without it (not Linux) every call lists.
    """

    def __init__(self, stamp_path: str = "/proc/loadavg") -> None:
        self._stamp_path = stamp_path
        self._fd: int | None = None
        self._pids: set[int] | None = None
        self._stamp: bytes | None = None

    def now(self) -> set[int]:
        """Every process below this one (those that ended since the last listing may be in it)."""
        stamp = self._last_created()  # before the listing: a child started during it lists again next time
        if self._pids is None or stamp is None or stamp != self._stamp:
            self._pids = child_pids()
            self._stamp = stamp
        return self._pids

    def last(self) -> set[int]:
        """The list as last taken (taken now the first time): no ``/proc`` read at all."""
        return self._pids if self._pids is not None else self.now()

    def _last_created(self) -> bytes | None:
        try:
            if self._fd is None:
                self._fd = os.open(self._stamp_path, os.O_RDONLY | os.O_CLOEXEC)
            return os.pread(self._fd, 128, 0).rsplit(b" ", 1)[-1]
        except OSError:
            return None


def _read_proc_file(path: str) -> bytes:
    """The whole of a ``/proc`` file; empty when it is gone (its thread or process ended meanwhile)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return b""
    try:
        data = chunk = os.read(fd, _PROC_READ)  # one read holds it all but for thousands of children
        while len(chunk) == _PROC_READ:
            chunk = os.read(fd, _PROC_READ)
            data += chunk
        return data
    except ProcessLookupError:  # the thread ended between the open and the read
        return b""
    finally:
        os.close(fd)


def end_new_children(before: set[int], why: str) -> int:
    """End the processes below this one that were not there in ``before``; how many there were."""
    return _end(child_pids() - before, why)


def end_all_children(why: str) -> int:
    return _end(child_pids(), why)


def _end(pids: set[int], why: str) -> int:
    import psutil

    processes = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            processes.append(psutil.Process(pid))
    if not processes:
        return 0
    log.info("ending %d child process(es) of worker %d (%s)", len(processes), os.getpid(), why)
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(processes, timeout=_GRACE_S)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=_GRACE_S)
    _reap_multiprocessing_children()
    return len(processes)


def _reap_multiprocessing_children() -> None:
    """Let multiprocessing forget the ended ones (else its exit handler would wait for them)."""
    with contextlib.suppress(Exception):
        multiprocessing.active_children()
