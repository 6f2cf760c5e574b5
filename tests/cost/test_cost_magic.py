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

from .conftest import add_ready_pool


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
    assert "pool dev:" in capsys.readouterr().out
    shell.run_line_magic("gpugeek_cost", "dev -o report")  # stated once, remembered
    assert shell.user_ns["report"].loc[0, "network_gb"] == 10


def test_all_pools_report_and_chart(shell, capsys):
    registry = get_registry()
    add_ready_pool(registry, name="a", gpu_type="cpu", count=1)
    add_ready_pool(registry, name="b", gpu_type="T4", count=2)
    shell.run_line_magic("gpugeek_cost", "--all --chart -o report")
    assert list(shell.user_ns["report"]["pool"]) == ["a", "b"]
    assert "BokehModel" in capsys.readouterr().out  # the chart widget was displayed


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--compare-owned", r"--compare-owned needs --gpu-type when no pool is current"),
        (
            "--compare-owned --gpu-type H100-80GB",
            r"no H100-80GB pool in the registry to measure use from; give it \(e.g. --hours-per-month 200\)",
        ),
        (
            "--compare-owned --gpu-type H100-80GB --hours-per-month 10 --count 2.5",
            r"--count must be a whole number >= 1, got '2.5'",
        ),
        (
            "--compare-owned --gpu-type H100-80GB --hours-per-month lots",
            r"--hours-per-month must be a number, got 'lots' \(e.g. --hours-per-month 200\)",
        ),
        ("--compare-owned --gpu-type V100 --hours-per-month 10", r"unknown GPU type 'V100'"),
        (
            "--compare-owned --gpu-type H100-80GB --hours-per-month 10 --watts -5",
            r"^--watts must be a number from 0, got -5.0 \(e.g. --watts 700\)$",
        ),
        (
            "--compare-owned --gpu-type H100-80GB --hours-per-month 10 --pricing cheap",
            r"^--pricing must be on-demand, spot or reserved, got 'cheap' \(e.g. --pricing reserved\)$",
        ),
        (
            "--all --since 'last week'",
            r"^--since 'last week' is not a date \(e.g. --since 2026-11-01 or --since 2026-11-01T09:30\)$",
        ),
        ("--all --storage-gb 5", r"--storage-gb/--network-gb need one pool or --job, not --all"),
        ("--job nope", r"no job with id 'nope'"),
    ],
)
def test_bad_options_are_one_line_usage_errors(shell, line, message):
    with pytest.raises(UsageError, match=message) as caught:
        shell.run_line_magic("gpugeek_cost", line)
    assert "\n" not in str(caught.value)


def test_compare_owned_shows_the_users_number_among_utilization_levels(shell, capsys):
    shell.run_line_magic(
        "gpugeek_cost", "--compare-owned --gpu-type A100-80GB --count 8 --hours-per-month 365 -o report"
    )
    out = capsys.readouterr().out
    assert out.startswith("8 x A100-80GB for 365 h/month (50% utilization)")
    assert "50% (yours)" in out
    assert shell.user_ns["report"].count == 8


def test_notices_are_printed_once_per_process_however_often_the_magics_load(shell, capsys):
    shell.register_magics(CostMagics)
    printers = [p for p in get_pool_manager().plugins.values() if isinstance(p, NoticePrinter)]
    assert len(printers) == 1
    get_pool_manager().post_notice(
        SimpleNamespace(name="x"),
        "budget-warning",  # type: ignore[arg-type]
        "pool 'x' has spent USD 8.00 of its USD 10.00 budget (80%)",
    )
    assert capsys.readouterr().err == "gpugeek: pool 'x' has spent USD 8.00 of its USD 10.00 budget (80%)\n"
