"""Distributed PyTorch jobs on a pool's workers: one rank per worker, torchrun's contract.

>>> result = run_cell(pool, "dist.all_reduce(t := torch.ones(1))\\nt.item()", {"torch": torch})  # doctest: +SKIP
>>> result.values                                                                              # doctest: +SKIP
[2.0, 2.0]

The pieces: :mod:`.layout` (which worker is which rank), :mod:`.env` (the rank's torchrun
environment), :mod:`.cell` and :mod:`.script` (what travels), :mod:`.rank` (what runs on a worker),
:mod:`.agent` (the driver: attempts, over :mod:`.roster`, :mod:`.process_group`, :mod:`.watch`,
:mod:`.record` and :mod:`.transport`), :mod:`.helpers` (``gg``), :mod:`.result` (``JobResult``).
Importing this package imports neither torch nor dask.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..pools._plugin import PoolLifecyclePlugin

if TYPE_CHECKING:
    from ..pools import Pool
    from .agent import NoticeCallback
    from .logs import MetricsCallback
    from .pool_queue import WaitCallback
    from .request import JobRequest
    from .result import JobResult
    from .watch import OutputCallback, ProgressCallback

__all__ = [
    "EndJobsBeforeStop",
    "cell_keywords",
    "cell_request",
    "end_jobs_before_stop",
    "pull",
    "push",
    "run_cell",
    "run_script",
    "script_request",
]


class EndJobsBeforeStop(PoolLifecyclePlugin):
    """Pool plugin: a stopping pool's running job ends, recorded with the stop's reason, before its
    workers go (else it would fail as if its workers had died)."""

    name = "gpugeek-jobs"

    def before_stop(self, manager: Any, pool: Pool, reason: str) -> None:
        """End ``pool``'s running job (see :func:`end_jobs_before_stop`)."""
        end_jobs_before_stop(manager, pool, reason)


def end_jobs_before_stop(manager: Any, pool: Pool, reason: str) -> None:
    """End ``pool``'s running job, recorded with ``reason`` (:class:`EndJobsBeforeStop`'s hook).

    Cheap when this process never ran a job (the agent module is not even imported then).
    """
    agent = sys.modules.get(f"{__name__}.agent")
    if agent is not None:
        agent.end_jobs_before_stop(manager, pool, reason)


@functools.cache
def cell_keywords(submitted: bool = False) -> frozenset[str]:
    """The options a cell takes from Python: :func:`cell_request`'s, and for a cell that is waited for
    (not ``submitted``) :func:`run_cell`'s callbacks; read from the functions."""

    def keywords(function: Any) -> set[str]:
        return {p.name for p in inspect.signature(function).parameters.values() if p.kind is p.KEYWORD_ONLY}

    return frozenset(keywords(cell_request) | (set() if submitted else keywords(run_cell)))


def cell_request(
    source: str,
    namespace: Mapping[str, Any],
    *,
    hidden: Collection[str] = (),
    timeout: float | None = None,
    max_restarts: int = 0,
    amp: str | None = None,
    stream: bool = True,
    rank0: bool = False,
    ranks: str | Sequence[int] | None = None,
    min_ranks: int | None = None,
    env: Mapping[str, str] | None = None,
    wait: bool = True,
    track: bool | str | None = None,
    ipython: str = "",
) -> JobRequest:
    """The request of a cell: its code, and the notebook names it uses from ``namespace``, captured now.
    ``track``: the job's MLflow run (:mod:`.tracking`: None per the setting, False none, or a URI).
    ``ipython``: ``"module:function"`` making, from a rank's namespace, the IPython shell the cell's
    magics and ``!commands`` run in there (``source`` then went through IPython's transformations,
    as ``%%gpugeek_run`` does); without it the cell is plain Python."""
    from ..errors import Phrase, SpecError
    from .cell import prepare_cell
    from .request import JobRequest, parse_ranks

    if not isinstance(namespace, Mapping):
        raise SpecError(
            Phrase("{field} must be a mapping of names to values, got {value} (e.g. namespace=globals())"),
            field="namespace",
            value=namespace,
        )
    chosen = parse_ranks(ranks)
    program = prepare_cell(source, namespace, hidden=hidden, rank0_only=rank0, ipython=ipython)
    request = JobRequest(
        code=program.bare,
        names=program.names,
        notices=program.notices,
        sha256=program.sha256,
        timeout=timeout,
        max_restarts=max_restarts,
        stream=stream,
        amp=amp,
        env=dict(env) if isinstance(env, Mapping) else env or {},  # validate() checks it
        ranks=chosen,
        min_ranks=min_ranks,
        wait=wait,
        track=track,
    )
    request.validate()
    return request


def run_cell(
    pool: Pool,
    source: str,
    namespace: Mapping[str, Any],
    *,
    on_output: OutputCallback | None = None,
    on_notice: NoticeCallback | None = None,
    on_progress: ProgressCallback | None = None,
    on_wait: WaitCallback | None = None,
    on_metrics: MetricsCallback | None = None,
    **options: Any,
) -> JobResult:
    """Run notebook code on every worker of ``pool`` (or on ``ranks`` only, e.g. ``"0,2-3"``: the
    same namespaces and warm process group, for inspection; collectives need every rank and end
    as ``cannot complete`` naming the ranks that did not take part); names it uses come from
    ``namespace``. A busy pool's job waits its turn (``on_wait`` is told who holds the pool);
    ``wait=False`` raises :class:`~gpugeek_jupyter.errors.PoolBusyError` instead. The options are
    :func:`cell_request`'s; ``on_metrics(attempt, rank, rows)`` is told the ranks' ``gg.log``
    values as they are kept (e.g. :func:`gpugeek_jupyter.widgets.metrics_chart.metrics_display`)."""
    from .agent import agent_for

    request = cell_request(source, namespace, **options)
    return agent_for(pool).run(request, on_output, on_notice, on_progress, on_wait, on_metrics)


def push(pool: Pool, values: Mapping[str, Any], **options: Any) -> JobResult:
    """Bind ``values`` (name -> notebook value) on every rank now, replacing whatever the ranks hold
    under those names (ipyparallel's ``push``); sent even when unchanged since the last cell. The
    options are :func:`run_cell`'s (``ranks=`` pushes to some ranks only)."""
    from .agent import agent_for
    from .cell import check_names

    names = check_names(values, "push")
    agent_for(pool).holds.release(values)
    return run_cell(pool, "(" + ", ".join(names) + ",);", values, **options)


def pull(pool: Pool, name: str, rank: int = 0, **options: Any) -> Any:
    """The value ``name`` has on rank ``rank`` (ipyparallel's ``pull``); the notebook's own value of
    the name is not sent. Raises the rank's error (``NameError`` when it has none) as a failed job."""
    from .cell import check_names

    check_names({name: None}, "pull")
    result = run_cell(pool, name, {}, ranks=[rank], **options)
    result.raise_for_status()
    return result.values[0]


def script_request(
    script_path: str,
    args: Sequence[str] = (),
    hyperparams: Mapping[str, Any] | None = None,
    *,
    timeout: float | None = None,
    max_restarts: int = 0,
    min_ranks: int | None = None,
    stream: bool = True,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    wait: bool = True,
    track: bool | str | None = None,
) -> JobRequest:
    """The request of a torchrun-ready script (see :mod:`.script`): its source, read now; ``track``
    as :func:`cell_request`'s."""
    from .request import JobRequest
    from .script import prepare_script

    program = prepare_script(script_path, args=args, hyperparams=hyperparams, cwd=cwd)
    request = JobRequest(
        code=program.code,
        sha256=program.sha256,
        hyperparams=program.hyperparams,
        timeout=timeout,
        max_restarts=max_restarts,
        min_ranks=min_ranks,
        stream=stream,
        env=dict(env) if isinstance(env, Mapping) else env or {},  # validate() checks it
        wait=wait,
        track=track,
    )
    request.validate()
    return request


def run_script(
    pool: Pool,
    script_path: str,
    args: Sequence[str] = (),
    hyperparams: Mapping[str, Any] | None = None,
    *,
    on_output: OutputCallback | None = None,
    on_notice: NoticeCallback | None = None,
    on_progress: ProgressCallback | None = None,
    on_wait: WaitCallback | None = None,
    on_metrics: MetricsCallback | None = None,
    **options: Any,
) -> JobResult:
    """Run a torchrun-ready script on every worker of ``pool`` (see :mod:`.script`); it waits its
    turn on a busy pool as :func:`run_cell` does. The options are :func:`script_request`'s."""
    from .agent import agent_for

    request = script_request(script_path, args, hyperparams, **options)
    return agent_for(pool).run(request, on_output, on_notice, on_progress, on_wait, on_metrics)
