"""The ledger: what a pool (or one job) has cost, computed from durable registry rows.

Nothing is counted in memory. Compute cost is a query over the ``workers`` intervals, each priced at
the rate stored with the pool when it started (spot, reserved or on-demand USD per GPU-hour), so the
number survives a kernel or server crash and is the same in the notebook, the side panel and the
report. Intervals still open accrue up to ``now`` while the pool's owner heart-beats; once the owner
has been silent for ``lost_after_seconds`` they stop at its last heartbeat, exactly where
:meth:`Registry.mark_lost_pools` will close them.

Storage is priced per GB-month for the time the window lasted (730 h a month); network per GB.

Compute is split three ways, and the parts add up to it: **idle** and **busy**, over the time that
utilization samples cover (the cost of each sample's span times ``1 - utilization``, and times
``utilization``), and **unsampled**, the cost of the time no sample covers (telemetry off, not yet
started or stopped, the tail since the last sample). Unsampled time is shown as such, never shared
out as idle or busy.

>>> breakdown = pool_cost(get_registry(), pool_id=3)            # doctest: +SKIP
>>> breakdown.total_usd, breakdown.usd_per_hour_now             # doctest: +SKIP
(24.67, 6.97)
>>> breakdown.idle_sentence()                                   # doctest: +SKIP
'compute USD 24.67: idle 16.02, busy 0.05, unsampled 8.60 (2.1 h without utilization samples)'
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from ..errors import NotFoundError
from ..store import JobRecord, JobStatus, PoolRecord, Registry, WorkerInterval

HOURS_PER_MONTH = 730.0  # 365 x 24 / 12, the convention cloud providers bill GB-months with
PRICINGS = ("spot", "reserved", "on_demand")


def cents(amount: float) -> Decimal:
    """``amount`` rounded half up to the cent, as people round money (3.485 -> 3.49)."""
    return Decimal(repr(round(amount, 9))).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def usd_quantum(amount: float) -> Decimal:
    """The step money is shown in, one rule everywhere: cents from 1 USD up; below it two
    significant digits (never fewer than two decimals), so that small costs do not all read 0.00."""
    magnitude = abs(amount)
    if magnitude >= 1 or magnitude == 0 or magnitude != magnitude:  # NaN: as cents (never shown)
        return Decimal("0.01")
    exponent = Decimal(repr(magnitude)).adjusted()  # 0.000195 -> -4
    return min(Decimal("0.01"), Decimal(1).scaleb(exponent - 1))


def in_quantum(amount: float, quantum: Decimal) -> Decimal:
    """``amount`` rounded half up to ``quantum``."""
    return Decimal(repr(round(amount, 12))).quantize(quantum, rounding=ROUND_HALF_UP)


def usd_amount(amount: float) -> str:
    """The number :func:`format_usd` shows, without the currency: '1,234.57', '0.00019', and
    '0.00000016', never Decimal's '1.6E-7'."""
    return f"{in_quantum(amount, usd_quantum(amount)):,f}"


def format_usd(amount: float) -> str:
    """'USD 1,234.57', 'USD 0.54', 'USD 0.015', 'USD 0.00020' (see :func:`usd_quantum`).

    >>> format_usd(1234.567), format_usd(0.54321), format_usd(0.015), format_usd(0.000195), format_usd(0)
    ('USD 1,234.57', 'USD 0.54', 'USD 0.015', 'USD 0.00020', 'USD 0.00')
    """
    return f"USD {usd_amount(amount)}"


@dataclass(frozen=True)
class Preemption:
    """A spot worker taken back while its pool was live."""

    worker_name: str
    started_at: float
    stopped_at: float
    hours: float
    usd: float


@dataclass(frozen=True)
class CostBreakdown:
    """The cost of one pool, or of one job on it, over ``[start, end]``; every amount in USD."""

    pool_id: int
    pool_name: str
    job_id: str | None
    gpu_type: str
    status: str
    start: float
    end: float
    live: bool
    worker_hours: dict[str, float]  # by pricing: spot, reserved, on_demand
    compute_usd_by_pricing: dict[str, float]
    usd_per_hour_now: float  # 0 unless the pool is live and its workers run
    storage_gb: float
    storage_usd: float
    network_gb: float
    network_usd: float
    idle_usd: float  # compute spent while the GPUs were not busy, of the sampled time
    sampled_usd: float  # compute cost of the time covered by utilization samples (idle + busy)
    mean_utilization: float | None  # over the sampled time, weighted by cost
    budget_usd: float | None
    preemptions: tuple[Preemption, ...] = ()
    prices: dict[str, Any] = field(default_factory=dict)
    # hours while workers ran that no utilization sample covers; None: not computed (include_idle=False)
    unsampled_hours: float | None = None
    # a slurm pool's batch jobs in the period, for the site's own accounting (sacct -j <ids>)
    slurm_job_ids: tuple[str, ...] = ()

    @property
    def compute_usd(self) -> float:
        return sum(self.compute_usd_by_pricing.values())

    @property
    def gpu_hours(self) -> float:
        return sum(self.worker_hours.values())

    @property
    def total_usd(self) -> float:
        return self.compute_usd + self.storage_usd + self.network_usd

    @property
    def busy_usd(self) -> float:
        """Compute spent while the GPUs were busy, of the sampled time."""
        return max(0.0, self.sampled_usd - self.idle_usd)

    @property
    def unsampled_usd(self) -> float | None:
        """Compute of the time no utilization sample covers (None: not computed); with
        :attr:`idle_usd` and :attr:`busy_usd` it makes up :attr:`compute_usd`."""
        if self.unsampled_hours is None:
            return None
        return max(0.0, self.compute_usd - self.sampled_usd)

    @property
    def hours(self) -> float:
        return max(0.0, self.end - self.start) / 3600.0

    @property
    def budget_fraction(self) -> float | None:
        """Share of the budget spent (1.0 = all of it), or None without a budget."""
        if not self.budget_usd:
            return None
        return self.total_usd / self.budget_usd

    def projected_usd(self, hours_ahead: float) -> float:
        """Total after ``hours_ahead`` more hours at the present rate."""
        return self.total_usd + self.usd_per_hour_now * hours_ahead

    def hours_to_budget(self) -> float | None:
        """Hours until the budget is spent at the present rate; None without a budget or a rate."""
        if not self.budget_usd or self.usd_per_hour_now <= 0:
            return None
        return max(0.0, (self.budget_usd - self.total_usd) / self.usd_per_hour_now)

    def idle_sentence(self) -> str:
        """Compute cost and how it splits, in parts that add up to it (rounded to the step the
        total is shown in: the cent, or finer below 1 USD, see :func:`usd_quantum`):

        'compute USD 24.67: idle 16.02, busy 0.05, unsampled 8.60 (2.1 h without utilization samples)'.
        """
        quantum = usd_quantum(self.compute_usd)
        compute = in_quantum(self.compute_usd, quantum)
        whole = f"compute {format_usd(self.compute_usd)}"
        if self.unsampled_hours is None:
            return f"{whole} (idle share not computed)"
        if self.sampled_usd <= 0:
            if self.unsampled_hours * 3600.0 < 0.5:
                return whole
            return f"{whole}: idle share unknown ({_duration(self.unsampled_hours)} without utilization samples)"
        sampled = min(in_quantum(self.sampled_usd, quantum), compute)
        idle = min(in_quantum(self.idle_usd, quantum), sampled)
        parts = [f"idle {idle:,f}", f"busy {sampled - idle:,f}"]
        if compute - sampled > 0:
            parts.append(
                f"unsampled {compute - sampled:,f} ({_duration(self.unsampled_hours)} without utilization samples)"
            )
        return f"{whole}: {', '.join(parts)}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with the derived totals (for the side panel and the report)."""
        data = asdict(self)
        data.update(
            compute_usd=self.compute_usd,
            gpu_hours=self.gpu_hours,
            total_usd=self.total_usd,
            hours=self.hours,
            budget_fraction=self.budget_fraction,
            busy_usd=self.busy_usd,
            unsampled_usd=self.unsampled_usd,
            idle_sentence=self.idle_sentence(),
        )
        return data


# -- public queries ---------------------------------------------------------------------------------
def pool_cost(
    registry: Registry,
    pool_id: int,
    now: float | None = None,
    since: float | None = None,
    until: float | None = None,
    lost_after_seconds: float | None = None,
    include_idle: bool = True,
) -> CostBreakdown:
    """What pool ``pool_id`` has cost between ``since`` and ``until`` (default: its whole life, up to now).

    ``include_idle=False`` skips the idle-spend scan over utilization samples (``idle_usd``,
    ``sampled_usd``, ``mean_utilization`` and ``unsampled_hours`` are then 0/None): what a ticking
    meter or a budget check needs, at the cost of two aggregate queries.
    """
    record = registry.pool_by_id(pool_id)
    now = registry.clock() if now is None else now
    open_end, accruing = _open_intervals_end(record, now, lost_after_seconds)
    start = record.created_at if since is None else max(since, record.created_at)
    end = max(start, open_end if until is None else min(until, open_end))
    return _breakdown(registry, record, None, start, end, open_end, accruing and end == open_end, include_idle)


def job_cost(
    registry: Registry, job_id: str, now: float | None = None, lost_after_seconds: float | None = None
) -> CostBreakdown:
    """What job ``job_id`` has cost: every worker of its pool while the job ran (the job had the pool)."""
    job = registry.job(job_id)
    record = registry.pool_by_id(job.pool_id)
    now = registry.clock() if now is None else now
    open_end, accruing = _open_intervals_end(record, now, lost_after_seconds)
    end = max(job.started_at, min(job.ended_at, open_end) if job.ended_at is not None else open_end)
    if job.status is JobStatus.QUEUED:  # its cost starts when it runs
        end = job.started_at
    return _breakdown(registry, record, job, job.started_at, end, open_end, accruing and job.ended_at is None, True)


def pool_costs(
    registry: Registry,
    pool_ids: list[int] | None = None,
    since: float | None = None,
    now: float | None = None,
) -> list[CostBreakdown]:
    """One breakdown per pool (default: every pool in the registry) that still ran after ``since``."""
    records = registry.list_pools() if pool_ids is None else [registry.pool_by_id(i) for i in pool_ids]
    now = registry.clock() if now is None else now
    return [
        pool_cost(registry, r.id, now=now, since=since)
        for r in records
        if since is None or r.ended_at is None or r.ended_at >= since
    ]


def job_costs(
    registry: Registry, pool_id: int, since: float | None = None, now: float | None = None
) -> list[CostBreakdown]:
    """One breakdown per job of pool ``pool_id`` that still ran after ``since``, oldest first."""
    jobs = sorted(registry.list_jobs(pool_id=pool_id, limit=1_000_000), key=lambda j: j.started_at)
    return [
        job_cost(registry, j.id, now=now) for j in jobs if since is None or j.ended_at is None or j.ended_at >= since
    ]


def idle_since(
    registry: Registry, pool_id: int, now: float, threshold: float, window_seconds: float, stale_after: float
) -> float | None:
    """Since when pool ``pool_id`` has been idle (no job pending or running, every utilization sample
    under ``threshold``), looking back ``window_seconds``; None when it is busy, or when no sample
    newer than ``stale_after`` seconds says how it is."""
    record = registry.pool_by_id(pool_id)
    jobs = registry.list_jobs(pool_id=pool_id)
    if any(not j.status.is_final for j in jobs):
        return None
    samples = registry.utilization(pool_id, since=now - window_seconds - stale_after, until=now)
    if not samples or now - samples[-1].at > stale_after:
        return None
    busy = [s.at for s in samples if s.mean_util >= threshold]
    idle_from = busy[-1] if busy else samples[0].at
    job_ends = [j.ended_at for j in jobs if j.ended_at is not None]
    return max([idle_from, record.ready_at or record.created_at, *job_ends])


# -- accrual ----------------------------------------------------------------------------------------
def _open_intervals_end(record: PoolRecord, now: float, lost_after_seconds: float | None) -> tuple[float, bool]:
    """Where the pool's still-open intervals stop accruing, and whether they accrue now."""
    if not record.status.is_live:
        return (record.ended_at if record.ended_at is not None else record.heartbeat_at), False
    if lost_after_seconds is None:
        from ..config import get_config

        lost_after_seconds = get_config().lost_after_seconds
    if now - record.heartbeat_at > lost_after_seconds:  # owner silent: mark_lost_pools ends it here
        return record.heartbeat_at, False
    return now, True


def _clipped(interval: WorkerInterval, start: float, end: float, open_end: float) -> tuple[float, float]:
    stopped = interval.stopped_at if interval.stopped_at is not None else open_end
    return max(interval.started_at, start), min(stopped, end)


class _RateCurve:
    """USD per hour of a pool as a step function of time: breakpoints, the rate from each one on,
    and the integral (USD-per-hour x seconds) up to each one; and the seconds during which at least
    one worker ran, up to each one."""

    def __init__(self, pieces: list[tuple[float, float, float]]) -> None:
        deltas: dict[float, float] = defaultdict(float)
        joins: dict[float, int] = defaultdict(int)  # workers counted apart: a sum of prices need not return to 0.0
        for begin, finish, usd_per_hour in pieces:
            if finish > begin:
                deltas[begin] += usd_per_hour
                deltas[finish] -= usd_per_hour
                joins[begin] += 1
                joins[finish] -= 1
        self.times = sorted(deltas)
        self.rates: list[float] = []
        self.area = [0.0]  # USD-per-hour x seconds from the first breakpoint to each one
        self.running: list[bool] = []  # whether a worker runs from each breakpoint on
        self.active = [0.0]  # seconds with a worker running from the first breakpoint to each one
        rate, workers = 0.0, 0
        for i, t in enumerate(self.times):
            rate += deltas[t]
            workers += joins[t]
            self.rates.append(rate)
            self.running.append(workers > 0)
            if i + 1 < len(self.times):
                self.area.append(self.area[-1] + rate * (self.times[i + 1] - t))
                self.active.append(self.active[-1] + (self.times[i + 1] - t if workers > 0 else 0.0))

    def active_seconds(self, begin: float, end: float) -> float:
        """Seconds in ``[begin, end]`` during which at least one worker ran."""
        return max(0.0, self._active_at(end) - self._active_at(begin)) if end > begin else 0.0

    def _active_at(self, x: float) -> float:
        j = bisect.bisect_right(self.times, x) - 1
        if j < 0:
            return 0.0
        return self.active[j] + (x - self.times[j] if self.running[j] else 0.0)


def _breakdown(
    registry: Registry,
    record: PoolRecord,
    job: JobRecord | None,
    start: float,
    end: float,
    open_end: float,
    accruing: bool,
    include_idle: bool,
) -> CostBreakdown:
    prices = record.prices
    seconds = registry.worker_seconds(record.id, start, end, open_end)
    worker_hours = {p: seconds[p] / 3600.0 for p in PRICINGS if p in seconds}
    intervals = registry.worker_intervals(record.id)
    rate_now = sum(_price(prices, i.pricing) for i in intervals if i.stopped_at is None) if accruing else 0.0
    idle = sampled = busy = 0.0
    unsampled_hours: float | None = None
    if include_idle:
        curve = _RateCurve([(*_clipped(i, start, end, open_end), _price(prices, i.pricing)) for i in intervals])
        idle, sampled, busy, unsampled_seconds = _idle_spend(registry, record.id, curve, start, end)
        unsampled_hours = unsampled_seconds / 3600.0
    net_bytes = registry.network_bytes(record.id, start, end)
    storage_gb, network_gb = _volumes(registry, record.id, job.id if job else None, net_bytes, start, end)
    storage_months = (end - start) / 3600.0 / HOURS_PER_MONTH
    budget = record.spec.get("budget")
    return CostBreakdown(
        pool_id=record.id,
        pool_name=record.name,
        job_id=job.id if job else None,
        gpu_type=record.gpu_type,
        status=job.status.value if job else record.status.value,
        start=start,
        end=end,
        live=accruing,
        worker_hours=worker_hours,
        compute_usd_by_pricing={p: hours * _price(prices, p) for p, hours in worker_hours.items()},
        usd_per_hour_now=rate_now,
        storage_gb=storage_gb,
        storage_usd=storage_gb * float(prices.get("storage_usd_per_gb_month", 0.0)) * storage_months,
        network_gb=network_gb,
        network_usd=network_gb * float(prices.get("network_usd_per_gb", 0.0)),
        idle_usd=idle,
        sampled_usd=sampled,
        mean_utilization=busy / sampled if sampled > 0 else None,
        budget_usd=float(budget) if budget else None,  # 0 or None: no budget
        preemptions=tuple(
            _preemption(i, start, end, open_end, prices)
            for i in intervals
            if i.stop_reason == "preempted" and i.stopped_at is not None and start <= i.stopped_at <= end
        ),
        prices=dict(prices),
        unsampled_hours=unsampled_hours,
        slurm_job_ids=_slurm_job_ids(registry, record, job, start, end),
    )


def _slurm_job_ids(
    registry: Registry, record: PoolRecord, job: JobRecord | None, start: float, end: float
) -> tuple[str, ...]:
    if record.spec.get("backend") != "slurm":
        return ()
    from ..pools.slurm import slurm_job_ids

    window = {"start": start, "end": end} if job is not None else {}  # a job: those that ran while it did
    return tuple(slurm_job_ids(registry, record.id, **window))


def _duration(hours: float) -> str:
    """'0.3 s', '45 s', '12 min', '2.1 h' (a young pool's under 10 s keeps a tenth: never '0 s' for some)."""
    seconds = hours * 3600.0
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{hours:,.1f} h"


def _price(prices: dict[str, Any], pricing: str) -> float:
    try:
        return float(prices[pricing])
    except KeyError:
        raise NotFoundError(
            f"the prices stored with this pool have no '{pricing}' rate (it has {sorted(prices)})"
        ) from None


def _preemption(
    interval: WorkerInterval, start: float, end: float, open_end: float, prices: dict[str, Any]
) -> Preemption:
    begin, finish = _clipped(interval, start, end, open_end)
    hours = max(0.0, finish - begin) / 3600.0
    stopped = interval.stopped_at if interval.stopped_at is not None else finish
    return Preemption(
        interval.worker_name, interval.started_at, stopped, hours, hours * _price(prices, interval.pricing)
    )


def _idle_spend(
    registry: Registry, pool_id: int, curve: _RateCurve, start: float, end: float
) -> tuple[float, float, float, float]:
    """(idle USD, sampled USD, utilization-weighted USD, unsampled seconds) over ``[start, end]``.

    Each sample reports the utilization since the previous one, so it covers ``(previous.at, at]``;
    a pool's first sample only sets the baseline. Samples and the rate's breakpoints are both in
    time order, so one merged walk prices every span. What no sample covers is the time before the
    first one and after the last one; of it, the seconds while a worker ran are unsampled.
    """
    series = registry.utilization_series(pool_id, start, end)
    times, rates, area = curve.times, curve.rates, curve.area
    j = -1  # the last breakpoint at or before the time being priced
    idle = sampled = busy = 0.0
    previous_area: float | None = None
    first = last = None
    for at, mean_util in series:
        x = min(max(at, start), end)
        while j + 1 < len(times) and times[j + 1] <= x:
            j += 1
        area_here = area[j] + rates[j] * (x - times[j]) if j >= 0 else 0.0
        if previous_area is not None:
            usd = (area_here - previous_area) / 3600.0
            utilization = min(1.0, max(0.0, mean_util))
            sampled += usd
            idle += usd * (1.0 - utilization)
            busy += usd * utilization
        previous_area = area_here
        first = x if first is None else first
        last = x
    if first is None or last is None:
        return idle, sampled, busy, curve.active_seconds(start, end)
    return idle, sampled, busy, curve.active_seconds(start, first) + curve.active_seconds(last, end)


def _volumes(
    registry: Registry, pool_id: int, job_id: str | None, net_bytes: int, start: float, end: float
) -> tuple[float, float]:
    """(storage GB, network GB) of a pool (``job_id`` None) or of one of its jobs.

    Storage: the latest amount stated or recorded for the job, else for the pool; a pool without its
    own amount holds what its jobs recorded. Network: the latest stated total wins; otherwise the
    recorded amounts plus what the pool's hosts were measured to send, inside the window.
    """
    rows = registry.data_volumes(pool_id)
    own = [r for r in rows if r.job_id == job_id]
    own_storage = [r.storage_gb for r in own if r.storage_gb is not None]
    if own_storage:
        storage_gb = float(own_storage[-1] or 0.0)
    elif job_id is not None:
        pool_storage = [r.storage_gb for r in rows if r.job_id is None and r.storage_gb is not None]
        storage_gb = float(pool_storage[-1] or 0.0) if pool_storage else 0.0
    else:
        latest_per_job: dict[str, float] = {}
        for r in rows:
            if r.job_id is not None and r.storage_gb is not None:
                latest_per_job[r.job_id] = float(r.storage_gb)
        storage_gb = sum(latest_per_job.values())
    stated = [r.network_gb for r in own if r.source == "stated" and r.network_gb is not None]
    if stated:
        return storage_gb, float(stated[-1] or 0.0)
    scope = own if job_id is not None else rows
    recorded = sum(float(r.network_gb or 0.0) for r in scope if r.source == "recorded" and start <= r.at <= end)
    return storage_gb, recorded + net_bytes / 1e9


def record_data_volume(
    registry: Registry,
    pool_id: int,
    storage_gb: float | None = None,
    network_gb: float | None = None,
    job_id: str | None = None,
    stated: bool = False,
) -> None:
    """Record storage held (GB) and/or network transferred (GB) by a pool or one of its jobs.

    ``stated=True`` is a total the user gives (``%gpugeek_cost dev --storage-gb 500 --network-gb 40``);
    otherwise an amount the pool or a job measured (network amounts add up).
    """
    from ..errors import SpecError

    for name, value in (("storage_gb", storage_gb), ("network_gb", network_gb)):
        if value is not None and not (isinstance(value, int | float) and value >= 0):
            raise SpecError(field=name, value=value, rule="a number of GB >= 0", example=500)
    registry.add_data_volume(pool_id, storage_gb, network_gb, source="stated" if stated else "recorded", job_id=job_id)
