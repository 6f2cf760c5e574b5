"""Cost: prices in force, exact accrual from the registry, reports, owned vs cloud, budget and idle watchers.

Every number comes from durable registry rows, so the notebook, the side panel and a report agree:

>>> from gpugeek_jupyter.cost import pool_cost
>>> pool_cost(registry, pool_id).total_usd          # doctest: +SKIP
"""

from __future__ import annotations

from ..pricing import hourly_rate, price_of, prices_in_force
from .guards import BudgetGuard, CostWatch, IdleGuard, install_cost_hooks
from .ledger import (
    CostBreakdown,
    Preemption,
    cents,
    format_usd,
    idle_since,
    job_cost,
    job_costs,
    pool_cost,
    pool_costs,
    record_data_volume,
)
from .tco import OwnedVsCloud, compare_owned, cost_report, report_rows, to_dataframe, write_csv

__all__ = [
    "BudgetGuard",
    "CostBreakdown",
    "CostWatch",
    "IdleGuard",
    "OwnedVsCloud",
    "Preemption",
    "cents",
    "compare_owned",
    "cost_report",
    "format_usd",
    "hourly_rate",
    "idle_since",
    "install_cost_hooks",
    "job_cost",
    "job_costs",
    "pool_cost",
    "pool_costs",
    "price_of",
    "prices_in_force",
    "record_data_volume",
    "report_rows",
    "to_dataframe",
    "write_csv",
]
