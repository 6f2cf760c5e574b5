"""POST /gpugeek/pools past a quota is refused with 403 before anything starts, the line phrased in
JSON fields."""

from __future__ import annotations

from typing import Any

import pytest

from server.conftest import Fetch


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"gpugeek_jupyter": True}},
        "GpugeekConfig": {"quota_max_workers": 1, "quota_backends": ["local"]},
    }


async def test_a_launch_past_the_worker_quota_is_403_naming_the_limit_in_json_fields(
    api: Fetch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    status, body = await api("POST", "pools", body={"gpu_type": "cpu", "count": 2, "backend": "local", "name": "big"})
    assert status == 403, body
    assert body["message"] == (
        '"count": 2 would give "ada" 2 workers at once, past the quota of 1 (GpugeekConfig.quota_max_workers; '
        "0 held now); stop one of your pools or ask your admin"
    )
    status, body = await api("GET", "pools")
    assert status == 200 and body["pools"] == []  # nothing was registered


async def test_a_backend_outside_the_quota_is_403_naming_the_field(api: Fetch) -> None:
    status, body = await api(
        "POST", "pools", body={"gpu_type": "cpu", "count": 1, "backend": "address", "address": "tcp://127.0.0.1:9"}
    )
    assert status == 403 and body.get("field") == "backend", body
    assert 'may launch on local only, not "backend": "address"' in body["message"]


async def test_the_quota_route_says_the_limits_and_what_counts_against_them(
    api: Fetch, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugeek_jupyter.store import PoolStatus, get_registry

    from .test_routes import registered_pool

    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    held = registered_pool("held")  # a live pool of 2 cpu workers in this user's registry
    status, body = await api("GET", "quota")
    assert status == 200, body
    assert (body["user"], body["limited"], body["from"]) == ("ada", True, "settings")
    assert body["quota"]["max_workers"] == 1 and body["quota"]["backends"] == ["local"]
    assert body["usage"]["workers"] == 2 and body["usage"]["gpus"] == 0
    assert body["team_budget_usd_per_month"] == 0.0  # no team ledger: no budget
    get_registry().set_pool_status(held.id, PoolStatus.STOPPED)
    _, after = await api("GET", "quota")
    assert after["usage"]["workers"] == 0
