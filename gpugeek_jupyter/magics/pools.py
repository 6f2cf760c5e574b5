"""Pool magics: ``%gpugeek_launch``, ``%gpugeek_pools``, ``%gpugeek_use``, ``%gpugeek_stop``."""

from __future__ import annotations

import argparse
import inspect
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

from ..config import get_config
from ..dashboards import browser_link
from ..pools import PoolLifecyclePlugin, PoolManager
from ..runtime import get_pool_manager, list_pools
from ..spec import LAUNCH_FIELDS, PoolSpec
from ..store import RECENT_WINDOW_SECONDS, PoolRecord
from ._common import chosen_pool, kernel_owner, local_time, magic_message, parse_options, pool_arguments, usage_errors


def recent_pools() -> list[PoolRecord]:
    """Live pools and those that ended in the last 24 hours (dead owners' pools are marked lost first)."""
    registry = get_pool_manager().registry
    registry.mark_lost_pools(get_config().lost_after_seconds)
    return registry.recent_pools(ended_since=registry.clock() - RECENT_WINDOW_SECONDS)


def launch_field_arguments(function: Any) -> Any:
    """The ``%gpugeek_launch`` option of every launch field (:data:`~gpugeek_jupyter.spec.LAUNCH_FIELDS`),
    in its order: ``--name VALUE``, repeatable ones appended to a list, switches alone. A default is
    ``PoolSpec.create``'s, as text (the magic's values are text until the spec reads them)."""
    defaults = inspect.signature(PoolSpec.create).parameters
    for field in reversed(LAUNCH_FIELDS):  # decorators apply from the bottom: the first field shows first
        help = field.help.replace("%", "%%")  # argparse formats help with %
        if field.magic == "switch":
            function = argument(field.flag, action="store_true", help=help)(function)
            continue
        default = defaults[field.name].default if field.name in defaults else None
        options: dict[str, Any] = {"default": None if default in (None, "", 0.0) else str(default)}
        if field.magic == "append":
            options.update(action="append", default=None)
            help += f"; repeatable, one {field.metavar or 'value'} each"
        if field.metavar:
            options["metavar"] = field.metavar
        function = argument(field.flag, help=help, **options)(function)
    return function


class LaunchInterrupted(KeyboardInterrupt):
    """``%gpugeek_launch`` interrupted: still an interrupt (a notebook run stops there), shown as
    one line, since the launch's own clean-up left nothing of the pool behind; the traceback through
    dask's start says nothing more."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"launch of pool {name!r} interrupted: nothing of it is left running and the name is free "
            f"(run the same %gpugeek_launch to start it)"
        )

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class PoolCardUpdater(PoolLifecyclePlugin):
    """Pool plugin of one pool card: shows the pool's final status when it stops, then removes itself."""

    def __init__(self, pool_id: int, card: Any) -> None:
        self.pool_id = pool_id
        self.card = card
        self.name = f"gpugeek-pool-card-{pool_id}"  # one per pool: a card never outlives its pool's plugin

    def before_stop(self, manager: PoolManager, pool: Any, reason: str) -> None:
        """Say ``stopping`` (no workers ready, no dashboard to open) the moment the stop begins."""
        if pool.id == self.pool_id:
            self.card.set_status("stopping")

    def stopped(self, manager: PoolManager, record: PoolRecord) -> None:
        """Mark the card with ``record``'s status when it is this card's pool."""
        if record.id != self.pool_id:
            return
        self.card.set_status(record.status.value)
        if self.name:
            manager.unregister_plugin(self.name)


DETAIL_COLUMNS = ["autoscale", "pending", "decision"]


def autoscale_details(records: list[Any]) -> dict[int, dict[str, str]]:
    """Pool id -> the rule, the pending work and the last decision of its autoscaling in this process
    (pools without autoscaling are not in it)."""
    from ..pools.autoscale import autoscaling_of

    path = get_pool_manager().registry.path
    details = {}
    for record in records:
        scaling = autoscaling_of(record, path)
        if scaling is not None:
            details[record.id] = {
                "autoscale": "; ".join(scaling.rules()),
                "pending": "; ".join(scaling.pending()),
                "decision": "; ".join(scaling.decisions()),
            }
    return details


def pool_table(records: list[Any], detail: bool = False) -> Any:
    """A pandas DataFrame with one row per pool record; ``detail``: with its autoscaling's columns."""

    import pandas as pd

    rows = [
        {
            "name": r.name,
            "status": r.status.value,
            "backend": r.backend,
            "gpus": f"{r.count} x {r.gpu_type}",
            "owner": r.owner,
            "created": local_time(r.created_at),
            "dashboard": (browser_link(r.dashboard_link) or "") if r.status.is_live else "",
            "reason": r.reason or "",
        }
        for r in records
    ]
    columns = ["name", "status", "backend", "gpus", "owner", "created", "dashboard", "reason"]
    if detail:
        details = autoscale_details(records)
        for row, record in zip(rows, records):
            row.update(details.get(record.id, dict.fromkeys(DETAIL_COLUMNS, "")))
        columns += DETAIL_COLUMNS
    return pd.DataFrame(rows, columns=columns)


@magics_class
class PoolMagics(Magics):
    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        get_pool_manager().owner = kernel_owner()

    @magic_arguments()
    @launch_field_arguments
    @argument("--pricing", dest="base_pricing", default=None, help=argparse.SUPPRESS)  # the old name, still accepted
    @argument(
        "--dry-run",
        action="store_true",
        help="print what would be created (kubernetes manifests, the Slurm job script) and stop",
    )
    @argument("--quiet", action="store_true", help="no pool card")
    @line_magic
    def gpugeek_launch(self, line: str) -> Any:
        """Example::

            In [1]: %gpugeek_launch --gpu-type cpu --count 2 --name dev
            (a pool card: dev, local, 2 x cpu, workers 2/2, ready, dashboard link, USD per hour)
            Out[1]: <Pool 'dev' ready: 2 x cpu, backend=local, dashboard=/gpugeek/pools/dev/dashboard/status>

        Launch a pool of GPU (or CPU) workers and make it the current pool. The pool is returned, and
        ``gpugeek_jupyter.current_pool()`` gives it later. Options are the keyword arguments of
        ``gpugeek_jupyter.launch(...)`` and the fields of ``POST /gpugeek/pools``, with '-' for '_'.

        More examples::

            In [2]: %gpugeek_launch --gpu-type A100-80GB --count 4 --interconnect NVLink --framework "PyTorch 2.0"
            In [3]: %gpugeek_launch --gpu-type H100-80GB --count 4 --spot-fraction 0.7 --base-pricing reserved --budget 200
            In [4]: %gpugeek_launch --backend address --address tcp://10.0.0.5:8786 --count 8 --gpu-type H100-80GB
            In [5]: %gpugeek_launch --backend kubernetes --namespace team-risk --gpu-type A100-80GB --count 8 --dry-run
            In [6]: %gpugeek_launch --backend slurm --partition gpu --account proj42 --walltime 04:00:00 --gpu-type A100-80GB --count 8
            In [7]: %gpugeek_launch --backend slurm --gpu-type H100-80GB --count 4 --prologue "module load cuda/12.4" --dry-run
            In [8]: %gpugeek_launch --gpu-type cpu --count 2 --name train --keep    # outlives this kernel

        ``--keep`` gives the pool to the user's agent (started on demand, a process of its own): the
        pool survives this kernel, the browser and the Jupyter server, and runs detached jobs
        (``%%gpugeek_run --detach``); it ends with ``%gpugeek_stop``, its idle timeout, budget or walltime.
        """
        args = parse_options(self.gpugeek_launch, line, "--gpu-type cpu --count 2 --name dev")
        with usage_errors():
            spec = PoolSpec.create(**{f.name: getattr(args, f.name) for f in LAUNCH_FIELDS if f.spec_field})
            if args.dry_run:
                return self._dry_run(spec)
            return self._launch(spec, quiet=args.quiet, keep=args.keep)

    def _dry_run(self, spec: PoolSpec) -> None:
        if spec.backend == "slurm":
            from ..pools.slurm import render_job_script

            print(render_job_script(spec))
            return None
        if spec.backend != "kubernetes":
            raise UsageError(
                f"--dry-run shows Kubernetes manifests or a Slurm job script; it needs --backend kubernetes or "
                f"slurm, got --backend {spec.backend} "
                f"(e.g. %gpugeek_launch --backend slurm --gpu-type A100-80GB --count 8 --dry-run)"
            )
        from ..pools.k8s_manifest import render_manifests

        print(render_manifests(spec))
        return None

    def _launch(self, spec: PoolSpec, quiet: bool, keep: bool = False) -> Any:
        from ..pricing import hourly_rate, prices_in_force

        manager = get_pool_manager()
        manager.ensure_name_free(spec.name)  # before a card is shown for a pool that cannot start
        card = None
        if not quiet:
            from ..widgets.pool_card import PoolCard

            card = PoolCard(spec, usd_per_hour=hourly_rate(spec, prices_in_force(spec)))
            display(card)
        try:
            if keep:
                from ..detached import launch_kept

                pool = launch_kept(spec)  # by the agent: no progress reaches this kernel before it is up
            else:
                pool = manager.launch(spec, on_progress=card.set_progress if card else None)
        except BaseException as e:
            interrupted = isinstance(e, KeyboardInterrupt)
            if card is not None:
                why = magic_message(e).splitlines()[0] if str(e) else type(e).__name__
                card.set_status("failed", "interrupted" if interrupted else why)
            if interrupted and not keep:  # a kept pool's launch goes on in the agent: not said to be over
                raise LaunchInterrupted(spec.name) from None
            raise
        if card is not None:
            from ..widgets.cost_meter import CostMeter

            card.set_running(pool.dashboard_link, pool.usd_per_hour)
            card.add_child(CostMeter(pool, tick_seconds=2.0))  # ticks from the ledger until the pool ends
            manager.register_plugin(PoolCardUpdater(pool.id, card))
        return pool

    @magic_arguments()
    @argument("--live", action="store_true", help="only pools that are starting, ready or stopping")
    @argument("--all", action="store_true", help="the whole history, every pool ever recorded")
    @argument(
        "--detail",
        action="store_true",
        help="for pools this kernel autoscales: the rule, what is pending (tasks, queued ranks) and the last decision",
    )
    @line_magic
    def gpugeek_pools(self, line: str) -> Any:
        """Example::

            In [1]: %gpugeek_pools
            Out[1]:
              name status backend     gpus        owner              created dashboard reason
            0  dev  ready   local  2 x cpu  kernel 3f2a  2026-11-30 09:12:03  /gpugeek/pools/dev/dashboard/status

        A table of the pools in the registry, whoever made them (notebooks, the side panel, scripts):
        by default live pools and those that ended in the last 24 hours, oldest first; ``--live``
        for live pools only, ``--all`` for every pool ever recorded. A live pool's dashboard is the
        Jupyter server's route to it, behind the Jupyter login; an ended pool has none.

        ``--detail`` adds, for each pool this kernel autoscales
        (``gpugeek_jupyter.pools.autoscale.autoscale(pool, policy)``), its rule, what is pending (dask
        tasks and the ranks of its queued jobs) as of the last check and its last decision::

            In [2]: %gpugeek_pools --live --detail
            Out[2]:
              name status ... autoscale                                          pending                             decision
            0  dev  ready ... > 1 pending adds 2, min 1, max 3, idle 60 s  2 pending: 2 ranks of queued jobs  3 workers, a job runs: every worker is busy; last change 1 -> 3 (2 pending: 2 ranks of queued jobs) 4 s ago

        Pools without autoscaling here have those columns empty.
        """
        args = parse_options(self.gpugeek_pools, line, "--live")
        if args.live and args.all:
            raise UsageError("pass --live or --all, not both (e.g. %gpugeek_pools --all)")
        with usage_errors():
            if args.live or args.all:
                return pool_table(list_pools(live_only=args.live), detail=args.detail)
            return pool_table(recent_pools(), detail=args.detail)

    @magic_arguments()
    @pool_arguments("to make current (a running pool, see %%gpugeek_pools)")
    @line_magic
    def gpugeek_use(self, line: str) -> Any:
        """Example::

            In [1]: %gpugeek_use dev
            using pool 'dev' (2 x cpu, local)

        Make pool NAME (or ``--pool NAME``) the current one, the pool the other magics use when none
        is named; a pool another kernel or the server launched is attached to.
        """
        args = parse_options(self.gpugeek_use, line, "dev")
        name = chosen_pool(args, "gpugeek_use", "dev")
        if name is None:
            raise UsageError("name the pool to use (e.g. %gpugeek_use dev)")
        with usage_errors():
            pool = get_pool_manager().use(name)
        print(f"using pool '{pool.name}' ({pool.spec.count} x {pool.spec.gpu_type}, {pool.spec.backend})")
        return None

    @magic_arguments()
    @pool_arguments("to stop (any owner: another kernel's pool is asked to stop)")
    @argument("--all", action="store_true", help="stop every pool this kernel launched or uses")
    @line_magic
    def gpugeek_stop(self, line: str) -> None:
        """Example::

            In [1]: %gpugeek_stop dev
            stopped pool 'dev' (stopped)

        Stop pool NAME (or ``--pool NAME``), whoever launched it, or with ``--all`` every pool this
        kernel launched or uses: ``%gpugeek_stop --all``.
        """
        args = parse_options(self.gpugeek_stop, line, "dev")
        name = chosen_pool(args, "gpugeek_stop", "dev")
        if (name is None) == (not args.all):
            raise UsageError("name one pool or pass --all, not both and not neither (e.g. %gpugeek_stop dev)")
        manager = get_pool_manager()
        with usage_errors():
            if args.all:
                names = manager.stop_all()
                print(f"stopped {len(names)} pool(s): {', '.join(names)}" if names else "no pool to stop")
                return
            assert name is not None
            record = manager.stop(name)
        print(f"stopped pool '{record.name}' ({record.status.value})")
