"""Where the worker processes of local pools come from: one forkserver with torch imported.

dask's nanny starts each worker process with multiprocessing (the method is dask's
``distributed.worker.multiprocessing-method``). With dask's default, *spawn*, every worker is a fresh
interpreter that pays the torch import (~1.4 s here) and first re-runs the launching program's
``__main__``: a script without an ``if __name__ == "__main__":`` guard would launch pools from inside
its own workers.

Local pools use dask's *forkserver* method instead. The forkserver is started once per launching
process (kernel, script or server), in the background as soon as this package is loaded there; it
imports distributed, torch and :mod:`._forkserver_preload` (which keeps the launching program's
``__main__`` out of dask workers) and never touches CUDA, so a worker forked from it starts in
~0.1 s with torch already imported. Its environment is the launching process's when it started;
the nanny then applies each pool's worker environment.

The method is process-wide dask configuration (dask reads it again at each worker restart), so
other dask clusters this process makes with nannies use the same server; their workers gain the
same speed-up, and ignore the notebook's interrupt as pool workers do.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading

log = logging.getLogger(__name__)

_TORCH_MODULES = ("torch", "torch.distributed")
DASK_WORKER_PROCESS_NAME = "Dask Worker process (from Nanny)"  # distributed.nanny.WorkerProcess.start
WARM_UP_PROCESS_NAME = "gpugeek forkserver warm-up"  # warm_up's first child
_lock = threading.Lock()
_configured = False
_warming: threading.Thread | None = None


def forkserver_preload(preload_torch: bool) -> list[str]:
    """The modules the forkserver imports before it forks any worker, a notebook's interrupt ignored
    from the first (:mod:`gpugeek_jupyter._preload_interrupts_ignored`) on, in the server and in every
    worker it forks."""
    modules = [
        "gpugeek_jupyter._preload_interrupts_ignored",
        "distributed",
        "gpugeek_jupyter.pools._forkserver_preload",
    ]
    if preload_torch:
        modules += list(_TORCH_MODULES)
    return modules


def use_forkserver(preload_torch: bool = True) -> None:
    """Make dask start worker processes from the pool forkserver (idempotent)."""
    global _configured
    with _lock:
        if _configured:
            return
        import dask
        import distributed.utils

        dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
        if getattr(distributed.utils, "_forkserver_preload_set", None) is False:
            # dask sets its own preload list at its first get_mp_context(), importing pandas and every
            # other optional package for it; ours replaces that list, so dask is told it is set. Pandas
            # imported here, in the warm-up thread between two cells, would find no get_ipython() and
            # take the kernel for a terminal: DataFrames' text cut to the width of one
            distributed.utils._forkserver_preload_set = True
            context = multiprocessing.get_context("forkserver")
        else:  # dask's list already set, or a dask without that flag: ours replaces it
            context = distributed.utils.get_mp_context()
        context.set_forkserver_preload(forkserver_preload(preload_torch))
        _configured = True


def warm_up(preload_torch: bool = True) -> threading.Thread:
    """Start the forkserver in the background and wait there until it has imported torch; also import
    the scheduler's dashboard here. The first pool then starts at once. Returns the thread."""
    global _warming
    with _lock:
        if _warming is None:
            _warming = threading.Thread(
                target=_ensure_running, args=(preload_torch,), name="gpugeek-forkserver", daemon=True
            )
            _warming.start()
        return _warming


def _ensure_running(preload_torch: bool) -> None:
    try:
        use_forkserver(preload_torch)  # imports distributed: here, so that %load_ext stays instant
        # a first child, forked once the server has imported its preload: then it is ready
        probe = multiprocessing.get_context("forkserver").Process(target=int, name=WARM_UP_PROCESS_NAME, daemon=True)
        probe.start()
        probe.join(timeout=120)
    except Exception as e:  # the first worker start tries again and reports it
        log.warning("could not start the pool forkserver in advance: %s", e)
    try:
        import distributed.dashboard.scheduler  # noqa: F401  (bokeh: ~1 s of a scheduler's start)
    except Exception as e:
        log.info("the dashboard could not be imported in advance: %s", e)
