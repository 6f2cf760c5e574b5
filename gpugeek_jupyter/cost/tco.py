"""Total cost of ownership: the cost report (table, DataFrame, bokeh chart, CSV) and owned vs cloud.

The report applies the formula GPU-hours x price + storage x data volume + network x data
transferred to each pool, and to each job on it, from :mod:`~gpugeek_jupyter.cost.ledger` breakdowns.

>>> rows = cost_report(get_registry(), all=True)                # doctest: +SKIP
>>> to_dataframe(rows)[["pool", "job", "gpu_hours", "total_usd"]]  # doctest: +SKIP

:func:`compare_owned` weighs renting against owning the same GPUs:

>>> result = compare_owned("H100-80GB", hours_per_month=200)
>>> round(result.break_even_utilization, 3)        # owning pays off above ~10 % use at on-demand prices
0.104
>>> result.cheaper
'owned'
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..catalog import load_catalog
from ..config import get_config
from ..errors import NotFoundError, PerSurface, Phrase, Setting, SpecError
from ..store import Registry
from .ledger import HOURS_PER_MONTH, CostBreakdown, job_costs, pool_cost, pool_costs

if TYPE_CHECKING:
    import pandas as pd

# Owned-hardware assumptions, each overridable per call. Purchase price and board power per GPU type
# come from the catalog (data/catalog.toml: purchase_usd, power_watts).
DEFAULT_POWER_USD_PER_KWH = 0.12  # US commercial electricity, 2024-25 average (EIA Electric Power Monthly)
DEFAULT_PUE = 1.4  # power usage effectiveness of a typical enterprise data centre (Uptime Institute survey ~1.5)
DEFAULT_AMORTIZATION_MONTHS = 36  # three-year straight-line depreciation of servers, the common accounting choice

COLUMNS = [
    "pool",
    "job",
    "gpu_type",
    "status",
    "start",
    "end",
    "hours",
    "gpu_hours",
    "spot_hours",
    "reserved_hours",
    "on_demand_hours",
    "compute_usd",
    "storage_gb",
    "storage_usd",
    "network_gb",
    "network_usd",
    "total_usd",
    "idle_usd",
    "busy_usd",
    "unsampled_usd",
    "unsampled_hours",
    "sampled_usd",
    "mean_utilization",
    "preemptions",
    "preempted_usd",
    "usd_per_hour_now",
    "budget_usd",
    "slurm_job_ids",
]


# -- the report -------------------------------------------------------------------------------------
def parse_since(text: str | None) -> float | None:
    """``"2026-11-01"`` (or an ISO date-time, local time) as a timestamp."""
    if text in (None, ""):
        return None
    try:
        return dt.datetime.fromisoformat(str(text)).timestamp()
    except ValueError as e:
        raise SpecError(
            Phrase(
                "{field} {value} is not a date (e.g. {example} or {with_time})",
                with_time=Setting(since="2026-11-01T09:30"),
            ),
            field="since",
            value=text,
            rule="an ISO date or date-time",
            example="2026-11-01",
        ) from e


def cost_report(
    registry: Registry,
    pool: int | str | None = None,
    job: str | None = None,
    all: bool = False,  # shadows the builtin here only: the option is "all" on every surface (--all)
    since: float | str | None = None,
    jobs: bool = True,
    now: float | None = None,
) -> list[CostBreakdown]:
    """Breakdowns for one ``job`` (by id), one ``pool`` (by id or name), or ``all`` pools; each pool
    is followed by its jobs unless ``jobs=False``. ``since`` (a timestamp, or a date as
    ``%gpugeek_cost --since`` takes it: ``"2026-11-01"``) leaves out what ran before it.

    Pools whose owner died are marked lost first, so their cost ends at their last heartbeat.
    """
    if isinstance(since, str):
        since = parse_since(since)
    registry.mark_lost_pools(get_config().lost_after_seconds)
    if job is not None:
        from .ledger import job_cost

        return [job_cost(registry, job, now=now)]
    if all:
        pools = pool_costs(registry, since=since, now=now)
    elif pool is None:
        raise SpecError(
            PerSurface(
                core=Phrase(
                    "name a pool, a job or all pools (e.g. {pool}, {job} or {all})",
                    pool=Setting(pool="dev"),
                    job=Setting(job="job-3f2a9c1d8c19"),
                    all=Setting(all=True),
                ),
                magic="name a pool, a job or --all (e.g. %gpugeek_cost dev, --job job-3f2a9c1d8c19 or --all)",
            ),
            field="pool",
            rule="a pool, a job or all pools",
        )
    else:
        record = registry.pool_by_id(pool) if isinstance(pool, int) else registry.latest_pool(str(pool))
        pools = [pool_cost(registry, record.id, now=now, since=since)]
    rows: list[CostBreakdown] = []
    for breakdown in pools:
        rows.append(breakdown)
        if jobs:
            rows.extend(job_costs(registry, breakdown.pool_id, since=since, now=now))
    return rows


def report_rows(breakdowns: list[CostBreakdown]) -> list[dict[str, Any]]:
    """One flat, JSON-ready dict per breakdown, with the :data:`COLUMNS` keys."""
    rows = []
    for b in breakdowns:
        rows.append(
            {
                "pool": b.pool_name,
                "job": b.job_id or "",
                "gpu_type": b.gpu_type,
                "status": b.status,
                "start": _iso(b.start),
                "end": _iso(b.end),
                "hours": b.hours,
                "gpu_hours": b.gpu_hours,
                "spot_hours": b.worker_hours.get("spot", 0.0),
                "reserved_hours": b.worker_hours.get("reserved", 0.0),
                "on_demand_hours": b.worker_hours.get("on_demand", 0.0),
                "compute_usd": b.compute_usd,
                "storage_gb": b.storage_gb,
                "storage_usd": b.storage_usd,
                "network_gb": b.network_gb,
                "network_usd": b.network_usd,
                "total_usd": b.total_usd,
                "idle_usd": b.idle_usd,
                "busy_usd": b.busy_usd,
                "unsampled_usd": b.unsampled_usd,
                "unsampled_hours": b.unsampled_hours,
                "sampled_usd": b.sampled_usd,
                "mean_utilization": b.mean_utilization,
                "preemptions": len(b.preemptions),
                "preempted_usd": sum(p.usd for p in b.preemptions),
                "usd_per_hour_now": b.usd_per_hour_now,
                "budget_usd": b.budget_usd,
                "slurm_job_ids": ",".join(b.slurm_job_ids),  # as sacct -j takes them
            }
        )
    return rows


def to_dataframe(breakdowns: list[CostBreakdown]) -> pd.DataFrame:
    """The report as a pandas DataFrame (one row per pool and per job)."""
    import pandas as pd

    return pd.DataFrame(report_rows(breakdowns), columns=COLUMNS)


def write_csv(breakdowns: list[CostBreakdown], path: str | Path) -> Path:
    """Write the report to ``path`` as CSV (full precision); returns the path."""
    target = Path(path).expanduser()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        to_dataframe(breakdowns).to_csv(target, index=False)
    except OSError as e:
        raise SpecError(
            Phrase("cannot write the cost report to {value}: {why} (e.g. {example})", why=str(e.strerror)),
            field="path",
            value=str(path),
            rule="a file that can be written",
            example="cost.csv",
        ) from e
    return target


def _iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp).isoformat(sep=" ", timespec="seconds")


# -- owned vs cloud ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class OwnedVsCloud:
    """Renting ``count`` GPUs for ``hours_per_month`` against owning them; amounts in USD per month."""

    gpu_type: str
    count: int
    hours_per_month: float
    utilization: float  # hours_per_month / 730
    pricing: str
    cloud_usd_per_gpu_hour: float
    purchase_usd: float  # per GPU
    power_watts: float
    power_usd_per_kwh: float
    pue: float
    amortization_months: float
    overhead_usd_per_month: float  # per GPU: space, staff, support
    cloud_usd_per_month: float
    owned_usd_per_month: float
    owned_fixed_usd_per_month: float
    owned_energy_usd_per_gpu_hour: float
    break_even_hours_per_month: float | None  # None: the cloud is always cheaper
    break_even_utilization: float | None

    @property
    def monthly_difference(self) -> float:
        """Owned minus cloud: positive when the cloud is cheaper, negative when owning is."""
        return self.owned_usd_per_month - self.cloud_usd_per_month

    @property
    def cheaper(self) -> str:
        return "cloud" if self.monthly_difference > 0 else "owned"

    @property
    def savings_fraction(self) -> float:
        """What the cheaper option saves, as a share of the dearer one (the seed's "63 %")."""
        dearer = max(self.owned_usd_per_month, self.cloud_usd_per_month)
        return abs(self.monthly_difference) / dearer if dearer > 0 else 0.0

    def summary(self) -> str:
        """One sentence with the user's own numbers."""
        who = "the cloud" if self.cheaper == "cloud" else "owning"
        if self.break_even_utilization is None:
            even = "owning never breaks even at this price"
        else:
            even = (
                f"owning breaks even above {self.break_even_utilization:.0%} utilization "
                f"({self.break_even_hours_per_month:,.0f} h/month)"
            )
        return (
            f"{self.count} x {self.gpu_type} for {self.hours_per_month:,.0f} h/month ({self.utilization:.0%} utilization): "
            f"cloud ({self.pricing.replace('_', '-')}) USD {self.cloud_usd_per_month:,.0f}/month, owned USD "
            f"{self.owned_usd_per_month:,.0f}/month; {who} saves USD {abs(self.monthly_difference):,.0f}/month "
            f"({self.savings_fraction:.0%}); {even}"
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            monthly_difference=self.monthly_difference, cheaper=self.cheaper, savings_fraction=self.savings_fraction
        )
        return data


def compare_owned(
    gpu_type: str,
    hours_per_month: float,
    count: int = 1,
    pricing: str = "on_demand",
    price: float | None = None,
    purchase_usd: float | None = None,
    power_watts: float | None = None,
    power_usd_per_kwh: float = DEFAULT_POWER_USD_PER_KWH,
    pue: float = DEFAULT_PUE,
    amortization_months: float = DEFAULT_AMORTIZATION_MONTHS,
    overhead_usd_per_month: float = 0.0,
    price_file: str | None = None,
) -> OwnedVsCloud:
    """Cloud against owned for ``count`` GPUs of ``gpu_type`` used ``hours_per_month`` (0..730) each.

    Cloud: hours x the catalog's ``pricing`` rate, or ``price`` USD per GPU-hour (as ``price``
    overrides the catalog for a pool: ``launch(price=...)``). Owned: purchase /
    amortization months + overhead, a fixed monthly cost, plus energy while in use: watts x PUE x
    USD per kWh per hour. Break-even: the hours at which both are equal, fixed / (cloud rate -
    energy rate). Defaults lean towards owning (no staff, space or idle power unless
    ``overhead_usd_per_month`` says so), so a result in favour of the cloud is a conservative one.
    """
    catalog = load_catalog(price_file if price_file is not None else get_config().price_file or None)
    gpu = catalog.gpu(gpu_type)
    _check_number("hours_per_month", hours_per_month, 200, low=0.0, high=HOURS_PER_MONTH)
    _check_number("count", count, 8, low=1, whole=True)
    pricing_key = str(pricing).strip().lower().replace("-", "_")
    if pricing_key not in ("on_demand", "spot", "reserved"):
        raise SpecError(field="pricing", value=pricing, rule="on-demand, spot or reserved", example="reserved")
    rate = gpu.prices.to_dict()[pricing_key] if price is None else price
    purchase = gpu.purchase_usd if purchase_usd is None else purchase_usd
    watts = gpu.power_watts if power_watts is None else power_watts
    for name, value, example in (
        ("price", rate, 2.1),
        ("purchase_usd", purchase, 30000),
        ("power_watts", watts, 700),
        ("power_usd_per_kwh", power_usd_per_kwh, 0.12),
        ("overhead_usd_per_month", overhead_usd_per_month, 150),
    ):
        _check_number(name, value, example, low=0.0)
    _check_number("pue", pue, 1.4, low=1.0)
    _check_number("amortization_months", amortization_months, 36, low=1.0)
    if purchase <= 0:
        raise SpecError(
            Phrase("no purchase price for {gpu} in the catalog; give one (e.g. {example})", gpu=gpu.name),
            field="purchase_usd",
            value=purchase,
            rule="a number > 0",
            example=30000,
        )
    energy_per_hour = watts / 1000.0 * pue * power_usd_per_kwh
    fixed = purchase / amortization_months + overhead_usd_per_month
    owned = count * (fixed + energy_per_hour * hours_per_month)
    cloud = count * rate * hours_per_month
    margin = rate - energy_per_hour
    break_even = fixed / margin if margin > 0 else math.inf
    return OwnedVsCloud(
        gpu_type=gpu.name,
        count=int(count),
        hours_per_month=float(hours_per_month),
        utilization=hours_per_month / HOURS_PER_MONTH,
        pricing=pricing_key,
        cloud_usd_per_gpu_hour=float(rate),
        purchase_usd=float(purchase),
        power_watts=float(watts),
        power_usd_per_kwh=float(power_usd_per_kwh),
        pue=float(pue),
        amortization_months=float(amortization_months),
        overhead_usd_per_month=float(overhead_usd_per_month),
        cloud_usd_per_month=cloud,
        owned_usd_per_month=owned,
        owned_fixed_usd_per_month=count * fixed,
        owned_energy_usd_per_gpu_hour=energy_per_hour,
        break_even_hours_per_month=break_even if break_even <= HOURS_PER_MONTH else None,
        break_even_utilization=break_even / HOURS_PER_MONTH if break_even <= HOURS_PER_MONTH else None,
    )


def usage_hours_per_month(registry: Registry, gpu_type: str, days: float = 30.0, now: float | None = None) -> float:
    """Hours per GPU per month that pools of ``gpu_type`` actually ran over the last ``days`` days:
    the registry's worker-hours, divided by the largest pool's size, scaled to a 730-hour month."""
    now = registry.clock() if now is None else now
    since = now - days * 86400.0
    pools = [p for p in registry.list_pools() if p.gpu_type.lower() == gpu_type.lower()]
    if not pools:
        raise NotFoundError(
            Phrase("no {gpu} pool in the registry to measure use from; give it (e.g. {example})", gpu=str(gpu_type)),
            field="hours_per_month",
            rule="measured from the registry when not given",
            example=200,
        )
    worker_hours = sum(pool_cost(registry, p.id, now=now, since=since, include_idle=False).gpu_hours for p in pools)
    gpus = max(p.count for p in pools)
    return min(HOURS_PER_MONTH, worker_hours / max(1, gpus) * (HOURS_PER_MONTH / (days * 24.0)))


def _check_number(
    name: str, value: Any, example: float, low: float | None = None, high: float | None = None, whole: bool = False
) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (low is None or value >= low) and (high is None or value <= high)
    ok = ok and (not whole or float(value).is_integer())
    if not ok:
        bounds = f" from {low:g}" if low is not None else ""
        bounds += f" to {high:g}" if high is not None else ""
        kind = "a whole number" if whole else "a number"
        raise SpecError(field=name, value=value, rule=f"{kind}{bounds}", example=example)
