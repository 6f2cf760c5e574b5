"""Dask worker preload for pool workers: warm up imports off the critical path.

Importing torch takes ~1.4 s; doing it in a background thread as the worker starts means the first
job on a fresh pool finds it imported (or half imported: the import lock makes the job wait only
for the rest). Disabled with GPUGEEK_PRELOAD_TORCH=0.
"""

from __future__ import annotations

import logging
import os
import signal
import threading

log = logging.getLogger(__name__)


_warmup: threading.Thread | None = None


def wait_for_torch(timeout: float | None = None) -> None:
    """Return once the warm-up import of torch has finished (at once when there is none).

    Code that imports torch on another thread must call it first: two threads importing torch at
    the same time can crash its C++ initialisation ("terminate called after throwing 'python_error'").
    """
    warmup = _warmup
    if warmup is not None and warmup is not threading.current_thread():
        warmup.join(timeout)


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


def dask_setup(worker) -> None:  # type: ignore[no-untyped-def]
    _ignore_notebook_interrupts()
    if os.environ.get("GPUGEEK_PRELOAD_TORCH", "1").lower() in ("0", "false", "no"):
        return
    global _warmup
    _warmup = threading.Thread(target=_import_torch, name="gpugeek-torch-warmup", daemon=True)
    _warmup.start()
