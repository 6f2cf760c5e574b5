"""Scheduled runs: a script or a cell run every day (or by cron), by the user's agent, each run
resuming from the newest checkpoint of the runs before it.

>>> daily = gpugeek_jupyter.schedule(script_path="train.py", every="1d", gpu_type="cpu", count=2)  # doctest: +SKIP
>>> daily.runs()[0].status.value, daily.record().next_run_at        # doctest: +SKIP
('succeeded', 1796342400.0)

A schedule lives in the registry; the agent (:mod:`gpugeek_jupyter.detached`) runs it (see
:mod:`.agent` for what happens on overlap, failures, missed occurrences and restarts), so runs come
whether or not a notebook is open. Each run is a detached job with its own id, record and cost
(``gpugeek_jupyter.job(run.job_id)``).

Layers: above ``detached`` (its runs are detached jobs), below the client and the adapters.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import SpecError, Surface, phrased_for
from ._schedule import (
    CHECKPOINT_DIR_VARIABLE,
    DEFAULT_MAX_FAILURES,
    OVERLAP,
    RESUME_FROM_VARIABLE,
    Schedule,
    create_schedule,
    find_schedule,
    run_model,
    schedule_model,
)
from .timing import Timing, parse_every

__all__ = [
    "CHECKPOINT_DIR_VARIABLE",
    "DEFAULT_MAX_FAILURES",
    "OVERLAP",
    "RESUME_FROM_VARIABLE",
    "Schedule",
    "Timing",
    "create_schedule",
    "find_schedule",
    "list_schedules",
    "parse_every",
    "pool_options",
    "run_model",
    "schedule",
    "schedule_model",
]


def schedule(
    script_path: str | None = None,
    cell: str | None = None,
    *,
    every: str | float | None = None,
    cron: str | None = None,
    timezone: str = "UTC",
    resume: str | None = "latest",
    pool: str | None = None,
    name: str | None = None,
    hyperparams: Mapping[str, Any] | None = None,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    max_restarts: int = 0,
    overlap: str = "skip",
    max_failures: int = DEFAULT_MAX_FAILURES,
    checkpoints: str | None = None,
    namespace: Mapping[str, Any] | None = None,
    gpu_type: str | None = None,
    count: int | None = None,
    backend: str | None = None,
    budget: float | None = None,
    spot_fraction: float | None = None,
    walltime: str | None = None,
) -> Schedule:
    """Run a script (``script_path``) or a cell's code (``cell``) ``every`` interval (``"1d"``,
    ``"30m"``, ``"10s"``) or by ``cron`` (``"0 2 * * *"``, in ``timezone``), as detached jobs of the
    user's agent; its :class:`Schedule`.

    An interval's first run is now; a cron schedule's at its next time. Where: ``pool`` (a kept
    pool), or ``gpu_type=``, ``count=`` (and ``backend=``, ``budget=``, ``spot_fraction=``,
    ``walltime=``, as for ``launch``) for a pool made for each run and stopped after it; its budget
    applies to each run. For other launch options, launch a kept pool and give ``pool=``. ``resume="latest"`` (default): each run's
    ``GPUGEEK_CHECKPOINT_DIR`` is the schedule's folder (``checkpoints``, default one beside the
    registry), so ``gg.checkpoint(model=...)`` (no directory: that one) continues from the newest
    whole checkpoint of the runs before; ``resume=None`` starts each run afresh.
    ``overlap``: ``skip`` (default), ``queue`` or ``replace``, when a run is still going at the next
    occurrence; ``max_failures`` failed runs in a row pause the schedule. A cell's code and the
    notebook objects it uses (from ``namespace``, default the caller's globals) are captured now.
    """
    if cell is not None and namespace is None:
        namespace = sys._getframe(1).f_globals  # the caller's, as a cell sees its notebook's
    with phrased_for(Surface.PYTHON):
        request = _request(script_path, cell, hyperparams, args, env, timeout, max_restarts, namespace)
        return create_schedule(
            request,
            every=every,
            cron=cron,
            timezone=timezone,
            resume=resume,
            pool=pool,
            name=name,
            overlap=overlap,
            max_failures=max_failures,
            checkpoints=checkpoints,
            pool_options=pool_options(
                gpu_type=gpu_type,
                count=count,
                backend=backend,
                budget=budget,
                spot_fraction=spot_fraction,
                walltime=walltime,
            ),
            created_by=_who(),
        )


def pool_options(**options: Any) -> dict[str, Any]:
    """The launch options given (those not None), for the pool made for each run."""
    return {k: v for k, v in options.items() if v is not None}


def list_schedules() -> list[dict[str, Any]]:
    """Every schedule of the user (not deleted), as plain data: when, where, next run, last run's
    outcome and cost (:func:`schedule_model`)."""
    from ..store import get_registry

    return [schedule_model(r) for r in get_registry().list_schedules()]


def _request(
    script_path: Any,
    cell: Any,
    hyperparams: Mapping[str, Any] | None,
    args: Sequence[str],
    env: Mapping[str, str] | None,
    timeout: float | None,
    max_restarts: int,
    namespace: Mapping[str, Any] | None,
) -> Any:
    from ..jobs import cell_request, script_request

    if (script_path is None) == (cell is None):
        raise SpecError(
            field="script_path",
            value=script_path,
            rule="given, or cell given instead (one of them)",
            example="train.py",
        )
    if script_path is not None:
        return script_request(
            script_path, args=args, hyperparams=hyperparams, timeout=timeout, max_restarts=max_restarts, env=env
        )
    if hyperparams:
        raise SpecError(field="hyperparams", value=hyperparams, rule="for scripts (a cell uses its notebook names)")
    return cell_request(cell, namespace or {}, timeout=timeout, max_restarts=max_restarts, env=env)


def _who() -> str:
    from ..jobs.pool_queue import this_submitter

    return this_submitter().label
