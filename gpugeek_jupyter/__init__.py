"""gpugeek-jupyter: GPU pools, distributed PyTorch jobs, telemetry and cost from a notebook.

>>> %load_ext gpugeek_jupyter                                   # doctest: +SKIP
>>> %gpugeek_launch --gpu-type cpu --count 2 --name dev         # doctest: +SKIP

Public names are imported lazily, so ``import gpugeek_jupyter`` (and ``%load_ext``) stays fast and
imports neither torch nor dask.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .client import ClusterClient, Job
    from .detached import JobHandle
    from .jobs.lineage import JobLineage
    from .pools import Pool
    from .schedules import Schedule
    from .spec import PoolSpec
    from .store import PoolRecord

__all__ = [
    "ClusterClient",
    "Job",
    "JobHandle",
    "Pool",
    "PoolSpec",
    "Schedule",
    "__version__",
    "current_pool",
    "job",
    "launch",
    "lineage",
    "list_pools",
    "load_ipython_extension",
    "log",
    "pull",
    "push",
    "schedule",
]

_LAZY = {
    "ClusterClient": ("gpugeek_jupyter.client", "ClusterClient"),
    "Job": ("gpugeek_jupyter.client", "Job"),
    "JobHandle": ("gpugeek_jupyter.detached", "JobHandle"),
    "Pool": ("gpugeek_jupyter.pools", "Pool"),
    "PoolSpec": ("gpugeek_jupyter.spec", "PoolSpec"),
    "PoolStatus": ("gpugeek_jupyter.store", "PoolStatus"),
    "Schedule": ("gpugeek_jupyter.schedules", "Schedule"),
    # a script or cell run every day or by cron, by the agent (gpugeek_jupyter.schedules.schedule)
    "schedule": ("gpugeek_jupyter.schedules", "schedule"),
    # gg.log for scripts run as jobs: training metrics kept with the job (gpugeek_jupyter.jobs.metrics)
    "log": ("gpugeek_jupyter.jobs.metrics", "log_metrics"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'gpugeek_jupyter' has no attribute {name!r}")


def current_pool() -> Pool | None:
    """The pool the magics use now (the last launched or ``%gpugeek_use``-d one), or None."""
    from .runtime import get_pool_manager

    return get_pool_manager().current


def push(names: Mapping[str, Any], pool: Pool | None = None, ranks: str | Sequence[int] | None = None) -> None:
    """Bind ``names`` (name -> value) on every rank of ``pool`` (default: the current one;
    ``ranks="0,2"``: those only) now, replacing what the ranks hold under those names, as ``%gpugeek_push`` does
    (ipyparallel's ``push``). A later cell that reads a notebook variable of the same name still
    sends the notebook's value when it differs from the pushed one (the namespace rule).

    >>> gpugeek_jupyter.push({"model": model, "lr": 3e-4})   # doctest: +SKIP
    """
    from .errors import SpecError, Surface, phrased_for
    from .jobs import push as push_values

    with phrased_for(Surface.PYTHON):
        if not isinstance(names, Mapping):
            raise SpecError(field="names", value=names, rule="a dict of names to values", example={"lr": 3e-4})
        push_values(_pool_or_current(pool), dict(names), ranks=ranks).raise_for_status()


def pull(name: str, rank: int = 0, pool: Pool | None = None) -> Any:
    """The value ``name`` has on rank ``rank`` of ``pool`` (default: the current one), as
    ``%gpugeek_pull`` fetches it (ipyparallel's ``pull``).

    >>> losses = gpugeek_jupyter.pull("losses", rank=1)   # doctest: +SKIP
    """
    from .errors import SpecError, Surface, phrased_for
    from .jobs import pull as pull_value

    with phrased_for(Surface.PYTHON):
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise SpecError(field="rank", value=rank, rule="a rank number >= 0", example=1)
        return pull_value(_pool_or_current(pool), name, rank=rank)


def _pool_or_current(pool: Pool | None) -> Pool:
    from .errors import SpecError

    chosen = pool if pool is not None else current_pool()
    if chosen is None:
        raise SpecError(
            "no pool to run on: launch one (e.g. gpugeek_jupyter.launch(gpu_type='cpu', count=2)) or pass pool=",
            field="pool",
        )
    return chosen


def list_pools(live_only: bool = False) -> list[PoolRecord]:
    """Every pool in the registry, whoever made it: records with ``.name``, ``.status``, ``.spec``."""
    from .runtime import list_pools as _list_pools

    return _list_pools(live_only=live_only)


def launch(keep: bool = False, **options: Any) -> Pool:
    """Launch a pool from keyword options (the same as ``%gpugeek_launch``'s) and make it current.

    ``keep=True``: the user's agent owns the pool, so it outlives this process (kernel, script)
    and takes detached jobs (``Job.submit``); it ends by a stop, idle shutdown, budget or walltime.

    >>> pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="dev")   # doctest: +SKIP
    """
    from .errors import SpecError, Surface, check_keywords, phrased_for
    from .runtime import launch_pool
    from .spec import PoolSpec, launch_keywords

    with phrased_for(Surface.PYTHON):  # errors name keyword arguments: count=4, not --count 4
        if not isinstance(keep, bool):
            raise SpecError(field="keep", value=keep, rule="True or False", example=True)
        check_keywords(options, launch_keywords() | {"keep"}, "launch()")
        spec = PoolSpec.create(**options)
        if keep:
            from .detached import launch_kept

            return launch_kept(spec)
        return launch_pool(spec)


def lineage(target: str) -> JobLineage:
    """Where a job (its id) or a checkpoint (its path or URL) came from: the data it read
    (``gg.dataset``), the checkpoint it resumed from and the job that wrote that, back to the data;
    ``print()`` it for the chain, ``.to_dict()`` for JSON (as ``%gpugeek_lineage`` and
    ``GET /gpugeek/jobs/<id>/lineage`` give it).

    >>> print(gpugeek_jupyter.lineage("/ckpt/step-000000006.pt"))   # doctest: +SKIP
    """
    from .errors import Surface, phrased_for
    from .jobs.lineage import lineage as trace_lineage

    with phrased_for(Surface.PYTHON):
        return trace_lineage(target)


def job(job_id: str) -> JobHandle:
    """The handle of job ``job_id`` from any process of the user: ``.status()``, ``.logs()``,
    ``.wait()``, ``.result()``, ``.cancel()``, ``.where()``, ``.metrics()`` (its ``gg.log`` values).

    >>> gpugeek_jupyter.job("job-1a2b3c4da910").wait().result().values   # doctest: +SKIP
    """
    from .detached import job as find_job
    from .errors import Surface, phrased_for

    with phrased_for(Surface.PYTHON):
        return find_job(job_id)


def load_ipython_extension(ipython: Any) -> None:
    from .magics import register_magics

    register_magics(ipython)
    # distributed here, on the kernel's thread (about 0.5 s), not in the warm-up thread: a cell that
    # launches at once would import it too, and two threads importing its modules for the first time
    # at once can meet one half-initialized ("cannot import name 'rejoin' from partially initialized
    # module"), failing the launch
    import distributed  # noqa: F401

    from .config import get_config
    from .pools.worker_origin import warm_up

    warm_up(get_config().preload_torch)  # the first %gpugeek_launch then finds torch imported


def unload_ipython_extension(ipython: Any) -> None:
    from .magics import unregister_magics

    unregister_magics(ipython)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "gpugeek-jupyter"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .server import GpugeekServerExtension  # jupyter_server only when a server loads the extension

    return [{"module": "gpugeek_jupyter", "app": GpugeekServerExtension}]
