"""``GET /gpugeek/team``: the team ledger's spend per user and GPU type, through a real Jupyter server.
Outside a hub, whoever holds the server's token sees every row; under JupyterHub the caller's hub
identity decides (``team_viewer``; the real hub with two users is tests/hub/test_team_on_jupyterhub.py).
Bad query values are one 400 line in JSON terms."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from gpugeek_jupyter.cost.team import POOLS, TeamLedger, Viewer
from gpugeek_jupyter.server.handlers import team_viewer
from server.conftest import Fetch

NOW = time.time()


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'team.sqlite'}"
    ledger = TeamLedger(url)
    from sqlalchemy import insert

    with ledger.engine.begin() as db:
        for n, (user, rate) in enumerate([("ada", 4.0), ("bob", 0.25)]):
            db.execute(
                insert(POOLS).values(
                    pool_key=f"host:/r:{n}", user_name=user, host="host", pool_name="p", backend="local",
                    gpu_type="cpu", gpus=0, workers=1, usd_per_hour=rate, started_at=NOW - 7200, ended_at=NOW - 3600,
                )
            )  # fmt: skip
    ledger.engine.dispose()
    return url


@pytest.fixture
def jp_server_config(ledger_url: str) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"gpugeek_jupyter": True}},
        "GpugeekConfig": {"team_ledger_url": ledger_url},
    }


async def test_the_team_route_answers_the_spend_per_user_and_one_users_rows(api: Fetch) -> None:
    since = str(NOW - 3 * 3600)
    status, body = await api("GET", "team", params={"since": since})
    assert status == 200, body
    assert body["admin"] is True
    assert [(r["user"], round(r["usd"], 6)) for r in body["rows"]] == [("ada", 4.0), ("bob", 0.25)]
    assert round(body["total_usd"], 6) == 4.25
    status, body = await api("GET", "team", params={"since": since, "user": "bob"})
    assert status == 200 and [r["user"] for r in body["rows"]] == ["bob"], body
    status, body = await api("GET", "team", params={"since": since, "by": "pool"})
    assert status == 200 and body["by"] == "pool", body
    assert [(r["user"], r["pool"], r["host"]) for r in body["rows"]] == [("ada", "p", "host"), ("bob", "p", "host")]
    status, body = await api("GET", "team", params={"since": since, "by": "group"})
    assert [(r["group"], r["users"], round(r["usd"], 6)) for r in body["rows"]] == [("", 2, 4.25)], body


async def test_bad_query_values_are_one_line_in_json_terms(api: Fetch) -> None:
    status, body = await api("GET", "team", params={"since": "May 1"})
    assert (status, body["field"]) == (400, "since"), body
    assert body["message"].startswith('"since" "May 1" is not a date (e.g. "since": "2026-11-01"')
    status, body = await api("GET", "team", params={"until": "later"})
    assert status == 400 and body["message"].startswith('"until" must be an ISO date or date-time'), body
    status, body = await api("GET", "team", params={"by": "team"})
    assert (status, body["field"]) == (400, "by"), body
    assert body["message"] == '"by" must be one of user, group, pool, got "team" (e.g. "by": "group")'
    status, body = await api("GET", "team", params={"who": "ada"})
    assert status == 400 and body["message"].startswith('unknown query parameter "who" for GET /gpugeek/team'), body


class FakeHubUser:
    """A fake of jupyterhub.singleuser's JupyterHubUser: the hub's model of the caller as ``hub_user``."""

    def __init__(self, model: dict[str, Any]) -> None:
        self.hub_user = model


def test_under_a_hub_the_callers_hub_identity_decides_whose_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    assert team_viewer(FakeHubUser({"name": "bob", "admin": False, "scopes": []})) == Viewer("bob", False)
    assert team_viewer(FakeHubUser({"name": "ada", "admin": True, "scopes": []})) == Viewer("ada", True)
    svc = FakeHubUser({"name": "report", "kind": "service", "scopes": ["admin:users", "access:servers"]})
    assert team_viewer(svc) == Viewer("report", True)
    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    assert team_viewer(object()) == Viewer("ada", True)  # a plain Jupyter server's user: its owner
