"""``%gpugeek_cost`` options in an in-process IPython shell: reports, stated volumes, one-line errors."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from gpugeek_jupyter.magics.cost import CostMagics, NoticePrinter
from gpugeek_jupyter.runtime import get_pool_manager
from gpugeek_jupyter.store import get_registry

from .conftest import T0, Clock, add_ready_pool


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    ip = InteractiveShell.instance()
    ip.register_magics(CostMagics)
    yield ip
    ip.user_ns.pop("report", None)


def test_no_current_pool_is_a_one_line_usage_error_with_the_way_out(shell):
    with pytest.raises(
        UsageError, match=r"^no current pool: name one, or pass --job ID or --all \(e.g. %gpugeek_cost --all\)$"
    ):
        shell.run_line_magic("gpugeek_cost", "")


def test_stated_volumes_are_stored_with_the_pool_and_priced(shell, capsys):
    add_ready_pool(get_registry(), name="dev", gpu_type="cpu", count=1)
    shell.run_line_magic("gpugeek_cost", "dev --storage-gb 730 --network-gb 10 --no-jobs -o report")
    frame = shell.user_ns["report"]
    assert frame.loc[0, "storage_gb"] == 730 and frame.loc[0, "network_gb"] == 10
    assert frame.loc[0, "network_usd"] == pytest.approx(0.90)
    assert "pool dev, compute USD" in capsys.readouterr().out
    shell.run_line_magic("gpugeek_cost", "dev -o report")  # stated once, remembered
    assert shell.user_ns["report"].loc[0, "network_gb"] == 10


def test_all_pools_report_and_chart(shell, capsys):
    registry = get_registry()
    add_ready_pool(registry, name="a", gpu_type="cpu", count=1)
    add_ready_pool(registry, name="b", gpu_type="T4", count=2)
    shell.run_line_magic("gpugeek_cost", "--all --chart -o report")
    assert list(shell.user_ns["report"]["pool"]) == ["a", "b"]
    assert "BokehModel" in capsys.readouterr().out  # the chart widget was displayed


def test_the_pool_is_named_by_a_word_or_by_pool_the_same_as_in_every_magic(shell):
    add_ready_pool(get_registry(), name="dev", gpu_type="cpu", count=1)
    shell.run_line_magic("gpugeek_cost", "--pool dev --no-jobs -o report")
    assert list(shell.user_ns["report"]["pool"]) == ["dev"]
    shell.run_line_magic("gpugeek_cost", "dev --pool dev --no-jobs -o report")  # the same pool twice: fine
    with pytest.raises(
        UsageError, match=r"^two pools named, 'dev' and --pool 'prod': name one \(e.g. %gpugeek_cost dev\)$"
    ):
        shell.run_line_magic("gpugeek_cost", "dev --pool prod")


def test_the_report_splits_compute_into_idle_busy_and_unsampled(shell, capsys, monkeypatch):
    registry = get_registry()
    clock = Clock()
    monkeypatch.setattr(registry, "clock", clock)
    pool = add_ready_pool(registry, name="dev", gpu_type="cpu", count=1, price=36)  # USD 0.01 a second
    registry.open_worker_interval(pool, "0", "on_demand", started_at=T0)
    registry.add_utilization(pool, 0.0, 1, at=T0 + 300)  # telemetry starts 5 min late
    registry.add_utilization(pool, 0.5, 1, at=T0 + 500)
    clock.at(600)
    registry.heartbeat([pool])
    shell.run_line_magic("gpugeek_cost", "dev --no-jobs -o report")
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("pool dev")]
    assert (
        line == "pool dev, compute USD 6.00: idle 1.00, busy 1.00, unsampled 4.00 (7 min without utilization samples)"
    )
    row = shell.user_ns["report"].iloc[0]
    assert row.idle_usd + row.busy_usd + row.unsampled_usd == pytest.approx(row.compute_usd)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "--all --since 'last week'",
            r"^--since 'last week' is not a date \(e.g. --since 2026-11-01 or --since 2026-11-01T09:30\)$",
        ),
        ("--all --storage-gb 5", r"--storage-gb/--network-gb need one pool or --job, not --all"),
        ("--job nope", r"no job with id 'nope'"),
        ("dev --storage-gb lots", r"^--storage-gb must be a number, got 'lots' \(e.g. --storage-gb 500\)$"),
        ("nowhere", r"^no pool named 'nowhere' in the registry"),
    ],
)
def test_bad_report_options_are_one_line_usage_errors(shell, line, message):
    add_ready_pool(get_registry(), name="dev", gpu_type="cpu", count=1)
    with pytest.raises(UsageError, match=message) as caught:
        shell.run_line_magic("gpugeek_cost", line)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "--compare-owned --gpu-type H100-80GB --count 8 --hours-per-month 200",
            "--compare-owned moved: use %gpugeek_tco --gpu-type H100-80GB --count 8 --hours-per-month 200",
        ),
        (
            "--compare-owned --gpu-type H100-80GB --hours-per-month 10 --watts 700 --kwh-price=0.2 -o owned",
            "--compare-owned moved: use %gpugeek_tco --gpu-type H100-80GB --hours-per-month 10 --power-watts 700 "
            "--power-usd-per-kwh=0.2 -o owned",
        ),
        (
            "dev --gpu-type H100-80GB",
            "--gpu-type is an option of the owned-vs-cloud comparison, which is %gpugeek_tco now "
            "(e.g. %gpugeek_tco --gpu-type ...; see %gpugeek_tco?)",
        ),
    ],
)
def test_the_comparison_options_name_the_magic_they_moved_to(shell, line, message):
    with pytest.raises(UsageError) as caught:
        shell.run_line_magic("gpugeek_cost", line)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("", r"^no pool to compare: name one or give --gpu-type \(e.g. %gpugeek_tco --gpu-type H100-80GB"),
        (
            "--gpu-type H100-80GB",
            r"no H100-80GB pool in the registry to measure use from; give it \(e.g. --hours-per-month 200\)",
        ),
        (
            "--gpu-type H100-80GB --hours-per-month 10 --count 2.5",
            r"^--count must be a whole number from 1, got 2.5 \(e.g. --count 8\)$",
        ),
        (
            "--gpu-type H100-80GB --hours-per-month lots",
            r"^--hours-per-month must be a number, got 'lots' \(e.g. --hours-per-month 200\)$",
        ),
        ("--gpu-type V100 --hours-per-month 10", r"unknown GPU type 'V100'"),
        (
            "--gpu-type H100-80GB --hours-per-month 10 --power-watts -5",
            r"^--power-watts must be a number from 0, got -5 \(e.g. --power-watts 700\)$",
        ),
        (
            "--gpu-type H100-80GB --hours-per-month 10 --price free",
            r"^--price must be a number, got 'free' \(e.g. --price 2.1\)$",
        ),
        (
            "--gpu-type H100-80GB --hours-per-month 10 --pricing cheap",
            r"^--pricing must be on-demand, spot or reserved, got 'cheap' \(e.g. --pricing reserved\)$",
        ),
        ("nowhere --hours-per-month 10", r"^no pool named 'nowhere' in the registry"),
        ("--watts 700", r"unrecognized arguments: --watts \(see %gpugeek_tco\? for the options"),
    ],
)
def test_bad_comparison_options_are_one_line_usage_errors(shell, line, message):
    with pytest.raises(UsageError, match=message) as caught:
        shell.run_line_magic("gpugeek_tco", line)
    assert "\n" not in str(caught.value)


def test_the_comparison_shows_the_users_number_among_utilization_levels(shell, capsys):
    shell.run_line_magic("gpugeek_tco", "--gpu-type A100-80GB --count 8 --hours-per-month 365 -o report")
    out = capsys.readouterr().out
    assert out.startswith("8 x A100-80GB for 365 h/month (50% utilization)")
    assert "50% (yours)" in out
    assert shell.user_ns["report"].count == 8


def test_the_comparison_takes_a_pools_gpus_by_its_name(shell, capsys):
    add_ready_pool(get_registry(), name="train", gpu_type="H100-80GB", count=4)
    shell.run_line_magic("gpugeek_tco", "train --hours-per-month 200 -o report")
    assert capsys.readouterr().out.startswith("4 x H100-80GB for 200 h/month")
    shell.run_line_magic("gpugeek_tco", "--pool train --gpu-type L4 --hours-per-month 200 -o report")
    assert shell.user_ns["report"].count == 1  # another GPU type: not the pool's count


def test_notices_are_printed_once_per_process_however_often_the_magics_load(shell, capsys):
    shell.register_magics(CostMagics)
    printers = [p for p in get_pool_manager().plugins.values() if isinstance(p, NoticePrinter)]
    assert len(printers) == 1
    get_pool_manager().post_notice(
        SimpleNamespace(name="x", spec=SimpleNamespace(backend="local")),  # type: ignore[arg-type]
        "budget-warning",
        "pool 'x' has spent USD 8.00 of its USD 10.00 budget (80%)",
    )
    assert capsys.readouterr().err == "gpugeek: pool 'x' has spent USD 8.00 of its USD 10.00 budget (80%)\n"


def test_the_table_is_a_summary_that_fits_with_small_costs_shown_and_detail_behind_a_flag(shell, capsys, monkeypatch):
    registry = get_registry()
    clock = Clock()
    monkeypatch.setattr(registry, "clock", clock)
    pool = add_ready_pool(registry, name="dev", gpu_type="cpu", count=1, price=0.2)  # USD 0.20 an hour
    registry.open_worker_interval(pool, "0", "on_demand", started_at=T0)
    registry.add_utilization(pool, 0.0, 1, at=T0)
    registry.add_utilization(pool, 0.25, 1, at=T0 + 3.5)
    clock.at(3.5)  # 3.5 s: USD 0.000194
    registry.heartbeat([pool])
    shell.run_line_magic("gpugeek_cost", "dev --no-jobs")
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header == ["pool", "job", "hours", "USD", "idle"], out
    assert "0.00097" in out and "0.00019" in out and "75%" in out and "0.00 " not in out.splitlines()[1], out
    assert max(len(line) for line in out.splitlines()[:2]) <= 80, out  # fits a notebook at 1280 px
    assert "pool dev, compute USD 0.00019: idle 0.00015, busy 0.00004" in out
    shell.run_line_magic("gpugeek_cost", "dev --no-jobs --detail")
    detail = capsys.readouterr().out
    assert "status" in detail and "unsampled_usd" in detail and "preemptions" in detail  # every part
