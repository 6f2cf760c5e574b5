"""The ledger: exact accrual from worker intervals, with a clock the test controls."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpugeek_jupyter.cost.ledger import (
    cents,
    format_usd,
    idle_since,
    job_cost,
    job_costs,
    pool_cost,
    pool_costs,
    record_data_volume,
)
from gpugeek_jupyter.errors import SpecError
from gpugeek_jupyter.store import JobStatus, PoolStatus, Registry

from .conftest import T0, Clock, add_ready_pool

HOUR = 3600.0
SPOT, RESERVED = 3.72, 6.97  # H100-80GB in the catalog


def _seventy_thirty_pool(registry: Registry) -> int:
    # the seed's 70/30 mix: round(0.7 x 4) = 3 spot workers, 1 reserved
    return add_ready_pool(registry, gpu_type="H100-80GB", count=4, spot_fraction=0.7, base_pricing="reserved")


def test_accrual_is_exact_to_the_cent_for_spot_and_reserved_workers_joining_and_leaving(clocked_registry, clock):
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    w0 = registry.open_worker_interval(pool, "0", "spot", started_at=T0)
    registry.open_worker_interval(pool, "1", "spot", started_at=T0)
    registry.open_worker_interval(pool, "3", "reserved", started_at=T0)
    w2 = registry.open_worker_interval(pool, "2", "spot", started_at=T0 + 0.5 * HOUR)  # joins late
    registry.close_worker_interval(w0, "preempted", stopped_at=T0 + 1.0 * HOUR)  # leaves after 1 h
    registry.open_worker_interval(pool, "0", "spot", started_at=T0 + 1.25 * HOUR)  # its replacement
    registry.close_worker_interval(w2, "worker left", stopped_at=T0 + 1.5 * HOUR)
    clock.at(2 * HOUR)
    registry.heartbeat([pool])

    cost = pool_cost(registry, pool)

    spot_hours = 1.0 + 2.0 + 1.0 + 0.75  # w0, w1, w2, w0's replacement
    expected = spot_hours * SPOT + 2.0 * RESERVED  # 17.67 + 13.94
    assert cost.worker_hours == pytest.approx({"spot": spot_hours, "reserved": 2.0}, abs=1e-12)
    assert cents(cost.compute_usd) == Decimal("31.61")
    assert cost.compute_usd == pytest.approx(expected, abs=1e-9)
    assert cost.usd_per_hour_now == pytest.approx(2 * SPOT + RESERVED)  # w1, w0's replacement, w3 run now
    assert cost.live


def test_open_intervals_accrue_up_to_now_while_the_owner_heart_beats(clocked_registry, clock):
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    registry.open_worker_interval(pool, "3", "reserved", started_at=T0)
    clock.at(HOUR)
    registry.heartbeat([pool])
    first = pool_cost(registry, pool).compute_usd
    clock.at(1.5 * HOUR)
    registry.heartbeat([pool])
    assert first == pytest.approx(RESERVED)
    assert pool_cost(registry, pool).compute_usd == pytest.approx(1.5 * RESERVED)


def test_a_silent_owner_stops_accrual_at_its_last_heartbeat_as_marking_it_lost_will(clocked_registry, clock):
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    registry.open_worker_interval(pool, "0", "spot", started_at=T0)
    clock.at(HOUR)
    registry.heartbeat([pool])
    clock.at(HOUR + 60)  # 60 s of silence, beyond lost_after_seconds=15
    before_marking = pool_cost(registry, pool, lost_after_seconds=15)
    assert not before_marking.live and before_marking.usd_per_hour_now == 0
    registry.mark_lost_pools(15)
    after_marking = pool_cost(registry, pool)
    assert registry.pool_by_id(pool).status is PoolStatus.LOST
    assert before_marking.compute_usd == pytest.approx(SPOT) == pytest.approx(after_marking.compute_usd)


def test_stopped_pool_cost_never_changes_afterwards(clocked_registry, clock):
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    registry.open_worker_interval(pool, "3", "reserved", started_at=T0)
    clock.at(HOUR)
    registry.set_pool_status(pool, PoolStatus.STOPPED, reason="done")
    clock.at(100 * HOUR)
    cost = pool_cost(registry, pool)
    assert cost.compute_usd == pytest.approx(RESERVED)
    assert cost.usd_per_hour_now == 0 and not cost.live


def test_prices_stored_at_start_are_used_after_the_price_file_changes(clocked_registry, clock, tmp_path, monkeypatch):
    from gpugeek_jupyter import config

    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    registry.open_worker_interval(pool, "0", "spot", started_at=T0)
    prices = tmp_path / "prices.toml"
    prices.write_text("[gpus.H100-80GB]\nspot = 99.0\n")
    monkeypatch.setenv("GPUGEEK_PRICE_FILE", str(prices))
    config.set_config(None)
    later = add_ready_pool(registry, name="later", gpu_type="H100-80GB", count=1, spot_fraction=1)
    registry.open_worker_interval(later, "0", "spot", started_at=T0)
    clock.at(HOUR)
    registry.heartbeat([pool, later])
    assert pool_cost(registry, pool).compute_usd == pytest.approx(SPOT)
    assert pool_cost(registry, later).compute_usd == pytest.approx(99.0)


def test_price_override_prices_every_worker_alike(clocked_registry, clock):
    registry = clocked_registry
    pool = add_ready_pool(registry, gpu_type="H100-80GB", count=2, spot_fraction=0.5, price=2.10)
    registry.open_worker_interval(pool, "0", "spot", started_at=T0)
    registry.open_worker_interval(pool, "1", "on_demand", started_at=T0)
    clock.at(HOUR)
    registry.heartbeat([pool])
    assert pool_cost(registry, pool).compute_usd == pytest.approx(4.20)


def test_preempted_spot_workers_are_listed_with_their_time_and_cost(clocked_registry, clock):
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    w = registry.open_worker_interval(pool, "1", "spot", started_at=T0)
    registry.close_worker_interval(w, "preempted", stopped_at=T0 + 0.5 * HOUR)
    clock.at(HOUR)
    registry.heartbeat([pool])
    (preemption,) = pool_cost(registry, pool).preemptions
    assert preemption.worker_name == "1"
    assert preemption.hours == pytest.approx(0.5)
    assert preemption.usd == pytest.approx(0.5 * SPOT)


def test_job_cost_is_every_worker_of_its_pool_while_it_ran(clocked_registry, clock):
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    registry.open_worker_interval(pool, "0", "spot", started_at=T0)
    registry.open_worker_interval(pool, "3", "reserved", started_at=T0)
    clock.at(0.25 * HOUR)
    registry.add_job("job-a", pool, "h100", "torchrun", "sha", ranks=2)
    clock.at(0.75 * HOUR)
    registry.set_job_status("job-a", JobStatus.SUCCEEDED)
    clock.at(HOUR)
    registry.add_job("job-b", pool, "h100", "torchrun", "sha", ranks=2)
    clock.at(1.5 * HOUR)
    registry.heartbeat([pool])

    a, b = job_costs(registry, pool)
    assert (a.job_id, b.job_id) == ("job-a", "job-b")
    assert a.compute_usd == pytest.approx(0.5 * (SPOT + RESERVED))
    assert b.compute_usd == pytest.approx(0.5 * (SPOT + RESERVED))
    assert b.live and not a.live
    assert job_cost(registry, "job-a").total_usd == pytest.approx(a.total_usd)


def test_since_and_until_clip_the_window(clocked_registry, clock):
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    registry.open_worker_interval(pool, "3", "reserved", started_at=T0)
    clock.at(10 * HOUR)
    registry.heartbeat([pool])
    cost = pool_cost(registry, pool, since=T0 + 2 * HOUR, until=T0 + 5 * HOUR)
    assert cost.compute_usd == pytest.approx(3 * RESERVED)
    assert [c.pool_id for c in pool_costs(registry, since=T0 + 20 * HOUR)] == [pool]  # live pools always count


def test_idle_spend_is_price_times_one_minus_utilization_over_each_sample(clocked_registry, clock):
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    registry.open_worker_interval(pool, "3", "reserved", started_at=T0)
    registry.add_utilization(pool, 0.0, 1, at=T0)  # baseline
    registry.add_utilization(pool, 1.0, 1, at=T0 + 1200)
    registry.add_utilization(pool, 0.0, 1, at=T0 + 2400)
    registry.add_utilization(pool, 0.5, 1, at=T0 + 3600)
    clock.at(HOUR)
    registry.heartbeat([pool])
    cost = pool_cost(registry, pool)
    third = RESERVED / 3
    assert cost.idle_usd == pytest.approx(third * 0 + third * 1 + third * 0.5)
    assert cost.sampled_usd == pytest.approx(RESERVED)
    assert cost.mean_utilization == pytest.approx(0.5)
    assert cost.unsampled_hours == pytest.approx(0.0) and cost.unsampled_usd == pytest.approx(0.0)
    assert cost.idle_sentence() == "compute USD 6.97: idle 3.49, busy 3.48"


def test_idle_spend_is_unknown_without_samples(clocked_registry, clock):
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    registry.open_worker_interval(pool, "3", "reserved", started_at=T0)
    clock.at(HOUR)
    registry.heartbeat([pool])
    cost = pool_cost(registry, pool)
    assert cost.mean_utilization is None
    assert cost.unsampled_usd == pytest.approx(RESERVED) and cost.unsampled_hours == pytest.approx(1.0)
    assert cost.idle_sentence() == "compute USD 6.97: idle share unknown (1.0 h without utilization samples)"


def test_a_young_pools_seconds_without_samples_keep_a_tenth(clocked_registry, clock):
    # a pool of a few seconds read "unsampled 0.0002 (0 s without utilization samples)"
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    registry.open_worker_interval(pool, "3", "reserved", started_at=T0)
    clock.at(2.4)
    registry.heartbeat([pool])
    assert (
        pool_cost(registry, pool).idle_sentence().endswith(": idle share unknown (2.4 s without utilization samples)")
    )


def test_money_below_a_millionth_is_shown_in_decimals():
    assert format_usd(1.6e-7) == "USD 0.00000016"  # Decimal's own text was "1.6E-7"
    assert format_usd(-2.5e-9) == "USD -0.0000000025"


def test_time_without_samples_is_counted_as_unsampled_and_the_parts_add_up_to_the_compute_cost(clocked_registry, clock):
    # %gpugeek_cost once said "USD 16.02 of USD 16.07 went to idle GPUs" of a pool that cost USD 24.67:
    # the split covered only the sampled time, and said so nowhere
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    registry.open_worker_interval(pool, "3", "reserved", started_at=T0)
    registry.add_utilization(pool, 0.0, 1, at=T0 + 0.9 * HOUR)  # telemetry starts late: a baseline
    registry.add_utilization(pool, 0.0, 1, at=T0 + 1.9 * HOUR)  # an idle hour
    registry.add_utilization(pool, 0.5, 1, at=T0 + 2.9 * HOUR)  # a half-busy hour; then no more samples
    clock.at(3 * HOUR)
    registry.heartbeat([pool])

    cost = pool_cost(registry, pool)

    assert cost.compute_usd == pytest.approx(3 * RESERVED)
    assert cost.idle_usd == pytest.approx(1.5 * RESERVED) and cost.busy_usd == pytest.approx(0.5 * RESERVED)
    assert cost.unsampled_usd == pytest.approx(RESERVED) and cost.unsampled_hours == pytest.approx(1.0)
    assert cost.idle_usd + cost.busy_usd + cost.unsampled_usd == pytest.approx(cost.compute_usd)
    assert cost.idle_sentence() == (
        "compute USD 20.91: idle 10.46, busy 3.48, unsampled 6.97 (1.0 h without utilization samples)"
    )
    shown = cost.to_dict()  # what the side panel and the report read
    assert (shown["idle_usd"], shown["busy_usd"], shown["unsampled_usd"]) == (
        cost.idle_usd,
        cost.busy_usd,
        cost.unsampled_usd,
    )


def test_time_without_workers_is_not_unsampled(clocked_registry, clock):
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    worker = registry.open_worker_interval(pool, "3", "reserved", started_at=T0)
    registry.add_utilization(pool, 0.0, 1, at=T0)
    registry.add_utilization(pool, 1.0, 1, at=T0 + HOUR)
    registry.close_worker_interval(worker, "worker left", stopped_at=T0 + HOUR)
    clock.at(2 * HOUR)  # the pool lives on an hour with no worker, and no sample
    registry.heartbeat([pool])
    cost = pool_cost(registry, pool)
    assert cost.unsampled_hours == pytest.approx(0.0)
    assert cost.idle_sentence() == "compute USD 6.97: idle 0.00, busy 6.97"


def test_a_breakdown_without_the_idle_scan_says_its_split_is_not_computed(clocked_registry, clock):
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    registry.open_worker_interval(pool, "3", "reserved", started_at=T0)
    clock.at(HOUR)
    registry.heartbeat([pool])
    cost = pool_cost(registry, pool, include_idle=False)
    assert cost.unsampled_usd is None
    assert cost.idle_sentence() == "compute USD 6.97 (idle share not computed)"


def test_storage_is_priced_per_gb_month_and_network_per_gb(clocked_registry, clock):
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    registry.add_utilization(pool, 0.0, 1, net_bytes=0, at=T0 + 1)
    registry.add_utilization(pool, 0.0, 1, net_bytes=2_000_000_000, at=T0 + 2)  # measured on the hosts
    record_data_volume(registry, pool, storage_gb=500)
    record_data_volume(registry, pool, network_gb=3.0)  # recorded by a job, adds up
    clock.at(73 * HOUR)  # a tenth of a 730-hour month
    registry.heartbeat([pool])
    cost = pool_cost(registry, pool)
    assert cost.storage_usd == pytest.approx(500 * 0.08 * 0.1)
    assert cost.network_gb == pytest.approx(5.0)
    assert cost.network_usd == pytest.approx(5.0 * 0.09)
    assert cost.total_usd == pytest.approx(cost.compute_usd + 4.0 + 0.45)


def test_a_stated_network_total_wins_over_recorded_amounts(clocked_registry, clock):
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    record_data_volume(registry, pool, network_gb=3.0)
    record_data_volume(registry, pool, network_gb=10.0, stated=True)
    clock.at(HOUR)
    registry.heartbeat([pool])
    assert pool_cost(registry, pool).network_gb == pytest.approx(10.0)


def test_a_job_holds_its_own_storage_or_else_its_pools(clocked_registry, clock):
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    registry.add_job("j1", pool, "h100", "torchrun", "sha", ranks=1)
    registry.add_job("j2", pool, "h100", "torchrun", "sha", ranks=1)
    record_data_volume(registry, pool, storage_gb=40, job_id="j1")
    assert job_cost(registry, "j1").storage_gb == 40
    assert pool_cost(registry, pool).storage_gb == 40  # the pool holds what its jobs recorded
    record_data_volume(registry, pool, storage_gb=100, stated=True)
    assert job_cost(registry, "j2").storage_gb == 100
    assert pool_cost(registry, pool).storage_gb == 100


def test_negative_volumes_are_refused_with_an_example(clocked_registry):
    pool = _seventy_thirty_pool(clocked_registry)
    with pytest.raises(SpecError, match=r"^storage_gb must be a number of GB >= 0, got -5 \(e.g. storage_gb=500\)$"):
        record_data_volume(clocked_registry, pool, storage_gb=-5)


def test_budget_fraction_projection_and_hours_left(clocked_registry, clock):
    registry = clocked_registry
    pool = add_ready_pool(registry, gpu_type="H100-80GB", count=1, budget=20, base_pricing="reserved")
    registry.open_worker_interval(pool, "0", "reserved", started_at=T0)
    clock.at(HOUR)
    registry.heartbeat([pool])
    cost = pool_cost(registry, pool)
    assert cost.budget_fraction == pytest.approx(RESERVED / 20)
    assert cost.projected_usd(2) == pytest.approx(3 * RESERVED)
    assert cost.hours_to_budget() == pytest.approx((20 - RESERVED) / RESERVED)
    assert cost.to_dict()["total_usd"] == pytest.approx(RESERVED)


def test_idle_since_is_the_last_busy_sample_and_none_while_a_job_runs(clocked_registry, clock):
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    for second, util in ((10, 0.0), (20, 0.9), (30, 0.01), (40, 0.02)):
        registry.add_utilization(pool, util, 1, at=T0 + second)
    assert idle_since(registry, pool, T0 + 41, 0.05, window_seconds=60, stale_after=5) == T0 + 20
    assert idle_since(registry, pool, T0 + 60, 0.05, window_seconds=60, stale_after=5) is None  # samples stale
    registry.add_job("j", pool, "h100", "torchrun", "sha", ranks=1)
    assert idle_since(registry, pool, T0 + 41, 0.05, window_seconds=60, stale_after=5) is None


_intervals = st.lists(
    st.tuples(st.floats(0, 10 * HOUR), st.floats(0, 10 * HOUR), st.sampled_from(["spot", "reserved"]), st.booleans()),
    min_size=0,
    max_size=8,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(intervals=_intervals, window=st.tuples(st.floats(0, 12 * HOUR), st.floats(0, 12 * HOUR)))
def test_ledger_equals_the_sum_of_clipped_intervals_times_prices(tmp_path_factory, intervals, window):
    clock = Clock()
    registry = Registry(tmp_path_factory.mktemp("h") / "r.sqlite", clock=clock)
    pool = _seventy_thirty_pool(registry)
    now = T0 + 11 * HOUR
    expected = 0.0
    since, until = T0 + min(window), T0 + max(window)
    for begin, length, pricing, still_open in intervals:
        start, stop = T0 + begin, T0 + min(begin + length, 11 * HOUR)
        interval = registry.open_worker_interval(pool, "w", pricing, started_at=start)
        if not still_open:
            registry.close_worker_interval(interval, "worker left", stopped_at=stop)
        end = now if still_open else stop
        overlap = max(0.0, min(end, until) - max(start, since))
        expected += overlap / HOUR * (SPOT if pricing == "spot" else RESERVED)
    clock.now = now
    registry.heartbeat([pool])
    cost = pool_cost(registry, pool, since=since, until=until)
    assert cost.compute_usd == pytest.approx(expected, abs=1e-9)
    registry.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    intervals=_intervals,
    samples=st.lists(st.tuples(st.floats(0, 11 * HOUR), st.floats(0, 1)), min_size=0, max_size=12),
    window=st.tuples(st.floats(0, 12 * HOUR), st.floats(0, 12 * HOUR)),
)
def test_idle_spend_equals_a_brute_force_sum_over_sample_spans(tmp_path_factory, intervals, samples, window):
    clock = Clock()
    registry = Registry(tmp_path_factory.mktemp("h") / "r.sqlite", clock=clock)
    pool = _seventy_thirty_pool(registry)
    now = T0 + 11 * HOUR
    since, until = T0 + min(window), T0 + max(window)
    pieces = []
    for begin, length, pricing, still_open in intervals:
        start, stop = T0 + begin, T0 + min(begin + length, 11 * HOUR)
        interval = registry.open_worker_interval(pool, "w", pricing, started_at=start)
        if not still_open:
            registry.close_worker_interval(interval, "worker left", stopped_at=stop)
        pieces.append((start, now if still_open else stop, SPOT if pricing == "spot" else RESERVED))
    ordered = sorted((T0 + at, util) for at, util in samples)
    for at, util in ordered:
        registry.add_utilization(pool, util, 1, at=at)
    clock.now = now
    registry.heartbeat([pool])

    def usd(a: float, b: float) -> float:
        return sum(max(0.0, min(b, e) - max(a, s)) * price for s, e, price in pieces) / HOUR

    expected_idle = expected_sampled = 0.0
    for (previous, _), (at, util) in zip(ordered, ordered[1:], strict=False):
        span = usd(max(previous, since), min(at, until))
        expected_sampled += span
        expected_idle += span * (1 - util)
    cost = pool_cost(registry, pool, since=since, until=until)
    assert cost.idle_usd == pytest.approx(expected_idle, abs=1e-9)
    assert cost.sampled_usd == pytest.approx(expected_sampled, abs=1e-9)
    assert cost.idle_usd + cost.busy_usd + cost.unsampled_usd == pytest.approx(cost.compute_usd, abs=1e-9)
    registry.close()


def test_a_cost_under_a_cent_is_shown_with_two_significant_digits_and_its_parts_still_add_up(clocked_registry, clock):
    registry = clocked_registry
    pool = _seventy_thirty_pool(registry)
    registry.open_worker_interval(pool, "3", "reserved", started_at=T0)  # USD 6.97 an hour
    registry.add_utilization(pool, 0.0, 1, at=T0)
    registry.add_utilization(pool, 0.25, 1, at=T0 + 0.1)  # a tenth of a second, 75 % idle
    clock.at(0.1)
    registry.heartbeat([pool])
    cost = pool_cost(registry, pool)
    assert cost.compute_usd == pytest.approx(RESERVED * 0.1 / HOUR)  # USD 0.000194
    assert format_usd(cost.compute_usd) == "USD 0.00019"  # not USD 0.00, as every young job read
    assert cost.idle_sentence() == "compute USD 0.00019: idle 0.00015, busy 0.00004"
    assert [format_usd(x) for x in (0.2, 0.015, 0.54321, 1234.567, 0.0)] == [
        "USD 0.20",
        "USD 0.015",
        "USD 0.54",
        "USD 1,234.57",
        "USD 0.00",
    ]
