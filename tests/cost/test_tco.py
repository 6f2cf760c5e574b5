"""The TCO report (table, DataFrame, bokeh chart, CSV) and the owned-vs-cloud comparison."""

from __future__ import annotations

import csv

import pytest

from gpugeek_jupyter.cost import tco
from gpugeek_jupyter.cost.ledger import HOURS_PER_MONTH, pool_cost, record_data_volume
from gpugeek_jupyter.errors import NotFoundError, SpecError

from .conftest import T0, add_ready_pool

HOUR = 3600.0


def test_owned_and_cloud_cost_the_same_at_the_break_even_utilization():
    result = tco.compare_owned("H100-80GB", hours_per_month=100)
    assert result.break_even_hours_per_month is not None
    even = tco.compare_owned("H100-80GB", hours_per_month=result.break_even_hours_per_month)
    assert even.owned_usd_per_month == pytest.approx(even.cloud_usd_per_month)
    assert even.monthly_difference == pytest.approx(0.0, abs=1e-9)


def test_owned_cost_follows_the_documented_formula():
    r = tco.compare_owned(
        "H100-80GB",
        hours_per_month=200,
        count=8,
        purchase_usd=30_000,
        power_watts=700,
        power_usd_per_kwh=0.12,
        pue=1.4,
        amortization_months=36,
        overhead_usd_per_month=100,
    )
    energy = 0.7 * 1.4 * 0.12
    assert r.owned_usd_per_month == pytest.approx(8 * (30_000 / 36 + 100 + energy * 200))
    assert r.cloud_usd_per_month == pytest.approx(8 * 11.06 * 200)
    assert r.break_even_hours_per_month == pytest.approx((30_000 / 36 + 100) / (11.06 - energy))
    assert r.utilization == pytest.approx(200 / HOURS_PER_MONTH)


def test_little_use_favours_the_cloud_and_heavy_use_favours_owning():
    light = tco.compare_owned("H100-80GB", hours_per_month=20)
    heavy = tco.compare_owned("H100-80GB", hours_per_month=600)
    assert light.cheaper == "cloud" and light.monthly_difference > 0
    assert heavy.cheaper == "owned" and heavy.monthly_difference < 0
    assert "the cloud saves" in light.summary() and "owning saves" in heavy.summary()


def test_a_cloud_price_below_the_energy_cost_never_breaks_even():
    r = tco.compare_owned("H100-80GB", hours_per_month=730, price=0.10)
    assert r.break_even_utilization is None
    assert "never breaks even" in r.summary()


def test_purchase_and_power_default_to_the_catalog():
    from gpugeek_jupyter.catalog import load_catalog

    gpu = load_catalog().gpu("A100-80GB")
    r = tco.compare_owned("a100-80gb", hours_per_month=100, pricing="reserved")
    assert (r.purchase_usd, r.power_watts, r.cloud_usd_per_gpu_hour) == (
        gpu.purchase_usd,
        gpu.power_watts,
        gpu.prices.reserved,
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"hours_per_month": 800},
            r"^hours_per_month must be a number from 0 to 730, got 800 \(e.g. hours_per_month=200\)$",
        ),
        ({"hours_per_month": 10, "pue": 0.5}, r"^pue must be a number from 1, got 0.5 \(e.g. pue=1.4\)$"),
        (
            {"hours_per_month": 10, "pricing": "cheap"},
            r"^pricing must be on-demand, spot or reserved, got 'cheap' \(e.g. pricing='reserved'\)$",
        ),
        ({"hours_per_month": 10, "count": 0}, r"^count must be a whole number from 1, got 0 \(e.g. count=8\)$"),
        ({"hours_per_month": 10, "count": 2.5}, r"^count must be a whole number from 1, got 2.5 \(e.g. count=8\)$"),
        (
            {"hours_per_month": 10, "power_watts": -1},
            r"^power_watts must be a number from 0, got -1 \(e.g. power_watts=700\)$",
        ),
    ],
)
def test_bad_owned_inputs_are_refused_naming_the_value_and_an_example(options, message):
    with pytest.raises(SpecError, match=message):
        tco.compare_owned("H100-80GB", **options)


def _pool_with_a_job(registry, clock):
    pool = add_ready_pool(
        registry, name="train", gpu_type="A100-80GB", count=2, spot_fraction=0.5, base_pricing="reserved"
    )
    registry.open_worker_interval(pool, "0", "spot", started_at=T0)
    registry.open_worker_interval(pool, "1", "reserved", started_at=T0)
    clock.at(HOUR)
    registry.add_job("job-1", pool, "train", "torchrun", "sha", ranks=2)
    clock.at(2 * HOUR)
    registry.set_job_status("job-1", "succeeded")
    record_data_volume(registry, pool, storage_gb=100, network_gb=20, stated=True)
    clock.at(3 * HOUR)
    registry.heartbeat([pool])
    return pool


def test_report_has_a_row_per_pool_and_per_job_with_the_seed_formula(clocked_registry, clock):
    pool = _pool_with_a_job(clocked_registry, clock)
    rows = tco.cost_report(clocked_registry, pool="train")
    frame = tco.to_dataframe(rows)
    assert list(frame["job"]) == ["", "job-1"]
    assert list(frame.columns) == tco.COLUMNS
    pool_row = frame.iloc[0]
    assert pool_row["gpu_hours"] == pytest.approx(6.0)
    assert pool_row["compute_usd"] == pytest.approx(3 * (1.57 + 3.22))
    assert pool_row["storage_usd"] == pytest.approx(100 * 0.08 * 3 / HOURS_PER_MONTH)
    assert pool_row["network_usd"] == pytest.approx(20 * 0.09)
    assert pool_row["total_usd"] == pytest.approx(
        pool_row["compute_usd"] + pool_row["storage_usd"] + pool_row["network_usd"]
    )
    assert frame.iloc[1]["compute_usd"] == pytest.approx(1.57 + 3.22)
    assert pool_row["total_usd"] == pytest.approx(pool_cost(clocked_registry, pool).total_usd)


def test_report_for_all_pools_since_a_date_leaves_out_pools_that_ended_before(clocked_registry, clock):
    from gpugeek_jupyter.store import PoolStatus

    old = add_ready_pool(clocked_registry, name="old", gpu_type="T4", count=1)
    clock.at(HOUR)
    clocked_registry.set_pool_status(old, PoolStatus.STOPPED, reason="done")
    _pool_with_a_job(clocked_registry, clock)
    rows = tco.cost_report(clocked_registry, all=True, since=T0 + 2 * HOUR, jobs=False)
    assert [r.pool_name for r in rows] == ["train"]


def test_report_since_takes_a_date_as_the_magic_does(clocked_registry, clock):
    _pool_with_a_job(clocked_registry, clock)
    as_text = tco.cost_report(clocked_registry, all=True, since="2026-09-21", jobs=False)
    as_timestamp = tco.cost_report(clocked_registry, all=True, since=tco.parse_since("2026-09-21"), jobs=False)
    assert [r.to_dict() for r in as_text] == [r.to_dict() for r in as_timestamp]


def test_report_for_an_unknown_pool_names_it():
    from gpugeek_jupyter.store import get_registry

    with pytest.raises(NotFoundError, match="no pool named 'nope'"):
        tco.cost_report(get_registry(), pool="nope")


def test_csv_export_matches_the_dataframe(clocked_registry, clock, tmp_path):
    _pool_with_a_job(clocked_registry, clock)
    rows = tco.cost_report(clocked_registry, pool="train")
    path = tco.write_csv(rows, tmp_path / "out" / "cost.csv")
    with open(path) as f:
        written = list(csv.DictReader(f))
    assert [r["job"] for r in written] == ["", "job-1"]
    assert float(written[0]["total_usd"]) == pytest.approx(rows[0].total_usd)


def test_bar_chart_has_one_bar_per_row_stacked_by_kind(clocked_registry, clock):
    _pool_with_a_job(clocked_registry, clock)
    rows = tco.cost_report(clocked_registry, pool="train")
    from gpugeek_jupyter.widgets.cost_chart import bar_chart

    fig = bar_chart(rows)
    assert list(fig.x_range.factors) == ["train", "train / job-1"]
    stacked = [r.glyph.top.expr.fields for r in fig.renderers]  # bokeh's stack() of the five kinds
    kinds = ("busy compute", "idle compute", "unsampled compute", "storage", "network")
    assert len(fig.renderers) == 5 and stacked[-1] == kinds
    data = fig.renderers[0].data_source.data
    for i, row in enumerate(rows):  # the compute parts add up to the compute cost
        parts = data["busy compute"][i] + data["idle compute"][i] + data["unsampled compute"][i]
        assert parts == pytest.approx(row.compute_usd)
    assert fig.yaxis[0].formatter.use_scientific is False  # 0.00015 USD, not 1.500e-4


def test_since_accepts_dates_and_refuses_other_text():
    assert tco.parse_since("2026-11-01") == pytest.approx(__import__("datetime").datetime(2026, 11, 1).timestamp())
    with pytest.raises(
        SpecError, match=r"^since 'last week' is not a date \(e.g. since='2026-11-01' or since='2026-11-01T09:30'\)$"
    ):
        tco.parse_since("last week")


def test_hours_per_month_is_measured_from_the_registry(clocked_registry, clock):
    pool = add_ready_pool(clocked_registry, name="a", gpu_type="L4", count=2)
    clocked_registry.open_worker_interval(pool, "0", "on_demand", started_at=T0)
    clocked_registry.open_worker_interval(pool, "1", "on_demand", started_at=T0)
    clock.at(30 * 24 * HOUR)  # both ran the whole 30 days
    clocked_registry.heartbeat([pool])
    assert tco.usage_hours_per_month(clocked_registry, "L4") == pytest.approx(HOURS_PER_MONTH)
    with pytest.raises(NotFoundError, match="no T4 pool"):
        tco.usage_hours_per_month(clocked_registry, "T4")
