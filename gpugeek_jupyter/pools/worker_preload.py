"""Dask worker preload for pool workers: torch imported before the worker registers.

Importing torch takes ~1.4 s; done here, the first job on a fresh pool finds it imported. Not on a
background thread: two threads importing torch at once can crash its C++ initialisation
("terminate called after throwing an instance of 'python_error'"), and anything may import torch
as soon as the worker has registered (a job, a task). Disabled with GPUGEEK_PRELOAD_TORCH=0.
"""

from __future__ import annotations

import logging
import os
import signal
import tempfile
import threading

log = logging.getLogger(__name__)


def _import_torch() -> None:
    try:
        import torch  # noqa: F401
        import torch.distributed  # noqa: F401
    except Exception as e:  # a job will report the same error properly; this is only a warm-up
        log.info("torch warm-up import failed on this worker: %s", e)


def _ignore_notebook_interrupts() -> None:
    """The notebook's interrupt signals the kernel's whole process group, local workers included.

    A pool worker must outlive it: jobs are stopped by their runner, and a worker killed by SIGINT
    would take the warm process group (and any running job's ranks) with it.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _apply_thread_caps() -> None:
    """A worker forked from the pool forkserver found torch imported before the nanny set its
    OMP_NUM_THREADS: apply it now, or every task on the worker (not only jobs) would run as many
    intra-op threads as the host has cores, and several workers would oversubscribe them."""
    import sys

    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and "torch" in sys.modules:
        import torch

        if torch.get_num_threads() != int(threads):
            torch.set_num_threads(int(threads))


def _apply_log_level() -> None:
    """The launching process's ``log_level`` for dask's own logs, passed on by the nanny."""
    from ..logs import LOG_LEVEL_VARIABLE, set_library_log_level

    level = os.environ.get(LOG_LEVEL_VARIABLE)
    if level:
        try:
            set_library_log_level(level)
        except ValueError as e:
            log.warning("%s", e)


def _use_the_pools_temporary_folder() -> None:
    """The nanny sets ``TMPDIR`` to the pool's own folder (:mod:`.scratch`), but a worker forked from
    the pool forkserver inherits ``tempfile``'s cached directory: let it look again."""
    if os.environ.get("TMPDIR") and tempfile.tempdir != os.environ["TMPDIR"]:
        tempfile.tempdir = None


def dask_setup(worker) -> None:  # type: ignore[no-untyped-def]
    _use_the_pools_temporary_folder()
    _ignore_notebook_interrupts()
    _apply_log_level()
    _apply_thread_caps()
    if os.environ.get("GPUGEEK_PRELOAD_TORCH", "1").lower() in ("0", "false", "no"):
        return
    _import_torch()
