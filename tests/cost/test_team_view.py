"""The team's spend on every surface: ``team_report()`` in Python, ``%gpugeek_cost --team`` in a
magic (``GET /gpugeek/team`` is in tests/server/test_team_route.py): a hub admin sees every user,
anyone else their own rows, and asking for someone else's is one line saying who may. The ledger is
SQLite here (the same SQLAlchemy Core code as PostgreSQL, which tests/cost/test_team_ledger.py and
the JupyterHub test use). Whether a kernel's user is a hub admin is asked of the hub's REST API; a
fake of that one route (``GET /hub/api/user``) stands in for the hub here, the real hub is in
tests/hub."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from gpugeek_jupyter import config, runtime
from gpugeek_jupyter.cost.team import POOLS, TeamLedger, Viewer, kernel_viewer, team_report, viewer_from_hub_model
from gpugeek_jupyter.errors import NotAllowedError, NotFoundError, SpecError, Surface
from gpugeek_jupyter.magics.cost import CostMagics

NOW = time.time()
SINCE = NOW - 3 * 3600


@pytest.fixture
def ledger(tmp_path: Any) -> Iterator[TeamLedger]:
    """A team ledger with ada's two H100 hours ($8) and bob's cpu hour ($0.25), an hour ago."""
    url = f"sqlite:///{tmp_path / 'team.sqlite'}"
    config.set_config(config.GpugeekConfig(team_ledger_url=url))
    runtime.reset_pool_manager()
    ledger = TeamLedger(url)
    from sqlalchemy import insert

    rows = [("ada", "H100-80GB", 2, 4.0), ("bob", "cpu", 0, 0.25)]
    with ledger.engine.begin() as db:
        for n, (user, gpu_type, gpus, rate) in enumerate(rows):
            db.execute(
                insert(POOLS).values(
                    pool_key=f"host:/home/{user}/gpugeek.sqlite:{n}", user_name=user, host="host", pool_name="p",
                    backend="local", gpu_type=gpu_type, gpus=gpus, workers=max(gpus, 1), usd_per_hour=rate,
                    started_at=NOW - 2 * 3600, ended_at=NOW - 3600,
                )
            )  # fmt: skip
    yield ledger
    ledger.engine.dispose()
    runtime.reset_pool_manager()
    config.set_config(None)


def _summary(rows: list[dict[str, Any]]) -> list[tuple[str, str, int, float, float]]:
    return [(r["user"], r["gpu_type"], r["pools"], round(r["gpu_hours"], 6), round(r["usd"], 6)) for r in rows]


def test_an_admin_sees_every_user_and_anyone_else_their_own_rows(ledger: TeamLedger) -> None:
    admin, bob = Viewer("root", admin=True), Viewer("bob", admin=False)
    assert _summary(team_report(since=SINCE, viewer=admin)) == [
        ("ada", "H100-80GB", 1, 2.0, 4.0),
        ("bob", "cpu", 1, 0.0, 0.25),
    ]
    assert _summary(team_report(since=SINCE, viewer=bob)) == [("bob", "cpu", 1, 0.0, 0.25)]
    assert _summary(team_report(since=SINCE, user="ada", viewer=admin)) == [("ada", "H100-80GB", 1, 2.0, 4.0)]
    assert team_report(since=NOW - 1800, viewer=admin) == []  # both ended an hour ago
    half = team_report(since=SINCE, until=NOW - 1.5 * 3600, viewer=admin)
    assert [round(r["usd"], 6) for r in half] == [2.0, 0.125]


def test_someone_elses_rows_are_refused_naming_who_may_see_them_on_each_surface(ledger: TeamLedger) -> None:
    with pytest.raises(NotAllowedError) as caught:
        team_report(since=SINCE, user="ada", viewer=Viewer("bob", admin=False))
    error = caught.value
    assert (
        str(error) == "user='ada': only a hub admin sees another user's spend; 'bob' sees their own (e.g. user='bob')"
    )
    assert error.phrase(Surface.MAGIC).startswith("--user ada: only a hub admin")
    assert error.phrase(Surface.SERVER).startswith('"user": "ada": only a hub admin')
    assert error.http_status == 403


def test_a_bad_date_names_its_keyword_and_no_ledger_says_which_setting(ledger: TeamLedger) -> None:
    admin = Viewer("root", admin=True)
    with pytest.raises(SpecError, match=r"^since 'May 1' is not a date \(e.g. since='2026-11-01' or "):
        team_report(since="May 1", viewer=admin)
    with pytest.raises(SpecError, match=r"^until must be .*, got 'tomorrow' \(e.g. until='2026-11-01'\)$"):
        team_report(until="tomorrow", viewer=admin)
    config.set_config(config.GpugeekConfig())
    with pytest.raises(NotFoundError, match=r"no team ledger is configured.*GpugeekConfig.team_ledger_url") as caught:
        team_report(viewer=admin)
    assert caught.value.http_status == 404


def test_the_hubs_admin_flag_or_its_unfiltered_admin_users_scope_make_an_admin() -> None:
    assert viewer_from_hub_model({"name": "ada", "admin": True, "scopes": []}) == Viewer("ada", True)
    assert viewer_from_hub_model({"name": "svc", "kind": "service", "scopes": ["admin:users"]}) == Viewer("svc", True)
    assert viewer_from_hub_model({"name": "bob", "admin": False, "scopes": ["admin:users!user=bob"]}) == Viewer(
        "bob", False
    )


class FakeHubApi(BaseHTTPRequestHandler):
    """A fake of the hub's ``GET /hub/api/user`` (who a token is): the real hub is in tests/hub."""

    models: dict[str, dict[str, Any]] = {}

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        token = self.headers.get("Authorization", "").removeprefix("token ")
        model = self.models.get(token) if self.path == "/hub/api/user" else None
        self.send_response(200 if model else 403)
        self.end_headers()
        self.wfile.write(json.dumps(model or {"message": "forbidden"}).encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hub_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    FakeHubApi.models = {
        "ada-token": {"name": "ada", "admin": True, "scopes": ["read:users:name!user=ada"]},
        "bob-token": {"name": "bob", "admin": False, "scopes": ["read:users:name!user=bob"]},
    }
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHubApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("JUPYTERHUB_API_URL", f"http://127.0.0.1:{server.server_address[1]}/hub/api")
    yield "ok"
    server.shutdown()
    server.server_close()
    thread.join()


def test_a_kernel_asks_the_hub_whether_its_user_is_an_admin(hub_api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "ada-token")
    assert kernel_viewer() == Viewer("ada", True)
    monkeypatch.setenv("JUPYTERHUB_USER", "bob")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "bob-token")
    assert kernel_viewer() == Viewer("bob", False)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "a-token-the-hub-refuses")
    assert kernel_viewer() == Viewer("bob", False)  # a hub that does not say: no admin
    monkeypatch.delenv("JUPYTERHUB_USER")
    assert kernel_viewer().admin  # outside a hub: whoever holds the ledger's URL


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    ip = InteractiveShell.instance()
    ip.register_magics(CostMagics)
    yield ip
    ip.user_ns.pop("team", None)


def _date(moment: float) -> str:
    return dt.datetime.fromtimestamp(moment).isoformat(timespec="seconds")


def test_gpugeek_cost_team_shows_an_admin_every_user_and_a_user_their_own(
    ledger: TeamLedger, hub_api: str, shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "ada-token")
    since = _date(SINCE)
    shell.run_line_magic("gpugeek_cost", f"--team --since {since} -o team")
    frame = shell.user_ns["team"]
    assert list(frame["user"]) == ["ada", "bob"] and list(frame["usd"].round(6)) == [4.0, 0.25]
    out = capsys.readouterr().out
    assert f"team: USD 4.25 from {since} to now, 2 users" in out
    monkeypatch.setenv("JUPYTERHUB_USER", "bob")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "bob-token")
    shell.run_line_magic("gpugeek_cost", f"--team --since {since} -o team")
    assert list(shell.user_ns["team"]["user"]) == ["bob"]
    assert f"bob (hub admins see every user): USD 0.25 from {since} to now, 1 user" in capsys.readouterr().out
    with pytest.raises(UsageError, match=r"^--user ada: only a hub admin sees another user's spend; 'bob' sees"):
        shell.run_line_magic("gpugeek_cost", "--team --user ada")
    with pytest.raises(UsageError, match=r"^--since 'May 1' is not a date \(e.g. --since 2026-11-01 or "):
        shell.run_line_magic("gpugeek_cost", "--team --since 'May 1'")


def test_gpugeek_cost_team_takes_no_pool_and_its_options_need_it(ledger: TeamLedger, shell: InteractiveShell) -> None:
    with pytest.raises(UsageError, match=r"^--team reports the whole team's spend, so it takes no --all \(e.g."):
        shell.run_line_magic("gpugeek_cost", "--team --all")
    with pytest.raises(
        UsageError, match=r"^--until goes with --team \(e.g. %gpugeek_cost --team --until 2026-11-30\)$"
    ):
        shell.run_line_magic("gpugeek_cost", "--all --until 2026-11-30")


def _open(ledger: TeamLedger, n: int, user: str, rate: float, groups: tuple[str, ...], gpus: int = 1) -> None:
    report = {
        "key": f"host:/home/{user}/gpugeek.sqlite:{n}", "host": "host", "pool_name": f"{user}-{n}",
        "backend": "local", "gpu_type": "A10G", "gpus": gpus, "workers": gpus, "usd_per_hour": rate,
        "started_at": NOW - 2 * 3600,
    }  # fmt: skip
    ledger.open_row(user, report, groups)
    ledger.record_end(str(report["key"]), NOW - 3600)


def test_the_report_per_group_shares_a_pool_among_its_users_groups_and_per_pool_lists_each(tmp_path: Any) -> None:
    ledger = TeamLedger(f"sqlite:///{tmp_path / 'team.sqlite'}")
    config.set_config(config.GpugeekConfig(team_ledger_url=ledger.url))
    try:
        _open(ledger, 1, "ada", 6.0, ("ml", "research"))  # $6 shared: $3 to each group
        _open(ledger, 2, "bob", 2.0, ("ml",))
        _open(ledger, 3, "carol", 1.0, ())
        admin = Viewer("root", admin=True)
        by_group = team_report(since=SINCE, by="group", viewer=admin)
        assert [
            (r["group"], r["users"], r["pools"], round(r["usd"], 6), round(r["gpu_hours"], 6)) for r in by_group
        ] == [
            ("ml", 2, 2, 5.0, 1.5),
            ("research", 1, 1, 3.0, 0.5),
            ("", 1, 1, 1.0, 1.0),
        ]
        assert round(sum(r["usd"] for r in by_group), 6) == 9.0  # the groups add up to the team's spend
        by_pool = team_report(since=SINCE, by="pool", viewer=admin)
        assert [(r["user"], r["pool"], r["backend"], round(r["usd"], 6)) for r in by_pool] == [
            ("ada", "ada-1", "local", 6.0),
            ("bob", "bob-2", "local", 2.0),
            ("carol", "carol-3", "local", 1.0),
        ]
        assert by_pool[0]["ended_at"] == pytest.approx(NOW - 3600)
        assert [r["group"] for r in team_report(since=SINCE, by="group", viewer=Viewer("bob", admin=False))] == ["ml"]
        with pytest.raises(SpecError) as caught:
            team_report(by="team", viewer=admin)
        assert str(caught.value) == "by must be one of user, group, pool, got 'team' (e.g. by='group')"
        assert (
            caught.value.phrase(Surface.MAGIC) == "--by must be one of user, group, pool, got 'team' (e.g. --by group)"
        )
    finally:
        ledger.engine.dispose()
        config.set_config(None)


def test_gpugeek_cost_team_by_group_and_by_pool(tmp_path: Any, shell: InteractiveShell, capsys: Any) -> None:
    ledger = TeamLedger(f"sqlite:///{tmp_path / 'team.sqlite'}")
    config.set_config(config.GpugeekConfig(team_ledger_url=ledger.url))
    try:
        _open(ledger, 1, "ada", 6.0, ("ml", "research"))
        _open(ledger, 2, "carol", 1.0, ())
        since = _date(SINCE)
        shell.run_line_magic("gpugeek_cost", f"--team --by group --since {since} -o team")
        assert list(shell.user_ns["team"]["group"]) == ["ml", "research", ""]
        out = capsys.readouterr().out
        assert "(no group)" in out and f"team: USD 7.00 from {since} to now, 3 groups" in out
        shell.run_line_magic("gpugeek_cost", f"--team --by pool --since {since} -o team")
        assert list(shell.user_ns["team"]["pool"]) == ["ada-1", "carol-2"]
        assert f"team: USD 7.00 from {since} to now, 2 pools" in capsys.readouterr().out
        with pytest.raises(
            UsageError, match=r"^--by must be one of user, group, pool, got 'teams' \(e.g. --by group\)$"
        ):
            shell.run_line_magic("gpugeek_cost", "--team --by teams")
        with pytest.raises(UsageError, match=r"^--by goes with --team \(e.g. %gpugeek_cost --team --by group\)$"):
            shell.run_line_magic("gpugeek_cost", "--all --by group")
    finally:
        ledger.engine.dispose()
        config.set_config(None)
