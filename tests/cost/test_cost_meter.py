"""The cost meter widget reads the ledger: rate, spend, projection, and a budget bar that turns amber."""

from __future__ import annotations

import time

import pytest

from gpugeek_jupyter.store import PoolStatus
from gpugeek_jupyter.widgets.cost_meter import CostMeter

from .conftest import T0, add_ready_pool

HOUR = 3600.0
RESERVED = 6.97


@pytest.fixture
def budget_pool(clocked_registry):
    pool = add_ready_pool(clocked_registry, gpu_type="H100-80GB", count=1, budget=20, base_pricing="reserved")
    clocked_registry.open_worker_interval(pool, "0", "reserved", started_at=T0)
    return pool


def _advance(registry, clock, hours: float, pool: int) -> None:
    clock.at(hours * HOUR)
    registry.heartbeat([pool])


def test_meter_shows_rate_spend_and_projection(clocked_registry, clock, budget_pool):
    _advance(clocked_registry, clock, 1, budget_pool)
    meter = CostMeter(budget_pool, registry=clocked_registry, projection_hours=24)
    assert meter.usd_per_hour == pytest.approx(RESERVED)
    assert meter.usd_so_far == pytest.approx(RESERVED)
    assert meter.projected_usd == pytest.approx(25 * RESERVED)
    assert "USD per hour now 6.97" in meter.text and "USD so far 6.97" in meter.text
    assert "projected, 24 h ahead 174.25" in meter.text


@pytest.mark.parametrize(
    ("hours", "level", "bar_style"),
    [(1.0, "ok", "success"), (2.5, "warning", "warning"), (3.0, "exceeded", "danger")],
)
def test_budget_bar_turns_amber_at_80_percent_and_red_at_100(
    clocked_registry, clock, budget_pool, hours, level, bar_style
):
    _advance(clocked_registry, clock, hours, budget_pool)
    meter = CostMeter(budget_pool, registry=clocked_registry)
    assert meter.level == level
    assert meter._bar.bar_style == bar_style
    assert meter._bar.value == pytest.approx(min(1.0, hours * RESERVED / 20))
    assert f"data-level='{level}'" in meter._text.value


def test_meter_without_a_budget_hides_the_bar(clocked_registry, clock):
    pool = add_ready_pool(clocked_registry, gpu_type="T4", count=1)
    _advance(clocked_registry, clock, 1, pool)
    meter = CostMeter(pool, registry=clocked_registry)
    assert meter.level == "none" and meter.budget_fraction is None
    assert meter._bar.layout.display == "none"


def test_ticking_meter_follows_the_ledger_and_stops_when_the_pool_ends(clocked_registry, clock, budget_pool):
    meter = CostMeter(budget_pool, registry=clocked_registry, tick_seconds=0.05)
    assert meter.ticking
    _advance(clocked_registry, clock, 2, budget_pool)
    deadline = time.monotonic() + 10
    while meter.usd_so_far != pytest.approx(2 * RESERVED) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert meter.usd_so_far == pytest.approx(2 * RESERVED)
    clocked_registry.set_pool_status(budget_pool, PoolStatus.STOPPED, reason="done")
    while meter.ticking and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not meter.ticking
    assert meter.usd_per_hour == 0 and meter.usd_so_far == pytest.approx(2 * RESERVED)
    meter.close()


def test_meter_accepts_a_live_pool_and_uses_its_registry(cpu_pool):
    meter = CostMeter(cpu_pool)
    assert meter.registry is cpu_pool._manager.registry
    assert meter.usd_per_hour == pytest.approx(cpu_pool.usd_per_hour)


def test_the_meter_shows_a_young_pools_cost_with_the_one_rule_for_money(clocked_registry, clock) -> None:
    from gpugeek_jupyter.cost.ledger import format_usd

    pool = add_ready_pool(clocked_registry, gpu_type="cpu", count=1, price=0.2)  # USD 0.20 an hour
    clocked_registry.open_worker_interval(pool, "0", "on_demand", started_at=T0)
    clock.at(3.5)
    clocked_registry.heartbeat([pool])
    meter = CostMeter(pool, registry=clocked_registry)
    assert "USD per hour now 0.20" in meter.text and "USD so far 0.00019" in meter.text  # not 0.00
    assert format_usd(0.2 * 3.5 / 3600) == "USD 0.00019"
