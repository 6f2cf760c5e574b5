"""Cost magics: ``%gpugeek_cost`` (the report: table, CSV, chart) and ``%gpugeek_tco`` (owning the
GPUs against renting them); budget and idle notices."""

from __future__ import annotations

import shlex
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
from ._common import chosen_pool, local_time, option_number, parse_options, pool_arguments, usage_errors

# the summary: what a person reads first; --detail shows _DETAIL (every part of the cost)
_SUMMARY = ["pool", "job", "hours", "USD", "idle"]
_DETAIL = [
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
    "busy_usd",
    "unsampled_usd",
    "preemptions",
]
_UTILIZATION_LEVELS = (0.1, 0.25, 0.5, 0.75, 1.0)
_FLAGS = {"path": "--csv"}  # tco.write_csv(breakdowns, path)

# what --team --by shows before gpu_hours and USD, per kind of row (team_report's keys)
TEAM_COLUMNS = {
    "user": ["user", "gpu_type", "pools"],
    "group": ["group", "gpu_type", "users", "pools"],
    "pool": ["user", "pool", "host", "backend", "gpu_type", "started_at", "ended_at"],
}

# %gpugeek_cost's owned-vs-cloud options before %gpugeek_tco had them: old flag -> its flag there
_MOVED_TO_TCO: dict[str, str | None] = {
    "--compare-owned": None,
    "--gpu-type": "--gpu-type",
    "--count": "--count",
    "--hours-per-month": "--hours-per-month",
    "--pricing": "--pricing",
    "--price": "--price",
    "--purchase": "--purchase-usd",
    "--watts": "--power-watts",
    "--kwh-price": "--power-usd-per-kwh",
    "--pue": "--pue",
    "--amortization": "--amortization-months",
    "--overhead": "--overhead-usd-per-month",
}


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
    @pool_arguments("to report (default: the current pool)")
    @argument("--job", default=None, metavar="ID", help="report one job by id")
    @argument("--all", action="store_true", help="every pool in the registry, whoever made it")
    @argument("--since", default=None, metavar="DATE", help="only cost from this date on (e.g. 2026-11-01)")
    @argument(
        "--team",
        action="store_true",
        help="the team's spend per user, group or pool (--by), from the team ledger (default: this month; a hub "
        "admin sees every user, anyone else their own)",
    )
    @argument("--until", default=None, metavar="DATE", help="with --team: spend up to this date (default: now)")
    @argument("--user", default=None, metavar="NAME", help="with --team: this user's rows only")
    @argument(
        "--by",
        default=None,
        metavar="WHAT",
        help="with --team: a row per user (default), hub group or pool, each with its GPU type",
    )
    @argument("--no-jobs", action="store_true", help="pools only, without a row per job")
    @argument("--csv", default=None, metavar="PATH", help="also write the report to this CSV file")
    @argument("--chart", action="store_true", help="show a bokeh bar chart of the report")
    @argument(
        "--detail",
        action="store_true",
        help="every part of the cost (GPU-hours, compute, storage, network, idle, busy, unsampled, preemptions)",
    )
    @argument("--storage-gb", default=None, metavar="GB", help="state the pool's (or --job's) stored data volume")
    @argument("--network-gb", default=None, metavar="GB", help="state the pool's (or --job's) data transferred")
    @argument(
        "-o", "--out", dest="out", default=None, metavar="VAR", help="store the report DataFrame in this variable"
    )
    @line_magic
    def gpugeek_cost(self, line: str) -> None:
        """Example::

            In [1]: %gpugeek_cost dev --no-jobs
              pool job status  hours  gpu_hours  compute_usd ... total_usd  idle_usd  busy_usd  unsampled_usd ...
            0  dev      ready   3.20       6.40        24.67 ...     24.67     16.02      0.05           8.60 ...
            pool dev, compute USD 24.67: idle 16.02, busy 0.05, unsampled 8.60 (2.1 h without utilization samples)

        What pool NAME (or ``--pool NAME``; default: the current pool) and its jobs cost, from the
        registry: the same numbers as the side panel and ``gpugeek_jupyter.cost.cost_report(...)``,
        whose keyword arguments the options are. Compute splits into idle and busy, over the time
        utilization was sampled, and unsampled, the time it was not.

        The team's spend (``--team``, from the team ledger: ``GpugeekConfig.team_ledger_url``), as
        ``gpugeek_jupyter.cost.team.team_report(since=, until=, user=)`` and ``GET /gpugeek/team``
        give it; a hub admin sees every user, anyone else their own rows::

            In [5]: %gpugeek_cost --team --since 2026-11-01
                  user   gpu_type  pools  gpu_hours      USD
            0      ada  H100-80GB      3      48.00   240.00
            1  grace        cpu      2       0.00     0.31
            team: USD 240.31 from 2026-11-01 00:00 to now, 2 users

        ``--by group`` gives a row per hub group (a pool counts in the groups its user was in at its
        launch, shared evenly among them), ``--by pool`` a row per pool.

        More examples::

            In [2]: %gpugeek_cost --all --since 2026-11-01 --csv cost.csv --chart -o report
            In [3]: %gpugeek_cost --job job-3f2a9c1d8c19
            In [4]: %gpugeek_cost dev --storage-gb 500 --network-gb 40

        The table is a summary (pool, job, hours, USD, idle share of the sampled time); ``--detail``
        shows every part. Money is shown in cents from 1 USD up and with two significant digits
        below (``USD 0.00019``), everywhere; ``-o VAR`` and ``--csv`` keep full precision.

        Owning the GPUs instead of renting them: ``%gpugeek_tco``.
        """
        moved = _moved_to_tco(line)
        if moved is not None:
            raise UsageError(moved)
        args = parse_options(self.gpugeek_cost, line, "dev --since 2026-11-01")
        pool = chosen_pool(args, "gpugeek_cost", "dev")
        team_only = (("--until", args.until, "2026-11-30"), ("--user", args.user, "ada"), ("--by", args.by, "group"))
        for flag, given, example in team_only:
            if given and not args.team:
                raise UsageError(f"{flag} goes with --team (e.g. %gpugeek_cost --team {flag} {example})")
        with usage_errors(flags=_FLAGS):
            result = self._team(args, pool) if args.team else self._report(args, pool)
        if args.out and self.shell is not None:
            self.shell.user_ns[args.out] = result

    def _team(self, args: Any, pool_name: str | None) -> Any:
        import pandas as pd

        from ..cost.team import kernel_viewer, team_report

        clashing = [f for f, given in (("NAME", pool_name), ("--job", args.job), ("--all", args.all)) if given]
        if clashing:
            raise UsageError(
                f"--team reports the whole team's spend, so it takes no {clashing[0]} "
                "(e.g. %gpugeek_cost --team --since 2026-11-01)"
            )
        viewer = kernel_viewer()
        by = args.by or "user"
        rows = team_report(since=args.since, until=args.until, user=args.user, by=by, viewer=viewer)
        frame = pd.DataFrame(rows, columns=[*TEAM_COLUMNS[by], "gpu_hours", "usd"])
        if frame.empty:
            print("no pool of " + ("the team" if viewer.admin and not args.user else "yours") + " ran in that period")
            return frame
        shown = {column: frame[column] for column in TEAM_COLUMNS[by]}
        if by == "group":
            shown["group"] = frame["group"].replace("", "(no group)")
        for moment in ("started_at", "ended_at"):
            if moment in shown:
                shown[moment] = [_moment(t) for t in frame[moment]]
        shown["gpu_hours"] = [f"{h:.2f}" for h in frame["gpu_hours"]]
        shown["USD"] = [ledger.format_usd(x).removeprefix("USD ") for x in frame["usd"]]
        display(pd.DataFrame(shown))
        counted = len(frame) if by == "pool" else frame[by].nunique()
        whose = "team" if viewer.admin else f"{viewer.name} (hub admins see every user)"
        print(
            f"{whose}: {ledger.format_usd(float(frame['usd'].sum()))} from {args.since or 'the first of this month (UTC)'} "
            f"to {args.until or 'now'}, {counted} {by}{'s' if counted != 1 else ''}"
        )
        return frame

    def _report(self, args: Any, pool_name: str | None) -> Any:
        manager = get_pool_manager()
        registry = manager.registry
        since = tco.parse_since(args.since)
        pool: int | str | None = pool_name
        if pool is None and args.job is None and not args.all:
            current = manager.current
            if current is None:
                raise UsageError("no current pool: name one, or pass --job ID or --all (e.g. %gpugeek_cost --all)")
            pool = current.id
        if args.storage_gb is not None or args.network_gb is not None:
            self._state_volumes(registry, pool, args)
        breakdowns = tco.cost_report(
            registry, pool=pool, job=args.job, all=args.all, since=since, jobs=not args.no_jobs
        )
        frame = tco.to_dataframe(breakdowns)
        if frame.empty:
            print(
                "no pool has run in that period"
                if since
                else "no pool in the registry yet (start one with %gpugeek_launch)"
            )
            return frame
        display(frame[_DETAIL].round(6) if args.detail else summary_table(frame))
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
            storage_gb=option_number(args.storage_gb, "storage_gb", 500),
            network_gb=option_number(args.network_gb, "network_gb", 40),
            job_id=job_id,
            stated=True,
        )

    # -- owned vs cloud ------------------------------------------------------------------------------
    @magic_arguments()
    @pool_arguments("whose GPU type and count to compare (default: the current pool)")
    @argument("--gpu-type", default=None, help="GPU type (default: the pool's)")
    @argument("--count", default=None, help="number of GPUs (default: the pool's, else 1)")
    @argument("--hours-per-month", default=None, help="hours of use per GPU (default: measured, last 30 days)")
    @argument("--pricing", default=None, help="cloud price: on-demand (default), spot or reserved")
    @argument("--price", default=None, help="cloud USD per GPU-hour (default: the catalog's, for --pricing)")
    @argument("--purchase-usd", default=None, help="purchase price per GPU (default: the catalog's)")
    @argument("--power-watts", default=None, help="power per GPU in W (default: the catalog's)")
    @argument("--power-usd-per-kwh", default=None, help=f"electricity price (default {tco.DEFAULT_POWER_USD_PER_KWH})")
    @argument("--pue", default=None, help=f"data-centre power usage effectiveness (default {tco.DEFAULT_PUE})")
    @argument(
        "--amortization-months", default=None, help=f"write-off period (default {tco.DEFAULT_AMORTIZATION_MONTHS})"
    )
    @argument("--overhead-usd-per-month", default=None, help="per GPU: space, staff, support (default 0)")
    @argument("-o", "--out", dest="out", default=None, metavar="VAR", help="store the comparison in this variable")
    @line_magic
    def gpugeek_tco(self, line: str) -> None:
        """Example::

            In [1]: %gpugeek_tco --gpu-type H100-80GB --count 8 --hours-per-month 200
            8 x H100-80GB for 200 h/month (27% utilization): cloud (on-demand) USD 17,696/month, owned USD
            6,855/month; owning saves USD 10,841/month (61%); owning breaks even above 10% utilization (76 h/month)
               utilization  hours_per_month  ...  owned_minus_cloud cheaper
            0          10%             73.0  ...             276.31   cloud
            2  27% (yours)            200.0  ...          -10842.92   owned
            5         100%            730.0  ...          -57236.95   owned

        Renting GPUs against owning them, per month: pool NAME's (or ``--pool NAME``'s; default: the
        current pool's) GPU type and count at the hours they were used over the last 30 days, or
        what the options say. The options are the keyword arguments of
        ``gpugeek_jupyter.cost.compare_owned(...)``; the table shows the same at other utilizations.
        """
        args = parse_options(self.gpugeek_tco, line, "--gpu-type H100-80GB --hours-per-month 200")
        pool = chosen_pool(args, "gpugeek_tco", "dev")
        with usage_errors():
            result = self._compare_owned(args, pool)
        if args.out and self.shell is not None:
            self.shell.user_ns[args.out] = result

    def _compare_owned(self, args: Any, pool_name: str | None) -> Any:
        import pandas as pd

        manager = get_pool_manager()
        if pool_name is not None:
            record = manager.registry.latest_pool(pool_name)
            pool_type, pool_count = record.gpu_type, record.count
        elif manager.current is not None:
            pool_type, pool_count = manager.current.spec.gpu_type, manager.current.spec.count
        else:
            pool_type, pool_count = None, None
        gpu_type = args.gpu_type or pool_type
        if not gpu_type:
            raise UsageError(
                "no pool to compare: name one or give --gpu-type (e.g. %gpugeek_tco --gpu-type H100-80GB --hours-per-month 200)"
            )
        count: Any = option_number(args.count, "count", 8)  # compare_owned says when it is not whole
        if count is None:
            count = pool_count if pool_count and pool_type == gpu_type else 1
        hours = option_number(args.hours_per_month, "hours_per_month", 200)
        if hours is None:
            hours = tco.usage_hours_per_month(manager.registry, gpu_type)
        options: dict[str, Any] = {
            "pricing": args.pricing,
            "price": option_number(args.price, "price", 2.1),
            "purchase_usd": option_number(args.purchase_usd, "purchase_usd", 30000),
            "power_watts": option_number(args.power_watts, "power_watts", 700),
            "power_usd_per_kwh": option_number(args.power_usd_per_kwh, "power_usd_per_kwh", 0.12),
            "pue": option_number(args.pue, "pue", 1.4),
            "amortization_months": option_number(args.amortization_months, "amortization_months", 36),
            "overhead_usd_per_month": option_number(args.overhead_usd_per_month, "overhead_usd_per_month", 150),
        }
        options = {k: v for k, v in options.items() if v is not None}
        yours = tco.compare_owned(gpu_type, hours, count=count, **options)
        print(yours.summary())
        levels = sorted({*_UTILIZATION_LEVELS, round(yours.utilization, 4)})
        rows = []
        for level in levels:
            r = tco.compare_owned(gpu_type, level * ledger.HOURS_PER_MONTH, count=yours.count, **options)
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


def _moved_to_tco(line: str) -> str | None:
    """The one-line message for an owned-vs-cloud option given to ``%gpugeek_cost``, naming the
    ``%gpugeek_tco`` line that does it; None when ``line`` has none."""
    try:
        words = shlex.split(line)
    except ValueError:
        return None  # parse_options names the quoting mistake
    flags = [w.split("=", 1)[0] for w in words if w.startswith("--")]
    moved = [f for f in flags if f in _MOVED_TO_TCO]
    if not moved:
        return None
    if "--compare-owned" not in moved:
        return (
            f"{moved[0]} is an option of the owned-vs-cloud comparison, which is %gpugeek_tco now "
            f"(e.g. %gpugeek_tco {moved[0]} ...; see %gpugeek_tco?)"
        )
    translated = []
    for word in words:
        flag, sep, value = word.partition("=")
        if flag in _MOVED_TO_TCO:
            new = _MOVED_TO_TCO[flag]
            if new is not None:
                translated.append(shlex.quote(new + sep + value))
        else:
            translated.append(shlex.quote(word))
    return f"--compare-owned moved: use %gpugeek_tco {' '.join(translated)}".rstrip()


def summary_table(frame: Any) -> Any:
    """The report's summary: pool, job, hours, USD (one rule for money, see ``ledger.format_usd``)
    and the idle share of the sampled compute ("-" where nothing was sampled)."""
    import pandas as pd

    def idle_share(row: Any) -> str:
        sampled = (row["idle_usd"] or 0.0) + (row["busy_usd"] or 0.0)
        return f"{row['idle_usd'] / sampled:.0%}" if sampled > 0 else "-"

    return pd.DataFrame(
        {
            "pool": frame["pool"],
            "job": frame["job"].fillna(""),
            "hours": [f"{h:.2f}" if h >= 1 or h == 0 else f"{h:.2g}" for h in frame["hours"]],
            "USD": [ledger.usd_amount(x) for x in frame["total_usd"]],
            "idle": [idle_share(row) for _, row in frame.iterrows()],
        },
        columns=_SUMMARY,
    )


def _moment(timestamp: float | None) -> str:
    """A ledger time as the notebook's local date and time ("running" for a pool not ended)."""
    if timestamp is None or timestamp != timestamp:  # None, or NaN from a frame column
        return "running"
    return local_time(timestamp, seconds=False)


def _pool_lines(b: ledger.CostBreakdown) -> str:
    what = f"job {b.job_id}" if b.job_id else f"pool {b.pool_name}"
    lines = [f"{what}, {b.idle_sentence()}"]
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
    if b.slurm_job_ids:
        ids = ",".join(b.slurm_job_ids)
        lines.append(f"  Slurm jobs {ids} (what the site charged: sacct -j {ids})")
    return "\n".join(lines)
