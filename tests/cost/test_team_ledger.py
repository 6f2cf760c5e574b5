"""Quotas and the team budget: checked before anything of a launch starts, on every surface, one line
naming the limit and the usage; the team ledger on a real PostgreSQL server (started and stopped by
this module), which holds every user's pools for the team budget and the admin's report. Without a
ledger, quotas count this host's registry, which stays each user's own record."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from gpugeek_jupyter import config, runtime
from gpugeek_jupyter.cost.team import (
    POOLS,
    Quota,
    TeamLedger,
    Usage,
    Viewer,
    check_quota,
    quota_for,
    start_of_month,
    team_report,
)
from gpugeek_jupyter.errors import QuotaExceededError, Surface
from gpugeek_jupyter.spec import PoolSpec
from support.postgres import postgres_server, postgres_unavailable


def _configure(**settings: Any) -> None:
    config.set_config(config.GpugeekConfig(**settings))
    runtime.reset_pool_manager()  # the next manager installs the quota check with these settings


@pytest.fixture(autouse=True)
def _settings_back() -> Iterator[None]:
    yield
    runtime.reset_pool_manager()
    config.set_config(None)


A100 = PoolSpec.create(gpu_type="A100-80GB", count=4, name="big")


def test_a_launch_past_the_gpu_quota_names_the_limit_the_usage_and_the_setting_for_each_surface() -> None:
    with pytest.raises(QuotaExceededError) as caught:
        check_quota(A100, "ada", Quota(max_gpus=8), Usage(gpus=6), team_budget=0)
    error = caught.value
    assert str(error) == (
        "count=4 would give 'ada' 10 GPUs at once, past the quota of 8 (GpugeekConfig.quota_max_gpus; "
        "6 held now); stop one of your pools or ask your admin"
    )
    assert error.phrase(Surface.MAGIC).startswith("--count 4 would give 'ada' 10 GPUs")
    assert error.phrase(Surface.SERVER).startswith('"count": 4 would give "ada" 10 GPUs')
    assert error.http_status == 403


def test_a_backend_or_gpu_type_not_allowed_is_refused_with_what_is() -> None:
    with pytest.raises(QuotaExceededError, match=r"'ada' may launch on local, slurm only, not backend='kubernetes'"):
        spec = PoolSpec.create(gpu_type="A100-80GB", count=1, backend="kubernetes", namespace="t", name="k")
        check_quota(spec, "ada", Quota(backends=("local", "slurm")), Usage(), team_budget=0)
    with pytest.raises(QuotaExceededError, match=r"may launch cpu only, not gpu_type='A100-80GB'"):
        check_quota(A100, "ada", Quota(gpu_types=("cpu",)), Usage(), team_budget=0)


def test_a_spent_team_budget_and_a_spent_daily_quota_refuse_any_launch() -> None:
    cpu = PoolSpec.create(gpu_type="cpu", count=1, name="small")
    with pytest.raises(QuotaExceededError, match=r"the team has spent \$1,200.00 this month .*budget of \$1,000.00"):
        check_quota(cpu, "ada", Quota(), Usage(team_usd_month=1200), team_budget=1000)
    with pytest.raises(QuotaExceededError, match=r"'ada' has spent \$51.00 today .*daily quota of \$50.00"):
        check_quota(cpu, "ada", Quota(usd_per_day=50), Usage(user_usd_today=51), team_budget=0)
    check_quota(cpu, "ada", Quota(max_gpus=1, usd_per_day=50), Usage(user_usd_today=10), team_budget=1000)


def test_a_spent_monthly_quota_refuses_a_launch_naming_the_setting_that_set_it() -> None:
    cpu = PoolSpec.create(gpu_type="cpu", count=1, name="small")
    settings = config.GpugeekConfig(quota_usd_per_month=500.0, group_quotas={"lab": {"usd_per_month": 2000}})
    quota = quota_for("ada", settings)
    with pytest.raises(QuotaExceededError) as caught:
        check_quota(cpu, "ada", quota, Usage(user_usd_today=3, user_usd_month=612.5), team_budget=0)
    assert str(caught.value) == (
        "'ada' has spent $612.50 this month (UTC), the monthly quota of $500.00 (GpugeekConfig.quota_usd_per_month); "
        "no pool starts before the first of next month unless your admin raises it"
    )
    lab = quota_for("ada", settings, groups=["lab"])
    check_quota(cpu, "ada", lab, Usage(user_usd_month=612.5), team_budget=0)
    with pytest.raises(QuotaExceededError, match=r"monthly quota of \$2,000.00 \(GpugeekConfig.group_quotas\['lab'\]"):
        check_quota(cpu, "ada", lab, Usage(user_usd_month=2000), team_budget=0)
    assert Quota.from_dict(lab.to_dict()) == lab  # as the ledger service sends it


def test_a_users_override_replaces_the_default_and_an_unknown_limit_is_named() -> None:
    settings = config.GpugeekConfig(quota_max_gpus=4, user_quotas={"ada": {"max_gpus": 16}})
    assert quota_for("ada", settings).max_gpus == 16 and quota_for("bob", settings).max_gpus == 4
    with pytest.raises(Exception, match=r"user_quotas\['bob'\] has an unknown limit 'gpus'"):
        quota_for("bob", config.GpugeekConfig(user_quotas={"bob": {"gpus": 2}}))


def test_without_a_ledger_the_worker_quota_counts_this_hosts_live_pools_and_refuses_before_registering(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gpugeek_jupyter

    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    _configure(quota_max_workers=3)
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="first")
    try:
        before = len(runtime.list_pools())
        with pytest.raises(QuotaExceededError, match=r"would give 'ada' 4 workers at once, past the quota of 3"):
            gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="second")
        assert len(runtime.list_pools()) == before  # nothing registered, nothing started
    finally:
        pool.stop()


# -- on a real PostgreSQL ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    why = postgres_unavailable()
    if why:
        pytest.skip(why)
    with postgres_server() as url:
        yield url


@pytest.fixture
def ledger(postgres_url: str) -> Iterator[TeamLedger]:
    ledger = TeamLedger(postgres_url)
    from sqlalchemy import delete

    with ledger.engine.begin() as db:
        db.execute(delete(POOLS))
    yield ledger
    ledger.engine.dispose()


def _another_users_pool(ledger: TeamLedger, user: str, usd_per_hour: float, hours: float) -> None:
    from sqlalchemy import insert

    now = time.time()
    started = max(start_of_month(now), now - hours * 3600)
    with ledger.engine.begin() as db:
        db.execute(
            insert(POOLS).values(
                pool_key=f"other-host:/home/{user}/gpugeek.sqlite:1",
                user_name=user,
                host="other-host",
                pool_name="theirs",
                backend="slurm",
                gpu_type="H100-80GB",
                gpus=8,
                workers=8,
                usd_per_hour=usd_per_hour,
                started_at=started,
                ended_at=now,
            )
        )


def test_a_pool_is_written_to_the_team_ledger_at_launch_and_closed_at_its_stop(
    ledger: TeamLedger, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpugeek_jupyter

    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    _configure(team_ledger_url=postgres_url, quota_max_workers=3)
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="ledgered")
    try:
        [row] = ledger.open_pools("ada")
        assert (row.pool_name, row.backend, row.gpu_type, row.workers, row.gpus) == ("ledgered", "local", "cpu", 2, 0)
        with pytest.raises(QuotaExceededError, match=r"4 workers at once, past the quota of 3 .*2 held now"):
            gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="one-more")
    finally:
        pool.stop()
    assert ledger.open_pools("ada") == []
    report = team_report(since=time.time() - 3600)
    assert [(r["user"], r["gpu_type"], r["pools"]) for r in report] == [("ada", "cpu", 1)]


def test_the_team_budget_counts_every_users_spend_and_the_report_names_each_user(
    ledger: TeamLedger, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpugeek_jupyter

    if time.time() - start_of_month(time.time()) < 2 * 3600:
        pytest.skip("too early in the month for a 2-hour pool of another user")
    _another_users_pool(ledger, "bob", usd_per_hour=40.0, hours=2)  # $80 this month
    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    _configure(team_ledger_url=postgres_url, team_budget_usd_per_month=50.0)
    with pytest.raises(QuotaExceededError, match=r"the team has spent \$80.00 this month .*budget of \$50.00"):
        gpugeek_jupyter.launch(gpu_type="cpu", count=1, name="refused")
    assert ledger.open_pools("ada") == []
    assert team_report() == []  # ada, no hub admin, sees her own rows: none
    [bob] = team_report(viewer=Viewer("admin", admin=True))
    assert (bob["user"], bob["gpu_type"], bob["pools"], round(bob["gpu_hours"], 3), round(bob["usd"], 2)) == (
        "bob",
        "H100-80GB",
        1,
        16.0,
        80.0,
    )


def test_a_users_monthly_quota_counts_their_own_spend_this_month_in_the_ledger(
    ledger: TeamLedger, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpugeek_jupyter

    if time.time() - start_of_month(time.time()) < 2 * 3600:
        pytest.skip("too early in the month for a 2-hour pool")
    _another_users_pool(ledger, "ada", usd_per_hour=40.0, hours=2)  # ada's own $80 this month, elsewhere
    _another_users_pool(ledger, "bob", usd_per_hour=400.0, hours=2)  # bob's does not count for her
    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    _configure(team_ledger_url=postgres_url, quota_usd_per_month=100.0, user_quotas={"ada": {"usd_per_month": 50}})
    with pytest.raises(QuotaExceededError, match=r"'ada' has spent \$80.00 this month .*monthly quota of \$50.00 "):
        gpugeek_jupyter.launch(gpu_type="cpu", count=1, name="refused")
    assert ledger.open_pools("ada") == []
    _configure(team_ledger_url=postgres_url, quota_usd_per_month=100.0)  # $80 of $100: she may launch
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=1, name="allowed")
    pool.stop()


def test_a_running_pool_is_stopped_once_the_team_has_spent_its_monthly_budget(
    ledger: TeamLedger, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.cost import team
    from gpugeek_jupyter.store import PoolStatus

    if time.time() - start_of_month(time.time()) < 2 * 3600:
        pytest.skip("too early in the month for a 2-hour pool of another user")
    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    monkeypatch.setattr(team, "TEAM_BUDGET_CHECK_S", 0.5)
    _configure(team_ledger_url=postgres_url, team_budget_usd_per_month=50.0, heartbeat_seconds=0.5)
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=1, name="running")  # $0 of $50 spent: it starts
    try:
        assert pool.record.status is PoolStatus.READY
        _another_users_pool(ledger, "bob", usd_per_hour=40.0, hours=2)  # bob's $80 elsewhere, meanwhile
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and pool.record.status.is_live:
            time.sleep(0.2)
        record = pool.record
        assert record.status is PoolStatus.STOPPED, record
        assert record.reason == (
            "pool 'running' was stopped: the team has spent $80.00 this month, its budget of $50.00 "
            "(GpugeekConfig.team_budget_usd_per_month)"
        )
        events = [e["kind"] for e in runtime.get_pool_manager().registry.events(pool.id)]
        assert "team-budget-stop" in events
        assert ledger.open_pools("ada") == []  # its row closed with it
    finally:
        if pool.record.status.is_live:
            pool.stop()


def test_a_killed_owners_open_row_is_closed_at_the_users_next_check(
    ledger: TeamLedger, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugeek_jupyter.cost.team import pool_key, usage_of
    from gpugeek_jupyter.store import PoolStatus, get_registry

    registry = get_registry()
    spec = PoolSpec.create(gpu_type="cpu", count=2, name="gone")
    record = registry.add_pool("gone", "local", spec.to_dict(), {}, owner="pid 1")
    ledger.record_start(pool_key(registry, record.id), "ada", record, spec, usd_per_hour=1.0)
    assert usage_of("ada", registry, ledger).workers == 2
    registry.set_pool_status(record.id, PoolStatus.LOST, reason="its owner exited")
    assert usage_of("ada", registry, ledger).workers == 0
    assert ledger.open_pools("ada") == []


def test_sqlite_serves_as_a_team_ledger_for_a_try_out(tmp_path: Any) -> None:
    ledger = TeamLedger(f"sqlite:///{tmp_path / 'team.sqlite'}")
    assert ledger.open_pools("ada") == [] and ledger.spend(0.0) == 0.0


def test_a_pool_still_starting_counts_against_the_quota_before_its_ledger_row_exists(tmp_path: Any) -> None:
    from gpugeek_jupyter.cost.team import usage_of
    from gpugeek_jupyter.store import get_registry

    ledger = TeamLedger(f"sqlite:///{tmp_path / 'team.sqlite'}")
    registry = get_registry()
    spec = PoolSpec.create(gpu_type="cpu", count=2, name="starting")
    registry.add_pool("starting", "local", spec.to_dict(), {}, owner="pid 1")
    assert usage_of("ada", registry, ledger).workers == 2  # written to the ledger only once it is ready


def test_a_hub_groups_quota_applies_to_its_members_and_the_refusal_names_the_group() -> None:
    settings = config.GpugeekConfig(
        quota_max_gpus=8,
        group_quotas={"students": {"max_gpus": 1, "gpu_types": ["cpu"]}, "lab": {"max_gpus": 4, "gpu_types": ["A10G"]}},
        user_quotas={"ada": {"max_gpus": 16}},
    )
    student = quota_for("bob", settings, groups=["students"])
    assert (student.max_gpus, student.gpu_types) == (1, ("cpu",))
    with pytest.raises(QuotaExceededError) as caught:
        check_quota(PoolSpec.create(gpu_type="cpu", count=1, name="c"), "bob", student, Usage(), team_budget=0)
        check_quota(A100, "bob", replace(student, gpu_types=()), Usage(), team_budget=0)
    assert caught.value.phrase(Surface.MAGIC) == (
        "--count 4 would give 'bob' 4 GPUs at once, past the quota of 1 (GpugeekConfig.group_quotas['students']"
        "['max_gpus']; 0 held now); stop one of your pools or ask your admin"
    )
    both = quota_for("bob", settings, groups=["students", "lab"])  # the most generous of his groups
    assert (both.max_gpus, set(both.gpu_types)) == (4, {"cpu", "A10G"})
    assert both.setting("max_gpus") == "group_quotas['lab']['max_gpus'] / group_quotas['students']['max_gpus']"
    assert quota_for("ada", settings, groups=["students"]).max_gpus == 16  # a user's own quota goes over
    assert quota_for("carol", settings, groups=["other"]).max_gpus == 8  # no group setting: the default
    with pytest.raises(Exception, match=r"GpugeekConfig.group_quotas\['x'\] has an unknown limit 'gpus'"):
        quota_for("bob", config.GpugeekConfig(group_quotas={"x": {"gpus": 1}}), groups=["x"])


def test_without_a_ledger_spend_quotas_count_what_this_registrys_pools_cost_today_and_this_month(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugeek_jupyter.cost.team import usage_of
    from gpugeek_jupyter.store import PoolStatus, Registry

    from .conftest import add_ready_pool

    now = time.time()
    if now - start_of_month(now) < 600 or now % 86400 < 600:
        pytest.skip("too early in the UTC day for a 5-minute pool")
    at = [now - 300]  # the registry's clock: the pool is launched 5 minutes ago
    registry = Registry(tmp_path / "gpugeek.sqlite", clock=lambda: at[0])
    pool_id = add_ready_pool(registry, gpu_type="H100-80GB", count=4)
    hourly = registry.pool_by_id(pool_id).prices["on_demand"] * 4
    workers = [registry.open_worker_interval(pool_id, str(i), "on_demand", started_at=now - 300) for i in range(4)]
    for interval in workers:
        registry.close_worker_interval(interval, "stopped", stopped_at=now - 60)  # 4 minutes, ended
    at[0] = now - 60
    registry.set_pool_status(pool_id, PoolStatus.STOPPED)
    at[0] = now
    spent = hourly * 4 / 60
    usage = usage_of("ada", registry, None)
    assert (usage.gpus, usage.workers) == (0, 0)
    assert usage.user_usd_today == pytest.approx(spent, rel=1e-3)
    assert usage.user_usd_month == pytest.approx(spent, rel=1e-3)

    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    _configure(quota_usd_per_day=round(spent / 2, 2))
    manager = runtime.create_pool_manager(registry)
    with pytest.raises(QuotaExceededError, match=rf"'ada' has spent \${spent:,.2f} today \(UTC\), the daily quota"):
        manager.launch(PoolSpec.create(gpu_type="cpu", count=1, name="refused"))
    assert [r.name for r in registry.list_pools()] == ["h100"]  # nothing registered
