"""Cost magic: ``%gpugeek_cost`` (report, CSV, chart, owned vs cloud); budget and idle notices."""

from __future__ import annotations

import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

from ..cost import ledger, tco
from ..pools import PoolLifecyclePlugin
from ..runtime import get_pool_manager
from ..widgets.cost_chart import bar_chart
from ._common import parse_options, usage_errors

_SHOWN = [
    "pool",
    "job",
    "status",
    "hours",
    "gpu_hours",
    "compute_usd",
    "storage_usd",
    "network_usd",
    "total_usd",
    "idle_usd",
    "preemptions",
]
_UTILIZATION_LEVELS = (0.1, 0.25, 0.5, 0.75, 1.0)
_FLAGS = {"path": "--csv"}  # tco.write_csv(breakdowns, path)


def print_notice(pool: Any, kind: str, message: str) -> None:
    """Show a core notice (budget at 80 %, budget spent, idle shutdown) in the notebook."""
    print(f"gpugeek: {message}", file=sys.stderr, flush=True)


class NoticePrinter(PoolLifecyclePlugin):
    """Pool plugin: prints the core's notices in the notebook (one per process, by its name)."""

    name = "gpugeek-print-notices"

    def notice(self, manager: Any, pool: Any, kind: str, message: str) -> None:
        """Show ``message`` (see :func:`print_notice`)."""
        print_notice(pool, kind, message)


@magics_class
class CostMagics(Magics):
    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        get_pool_manager().register_plugin(NoticePrinter())  # by name: loading the magics again replaces it

    @magic_arguments()
    @argument("pool", nargs="?", default=None, help="pool name (default: the current pool)")
    @argument("--job", default=None, help="report one job by id")
    @argument("--all", action="store_true", help="every pool in the registry, whoever made it")
    @argument("--since", default=None, help="only cost from this date on (e.g. 2026-11-01)")
    @argument("--no-jobs", action="store_true", help="pools only, without a row per job")
    @argument("--csv", default=None, help="also write the report to this CSV file")
    @argument("--chart", action="store_true", help="show a bokeh bar chart of the report")
    @argument("--storage-gb", default=None, help="state the pool's (or --job's) stored data volume in GB")
    @argument("--network-gb", default=None, help="state the pool's (or --job's) total data transferred in GB")
    @argument("--compare-owned", action="store_true", help="cloud against owning the hardware (see the options below)")
    @argument("--gpu-type", default=None, help="compare-owned: GPU type (default: the pool's)")
    @argument("--count", default=None, help="compare-owned: number of GPUs (default: the pool's, else 1)")
    @argument(
        "--hours-per-month", default=None, help="compare-owned: hours of use per GPU (default: measured, last 30 days)"
    )
    @argument(
        "--pricing", default="on-demand", help="compare-owned: cloud price: on-demand (default), spot or reserved"
    )
    @argument("--price", default=None, help="compare-owned: cloud USD per GPU-hour (default: the catalog's)")
    @argument("--purchase", default=None, help="compare-owned: purchase USD per GPU (default: the catalog's)")
    @argument("--watts", default=None, help="compare-owned: power per GPU in W (default: the catalog's)")
    @argument("--kwh-price", default=None, help=f"compare-owned: USD per kWh (default {tco.DEFAULT_POWER_USD_PER_KWH})")
    @argument("--pue", default=None, help=f"compare-owned: data-centre PUE (default {tco.DEFAULT_PUE})")
    @argument("--amortization", default=None, help=f"compare-owned: months (default {tco.DEFAULT_AMORTIZATION_MONTHS})")
    @argument("--overhead", default=None, help="compare-owned: USD per GPU-month for space, staff, support (default 0)")
    @argument("-o", "--output", default=None, help="store the report DataFrame (or the comparison) in this variable")
    @line_magic
    def gpugeek_cost(self, line: str) -> None:
        """What pools and jobs cost, from the registry (the same numbers as the side panel).

        Examples::

            In [1]: %gpugeek_cost
                     pool job  status  hours  gpu_hours  compute_usd ... total_usd  idle_usd
                    0 dev      ready   0.50       1.00         0.05 ...      0.05      0.01
            USD 0.01 of USD 0.05 went to idle GPUs (pool dev)
            In [2]: %gpugeek_cost --all --since 2026-11-01 --csv cost.csv --chart
            In [3]: %gpugeek_cost --job 3f2a9c
            In [4]: %gpugeek_cost --compare-owned --gpu-type H100-80GB --hours-per-month 200
            1 x H100-80GB for 200 h/month (27% utilization): cloud (on-demand) USD 2,212/month, owned ...
        """
        args = parse_options(self.gpugeek_cost, line, "--all --since 2026-11-01")
        with usage_errors(flags=_FLAGS):
            if args.compare_owned:
                result = self._compare_owned(args)
            else:
                result = self._report(args)
        if args.output and self.shell is not None:
            self.shell.user_ns[args.output] = result

    # -- report --------------------------------------------------------------------------------------
    def _report(self, args: Any) -> Any:
        manager = get_pool_manager()
        registry = manager.registry
        since = tco.parse_since(args.since)
        pool: int | str | None = args.pool
        if pool is None and args.job is None and not args.all:
            current = manager.current
            if current is None:
                raise UsageError("no current pool: name one, or pass --job ID or --all (e.g. %gpugeek_cost --all)")
            pool = current.id
        if args.storage_gb is not None or args.network_gb is not None:
            self._state_volumes(registry, pool, args)
        breakdowns = tco.cost_report(
            registry, pool=pool, job_id=args.job, all_pools=args.all, since=since, by_job=not args.no_jobs
        )
        frame = tco.to_dataframe(breakdowns)
        if frame.empty:
            print(
                "no pool has run in that period"
                if since
                else "no pool in the registry yet (start one with %gpugeek_launch)"
            )
            return frame
        display(frame[_SHOWN].round(4))
        for b in breakdowns:
            print(_pool_lines(b))
        if args.csv:
            path = tco.write_csv(breakdowns, args.csv)
            print(f"wrote {len(frame)} rows to {path}")
        if args.chart:
            from jupyter_bokeh import BokehModel

            display(BokehModel(bar_chart(breakdowns)))
        return frame

    def _state_volumes(self, registry: Any, pool: int | str | None, args: Any) -> None:
        if args.job is not None:
            pool_id, job_id = registry.job(args.job).pool_id, args.job
        elif pool is not None:
            pool_id = pool if isinstance(pool, int) else registry.latest_pool(str(pool)).id
            job_id = None
        else:
            raise UsageError(
                "--storage-gb/--network-gb need one pool or --job, not --all (e.g. %gpugeek_cost dev --storage-gb 500)"
            )
        ledger.record_data_volume(
            registry,
            pool_id,
            storage_gb=_number(args.storage_gb, "--storage-gb", "500"),
            network_gb=_number(args.network_gb, "--network-gb", "40"),
            job_id=job_id,
            stated=True,
        )

    # -- owned vs cloud ------------------------------------------------------------------------------
    def _compare_owned(self, args: Any) -> Any:
        import pandas as pd

        manager = get_pool_manager()
        current = manager.current
        gpu_type = args.gpu_type or (current.spec.gpu_type if current else None)
        if not gpu_type:
            raise UsageError(
                "--compare-owned needs --gpu-type when no pool is current (e.g. --compare-owned --gpu-type H100-80GB)"
            )
        count = _number(args.count, "--count", "8")
        if count is None:
            count = current.spec.count if current and current.spec.gpu_type == gpu_type else 1
        if count < 1 or not float(count).is_integer():
            raise UsageError(f"--count must be a whole number >= 1, got {args.count!r} (e.g. --count 8)")
        hours = _number(args.hours_per_month, "--hours-per-month", "200")
        if hours is None:
            hours = tco.usage_hours_per_month(manager.registry, gpu_type)
        options = {
            "pricing": args.pricing,
            "cloud_usd_per_gpu_hour": _number(args.price, "--price", "2.10"),
            "purchase_usd": _number(args.purchase, "--purchase", "30000"),
            "power_watts": _number(args.watts, "--watts", "700"),
            "power_usd_per_kwh": _number(args.kwh_price, "--kwh-price", "0.12"),
            "pue": _number(args.pue, "--pue", "1.4"),
            "amortization_months": _number(args.amortization, "--amortization", "36"),
            "overhead_usd_per_month": _number(args.overhead, "--overhead", "150"),
        }
        options = {k: v for k, v in options.items() if v is not None}
        yours = tco.compare_owned(gpu_type, hours, count=int(count), **options)
        print(yours.summary())
        levels = sorted({*_UTILIZATION_LEVELS, round(yours.utilization, 4)})
        rows = []
        for level in levels:
            r = tco.compare_owned(gpu_type, level * ledger.HOURS_PER_MONTH, count=int(count), **options)
            rows.append(
                {
                    "utilization": f"{level:.0%}" + (" (yours)" if abs(level - yours.utilization) < 1e-4 else ""),
                    "hours_per_month": round(r.hours_per_month, 1),
                    "cloud_usd_per_month": round(r.cloud_usd_per_month, 2),
                    "owned_usd_per_month": round(r.owned_usd_per_month, 2),
                    "owned_minus_cloud": round(r.monthly_difference, 2),
                    "cheaper": r.cheaper,
                }
            )
        display(pd.DataFrame(rows))
        return yours


def _pool_lines(b: ledger.CostBreakdown) -> str:
    what = f"job {b.job_id}" if b.job_id else f"pool {b.pool_name}"
    lines = [f"{what}: {b.idle_sentence()}"]
    if b.usd_per_hour_now > 0:
        lines.append(
            f"  now {ledger.format_usd(b.usd_per_hour_now)}/h; {ledger.format_usd(b.projected_usd(24))} by this time tomorrow at this rate"
        )
    if b.budget_usd and not b.job_id:
        lines.append(
            f"  budget: {ledger.format_usd(b.total_usd)} of {ledger.format_usd(b.budget_usd)} ({b.budget_fraction or 0:.0%})"
        )
    for p in b.preemptions:
        lines.append(
            f"  spot worker {p.worker_name} preempted after {p.hours * 60:,.1f} min ({ledger.format_usd(p.usd)})"
        )
    return "\n".join(lines)


def _number(value: Any, flag: str, example: str) -> float | None:
    if value in (None, ""):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{flag} must be a number, got {value!r} (e.g. {flag} {example})") from None
