"""``%gpugeek_pools`` in an in-process IPython shell: live and recent pools by default, --all, --live."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from gpugeek_jupyter.magics.pools import PoolMagics
from gpugeek_jupyter.store import PoolStatus, Registry, get_registry

HOUR = 3600.0


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    ip = InteractiveShell.instance()
    ip.register_magics(PoolMagics)
    yield ip


def pool_at(name: str, at: float, ended_at: float | None = None) -> None:
    """A pool of this (live) process registered at ``at``, stopped at ``ended_at`` when given."""
    registry = Registry(get_registry().path, clock=lambda: at)
    record = registry.add_pool(name, "local", {"gpu_type": "cpu", "count": 1}, {}, owner="kernel 1")
    if ended_at is not None:
        Registry(get_registry().path, clock=lambda: ended_at).set_pool_status(
            record.id, PoolStatus.STOPPED, reason="done"
        )


@pytest.fixture
def history() -> None:
    now = time.time()
    pool_at("last-week", now - 7 * 24 * HOUR, ended_at=now - 7 * 24 * HOUR + 60)
    pool_at("this-morning", now - 4 * HOUR, ended_at=now - 3 * HOUR)
    pool_at("running", now)


def test_the_table_shows_live_pools_and_those_that_ended_in_the_last_day(
    shell: InteractiveShell, history: None
) -> None:
    table = shell.run_line_magic("gpugeek_pools", "")
    assert list(table["name"]) == ["this-morning", "running"]


def test_all_shows_the_whole_history(shell: InteractiveShell, history: None) -> None:
    table = shell.run_line_magic("gpugeek_pools", "--all")
    assert list(table["name"]) == ["last-week", "this-morning", "running"]


def test_live_shows_only_live_pools(shell: InteractiveShell, history: None) -> None:
    table = shell.run_line_magic("gpugeek_pools", "--live")
    assert list(table["name"]) == ["running"]


def test_live_and_all_together_are_a_one_line_usage_error(shell: InteractiveShell) -> None:
    with pytest.raises(UsageError, match=r"^pass --live or --all, not both \(e\.g\. %gpugeek_pools --all\)$"):
        shell.run_line_magic("gpugeek_pools", "--live --all")


def test_the_dashboard_column_is_the_servers_route_for_a_live_pool_and_empty_once_it_ended(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugeek_jupyter.dashboards import pool_dashboard_path

    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/ada/")
    registry = get_registry()
    for name in ("live", "ended"):
        record = registry.add_pool(name, "local", {"gpu_type": "cpu", "count": 1}, {}, owner="kernel 1")
        registry.set_pool_status(record.id, PoolStatus.READY, dashboard_link=pool_dashboard_path(name))
    registry.set_pool_status(registry.live_pool("ended").id, PoolStatus.STOPPED, reason="done")
    table = shell.run_line_magic("gpugeek_pools", "")
    assert dict(zip(table["name"], table["dashboard"])) == {
        "live": "/user/ada/gpugeek/pools/live/dashboard/status",
        "ended": "",
    }
