"""dask-jobqueue, imported once and without its side effect, and the one private call of its cluster.

dask-jobqueue's ``SLURMCluster`` is distributed's ``SpecCluster``: ``scale()`` and
``worker_spec`` say which jobs there should be, and ``SpecCluster._correct_state()`` (private)
submits or cancels jobs until there are those. The public ``scale()`` only schedules that call on
the cluster's loop and drops its outcome, so sbatch's refusal would be lost in the loop's log and a
launch would wait for workers that never come, and a worker that ended cannot be submitted again
under its own name. :func:`correct_state` (awaited on the loop) and :func:`submit_jobs` (from a
thread) are the only places that make the private call; ``tests/slurm/test_jobqueue_adapter.py``
checks that the installed dask-jobqueue (the range pinned in ``pyproject.toml``) still has it, with
the signature used here, and that the three private methods :mod:`.cluster` overrides (the workers'
TLS, a worker's leaving, the close) are still there with the signatures the overrides keep.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from ...config import get_config
from ...errors import BackendUnavailableError, Phrase, Setting
from ..worker_origin import use_forkserver


async def correct_state(cluster: Any) -> None:
    """Submit or cancel jobs until the cluster has those of its ``worker_spec`` (await it on the
    cluster's loop); raises dask-jobqueue's RuntimeError with sbatch's stderr when sbatch refuses.

    A job sbatch refused is left ``created``, and ``SpecCluster``'s close asserts that every job it
    made was started (closing, closed or failed): closing the pool would then fail with
    ``AssertionError: Status.created`` in place of sbatch's line. Such jobs (no job id: nothing to
    cancel) are marked failed before the refusal is raised."""
    try:
        await cluster._correct_state()
    except BaseException:
        _fail_unsubmitted(cluster)
        raise


def submit_jobs(cluster: Any) -> None:
    """:func:`correct_state` from a thread other than the cluster's loop, waiting for its outcome."""
    cluster.sync(correct_state, cluster)


def _fail_unsubmitted(cluster: Any) -> None:
    from distributed.core import Status

    for job in list(cluster.workers.values()):
        if getattr(job, "status", None) == Status.created and getattr(job, "job_id", None) is None:
            job.status = Status.failed


_import_lock = threading.Lock()


def require_jobqueue() -> None:
    """Import dask_jobqueue (once), or say which extra installs it."""
    if sys.modules.get("dask_jobqueue") is not None:
        return
    # distributed first, under the forkserver's lock: a kernel's warm-up (%load_ext) may be importing
    # it on another thread right now, and two threads importing it at once meet in its import cycle
    use_forkserver(get_config().preload_torch)
    try:
        _import_keeping_sigint()
    except ModuleNotFoundError as e:
        if e.name != "dask_jobqueue":
            raise
        raise BackendUnavailableError(
            Phrase(
                "{backend} needs dask-jobqueue (pip install 'gpugeek-jupyter[slurm]')", backend=Setting(backend="slurm")
            )
        ) from e


def _import_keeping_sigint() -> None:
    """``import dask_jobqueue``, leaving this process's SIGINT handler as it was.

    dask-jobqueue 0.9.0 sets SIGINT to ``sys.exit()`` when it is imported (its ``runner`` module; moved
    into the runners after that release, dask/dask-jobqueue#697): in a kernel or a script, Ctrl-C or
    an interrupt would then exit instead of raising KeyboardInterrupt (which ends a running job's
    ranks), and on any thread but the main one (the server launches pools on threads of its own) the
    import fails with ``signal only works in main thread``.
    """
    import signal

    with _import_lock:
        real = signal.signal

        def keep_sigint(signalnum: Any, handler: Any) -> Any:
            if signalnum == signal.SIGINT:
                return signal.getsignal(signalnum)
            return real(signalnum, handler)

        signal.signal = keep_sigint
        try:
            import dask_jobqueue  # noqa: F401
        finally:
            signal.signal = real
