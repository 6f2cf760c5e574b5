"""GET /gpugeek/pools stays bounded: live and recent pools by default, history in pages, reads never write."""

from __future__ import annotations

import itertools
import sqlite3
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpugeek_jupyter.config import GpugeekConfig
from gpugeek_jupyter.pricing import prices_in_force
from gpugeek_jupyter.server import service as service_module
from gpugeek_jupyter.server.service import GpugeekService
from gpugeek_jupyter.spec import PoolSpec
from gpugeek_jupyter.store import PoolStatus, Registry, get_registry

from .conftest import Fetch

HOUR = 3600.0


def add_pool(name: str, at: float | None = None, namespace: str | None = None, registry: Registry | None = None) -> int:
    """A ready cpu pool registered at ``at`` (default now) by this live process."""
    when = time.time() if at is None else at
    registry = registry or Registry(get_registry().path, clock=lambda: when)
    spec = PoolSpec.create(gpu_type="cpu", count=1, backend="local", name=name)
    record = registry.add_pool(
        spec.name, spec.backend, spec.to_dict(), prices_in_force(spec), owner="kernel 1", namespace=namespace
    )
    registry.open_worker_interval(record.id, "0", "on_demand")
    registry.set_pool_status(record.id, PoolStatus.READY, scheduler_address="tcp://127.0.0.1:9")
    return record.id


def ended_pool(name: str, hours_ago: float, namespace: str | None = None) -> int:
    """A pool that stopped ``hours_ago`` hours ago, after running for a minute."""
    end = time.time() - hours_ago * HOUR
    pool = add_pool(name, at=end - 60, namespace=namespace)
    Registry(get_registry().path, clock=lambda: end).set_pool_status(pool, PoolStatus.STOPPED, reason="done")
    return pool


async def test_the_default_answer_is_live_pools_and_those_that_ended_within_a_day(api: Fetch) -> None:
    ended_pool("last-week", hours_ago=7 * 24)
    ended_pool("this-morning", hours_ago=3)
    add_pool("running")
    status, body = await api("GET", "pools")
    assert status == 200 and set(body) == {"pools"}  # the panel's shape, unchanged
    assert [(p["name"], p["status"]) for p in body["pools"]] == [("this-morning", "stopped"), ("running", "ready")]


async def test_the_default_answer_shows_only_the_last_ended_pools_beyond_its_limit(
    api: Fetch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service_module, "RECENT_ENDED_LIMIT", 2)
    for i in range(5):
        ended_pool(f"run-{i}", hours_ago=5 - i)
    add_pool("running")
    _, body = await api("GET", "pools")
    assert [p["name"] for p in body["pools"]] == ["run-3", "run-4", "running"]


async def test_ended_pools_are_paged_newest_first_with_a_next_cursor(api: Fetch) -> None:
    ids = [ended_pool("dev" if i % 2 else f"run-{i}", hours_ago=48 - i) for i in range(5)]  # "dev" twice
    add_pool("running")
    pages, before = [], None
    while True:
        params = {"state": "ended", "limit": "2", **({"before": str(before)} if before else {})}
        status, body = await api("GET", "pools", params=params)
        assert status == 200
        pages.append([p["name"] for p in body["pools"]])
        before = body["next"]
        if before is None:
            break
    assert pages == [["run-4", "dev"], ["run-2", "dev"], ["run-0"]]  # every record, a name's old ones too
    assert len(ids) == sum(len(page) for page in pages)


async def test_ended_pools_say_when_they_ended_and_live_ones_do_not(api: Fetch) -> None:
    """The panel's Recent and history rows show when each pool ended."""
    end = time.time() - 3 * HOUR
    ended_pool("this-morning", hours_ago=3)
    add_pool("running")
    _, recent = await api("GET", "pools")
    _, history = await api("GET", "pools", params={"state": "ended"})
    ended_at = {p["name"]: p["ended_at"] for p in recent["pools"]}
    assert ended_at["running"] is None
    assert abs(datetime.fromisoformat(ended_at["this-morning"]).timestamp() - end) < 5
    assert history["pools"][0]["ended_at"] == ended_at["this-morning"]


async def test_history_pages_filter_by_namespace(api: Fetch) -> None:
    ended_pool("a-run", hours_ago=30, namespace="team-a")
    ended_pool("b-run", hours_ago=30, namespace="team-b")
    _, body = await api("GET", "pools", params={"state": "ended", "namespace": "team-b"})
    assert ([p["name"] for p in body["pools"]], body["next"]) == (["b-run"], None)


async def test_state_live_lists_only_live_pools(api: Fetch) -> None:
    ended_pool("this-morning", hours_ago=3)
    add_pool("running")
    status, body = await api("GET", "pools", params={"state": "live"})
    assert (status, [p["name"] for p in body["pools"]]) == (200, ["running"])


BAD_PARAMETERS = [
    ({"state": "bogus"}, "state", '"bogus"'),
    ({"state": "x" * 200}, "state", '"xxx'),
    ({"state": "ended", "before": "abc"}, "before", '"abc"'),
    ({"state": "ended", "before": "0"}, "before", '"0"'),
    ({"state": "ended", "before": "-3"}, "before", '"-3"'),
    ({"state": "ended", "before": "99999999999999999999"}, "before", '"99999999999999999999"'),
    ({"state": "ended", "limit": "0"}, "limit", '"0"'),
    ({"state": "ended", "limit": "501"}, "limit", '"501"'),
    ({"state": "ended", "limit": "2.5"}, "limit", '"2.5"'),
    ({"before": "10"}, "before", "state=ended"),
    ({"state": "live", "limit": "10"}, "limit", '"live"'),
    ({"stat": "ended"}, "stat", '"stat"'),
]


@pytest.mark.parametrize(("params", "field", "quoted"), BAD_PARAMETERS, ids=[str(p[0])[:40] for p in BAD_PARAMETERS])
async def test_bad_listing_parameters_are_400_naming_the_parameter_with_an_example(
    api: Fetch, params: dict[str, str], field: str, quoted: str
) -> None:
    status, body = await api("GET", "pools", params=params)
    assert (status, body["field"]) == (400, field)
    message = body["message"]
    assert "\n" not in message and len(message) < 300
    assert quoted in message and "e.g. ?state=" in message  # values as JSON writes them, as every REST error


async def test_jupyterlabs_cache_busting_bare_timestamp_is_ignored(api: Fetch) -> None:
    """JupyterLab's ServerConnection appends ``?<timestamp>`` (a key without a value) to GETs."""
    registered_ended = await api("GET", "pools")
    busted = await api("GET", "pools", params={"1796165542761": ""})
    assert busted == registered_ended and busted[0] == 200


async def test_polling_writes_nothing_while_every_owner_heart_beats(api: Fetch, isolated_registry: Path) -> None:
    add_pool("running")
    ended_pool("this-morning", hours_ago=3)
    watcher = sqlite3.connect(isolated_registry)
    before = watcher.execute("PRAGMA data_version").fetchone()[0]
    for _ in range(3):
        status, body = await api("GET", "pools")
        assert status == 200 and len(body["pools"]) == 2
    assert watcher.execute("PRAGMA data_version").fetchone()[0] == before


# -- the service, without HTTP ------------------------------------------------------------------
def bare_service(registry: Registry, heartbeat_seconds: float = 2.0) -> GpugeekService:
    """The service over ``registry``; listing needs no pool manager beyond its registry."""
    config = GpugeekConfig(heartbeat_seconds=heartbeat_seconds, lost_after_seconds=15.0)
    manager: Any = SimpleNamespace(registry=registry, owner="server")
    return GpugeekService(manager, config)


def test_the_service_sweeps_for_lost_pools_at_most_once_per_heartbeat_period(
    isolated_registry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = Registry(isolated_registry)
    sweeps: list[float] = []
    sweep = registry.mark_lost_pools
    monkeypatch.setattr(registry, "mark_lost_pools", lambda after: sweeps.append(time.monotonic()) or sweep(after))
    service = bare_service(registry, heartbeat_seconds=0.5)
    deadline = time.monotonic() + 10
    while len(sweeps) < 3 and time.monotonic() < deadline:
        service.list_pools()
        service.list_pools(state="live")
    assert len(sweeps) == 3
    # the times are taken as each sweep starts, a moment after the service decided it (a busy machine
    # can stretch that moment by milliseconds either way)
    assert all(later - earlier >= 0.45 for earlier, later in itertools.pairwise(sweeps)), sweeps


def test_an_ended_pools_cost_is_computed_once_until_its_data_volumes_change(
    isolated_registry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = Registry(isolated_registry)
    ended = ended_pool("this-morning", hours_ago=3)
    add_pool("running")
    priced: list[str] = []
    pool_cost = service_module.pool_cost
    monkeypatch.setattr(
        service_module, "pool_cost", lambda r, record, *a: priced.append(record.name) or pool_cost(r, record, *a)
    )
    service = bare_service(registry)
    first = service.list_pools()
    again = service.list_pools()
    assert priced == ["this-morning", "running", "running"]  # the live pool on every poll
    assert again["pools"][0] == first["pools"][0]
    registry.add_data_volume(ended, storage_gb=5000.0, source="stated")
    third = service.list_pools()
    assert priced[3:] == ["this-morning", "running"]
    assert third["pools"][0]["usd_so_far"] > first["pools"][0]["usd_so_far"]


async def test_the_jobs_listing_takes_a_limit_as_the_magic_and_the_python_api_do(api: Fetch) -> None:
    registry = get_registry()
    pool_id = add_pool("busy")
    now = [1000.0]
    timed = Registry(registry.path, clock=lambda: now[0])
    for index in range(60):
        now[0] += 1
        timed.add_job(f"job-{index:02d}", pool_id, "busy", "cell", code_sha256="0" * 64, ranks=1)
    status, body = await api("GET", "jobs")
    assert status == 200 and len(body["jobs"]) == 50  # the same default as jobs() and %gpugeek_jobs
    assert body["jobs"][0]["id"] == "job-59"  # newest first
    status, body = await api("GET", "jobs", params={"pool": "busy", "limit": "5"})
    assert [j["id"] for j in body["jobs"]] == ["job-59", "job-58", "job-57", "job-56", "job-55"]
    for bad, quoted in (("0", '"0"'), ("x", '"x"'), ("501", '"501"')):
        status, body = await api("GET", "jobs", params={"limit": bad})
        assert (status, body["field"]) == (400, "limit")
        assert body["message"] == f'"limit" must be a whole number from 1 to 500, got {quoted} (e.g. ?limit=50)'
    status, body = await api("GET", "jobs", params={"limt": "5"})
    assert (status, body["field"]) == (400, "limt") and "known: pool, limit" in body["message"]
