"""The team's ledger service and a user's side of it, in one process: the service's real tornado
app on loopback over an SQLite ledger, and ServiceLedger, the user's client, with its outbox in a
real registry. Who a token is comes from a fake of HubAuth (the hub's ``user_for_token``); the real
JupyterHub, with the service managed by it and PostgreSQL, is tests/hub/test_team_on_jupyterhub.py.

A user writes their own rows only, whatever the report says; a report the service does not take
waits in the user's registry, in order and bounded, and arrives once it answers."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tornado")

from gpugeek_jupyter.cost.team import POOLS, TeamLedger  # noqa: E402
from gpugeek_jupyter.cost.team_service import ServiceLedger, ServiceUnavailable  # noqa: E402
from gpugeek_jupyter.hub.ledger_service import make_app  # noqa: E402
from gpugeek_jupyter.spec import PoolSpec  # noqa: E402
from gpugeek_jupyter.store import Registry  # noqa: E402

PREFIX = "/services/gpugeek-ledger/"


class FakeHubAuth:
    """A fake of jupyterhub.services.auth.HubAuth: ``user_for_token`` from a table of tokens."""

    models = {
        "alice-token": {"kind": "user", "name": "alice", "admin": False, "scopes": []},
        "bob-token": {"kind": "user", "name": "bob", "admin": False, "scopes": [], "groups": ["small"]},
        "root-token": {"kind": "user", "name": "root", "admin": True, "scopes": []},
        "svc-token": {"kind": "service", "name": "idle-culler", "scopes": ["list:users"]},
    }

    async def user_for_token(self, token: str, sync: bool = True) -> dict[str, Any] | None:
        return self.models.get(token)


class Service:
    """The service's app served on a loopback port by its own event loop thread; stop() and
    start() again on the same port (a service that goes down and comes back)."""

    def __init__(self, ledger: TeamLedger, config: Any = None) -> None:
        self.ledger = ledger
        self.config = config
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}{PREFIX}"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            server = make_app(self.ledger, FakeHubAuth(), PREFIX, self.config).listen(self.port, "127.0.0.1")
            ready.set()
            loop.run_forever()
            server.stop()
            loop.run_until_complete(server.close_all_connections())
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert ready.wait(10)

    def stop(self) -> None:
        assert self._loop is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = self._thread = None


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[TeamLedger]:
    ledger = TeamLedger(f"sqlite:///{tmp_path / 'team.sqlite'}")
    yield ledger
    ledger.engine.dispose()


@pytest.fixture
def service(ledger: TeamLedger) -> Iterator[Service]:
    service = Service(ledger)
    service.start()
    yield service
    if service._loop is not None:
        service.stop()


def _pool(registry: Registry, name: str) -> Any:
    spec = PoolSpec.create(gpu_type="cpu", count=2, name=name)
    return registry.add_pool(name, "local", spec.to_dict(), {}, owner="pid 1"), spec


def test_a_user_writes_their_own_rows_only_and_reads_their_usage(service: Service, tmp_path: Path) -> None:
    alice_registry, bob_registry = Registry(tmp_path / "alice.sqlite"), Registry(tmp_path / "bob.sqlite")
    alice = ServiceLedger(service.url, alice_registry, token="alice-token")
    bob = ServiceLedger(service.url, bob_registry, token="bob-token")
    record, spec = _pool(alice_registry, "alices")
    key = f"host:{alice_registry.path}:{record.id}"
    alice.record_start(key, "whoever the client says", record, spec, usd_per_hour=3600.0)
    [row] = service.ledger.open_pools("alice")  # the service named the user, not the client
    assert (row.pool_key, row.pool_name, row.workers) == (key, "alices", 2)
    alice.record_start(key, "alice", record, spec, usd_per_hour=3600.0)  # a resend changes nothing
    assert len(service.ledger.open_pools("alice")) == 1

    bob.record_end(key)  # bob closing alice's pool: refused and dropped, not queued
    assert service.ledger.open_pools("alice") != [] and bob_registry.team_reports() == []
    opening = {"op": "open", "key": key, "host": "h", "pool_name": "x", "backend": "local", "gpu_type": "cpu"}
    bob.send({**opening, "gpus": 0, "workers": 1, "usd_per_hour": 0.0, "started_at": time.time()})
    assert service.ledger.owner_of(key) == "alice" and service.ledger.open_pools("bob") == []

    held = alice.holdings("alice", time.time())
    assert [(r.pool_key, r.workers) for r in held.open_rows] == [(key, 2)] and held.user_usd_today > 0
    assert held.team_usd_month >= held.user_usd_month >= held.user_usd_today
    assert bob.holdings("bob", time.time()).open_rows == []
    alice.record_end(key)
    assert service.ledger.open_pools("alice") == []


def test_the_report_is_every_users_for_a_hub_admin_and_the_callers_own_otherwise(
    service: Service, tmp_path: Path
) -> None:
    for user in ("alice", "bob"):
        registry = Registry(tmp_path / f"{user}.sqlite")
        record, spec = _pool(registry, f"{user}s")
        ServiceLedger(service.url, registry, token=f"{user}-token").record_start(
            f"host:{registry.path}:{record.id}", user, record, spec, 1.0
        )
    as_root = ServiceLedger(service.url, Registry(tmp_path / "root.sqlite"), token="root-token")
    as_bob = ServiceLedger(service.url, Registry(tmp_path / "bob.sqlite"), token="bob-token")
    assert sorted(r["user"] for r in as_root.report(0.0)) == ["alice", "bob"]
    assert [r["user"] for r in as_bob.report(0.0)] == ["bob"]
    # the service put each pool in its user's hub groups as the hub said them (bob: "small")
    assert sorted((r["group"], r["users"]) for r in as_root.report(0.0, by="group")) == [("", 1), ("small", 1)]
    assert sorted(r["pool"] for r in as_root.report(0.0, by="pool")) == ["alices", "bobs"]
    with pytest.raises(Exception, match=r"\?by= must be one of user, group, pool, got 'team' \(e.g. \?by=group\)"):
        as_root.report(0.0, by="team")
    with pytest.raises(Exception, match=r"only a hub admin sees another user's spend, not 'bob'"):
        as_bob.report(0.0, user="alice")
    assert as_bob.spend(0.0) > 0  # the team's total: what the budget check reads
    culler = ServiceLedger(service.url, Registry(tmp_path / "c.sqlite"), token="svc-token")
    with pytest.raises(Exception, match=r"'idle-culler' is a hub service without admin:users, not a user"):
        culler.report(0.0)
    stranger = ServiceLedger(service.url, Registry(tmp_path / "s.sqlite"), token="made-up")
    with pytest.raises(Exception, match=r"the hub does not know this token"):
        stranger.spend(0.0)


def test_reports_made_while_the_service_is_down_wait_in_the_registry_and_arrive_in_order(
    service: Service, tmp_path: Path
) -> None:
    registry = Registry(tmp_path / "alice.sqlite")
    alice = ServiceLedger(service.url, registry, token="alice-token")
    record, spec = _pool(registry, "mid")
    key = f"host:{registry.path}:{record.id}"
    service.stop()
    alice.record_start(key, "alice", record, spec, 1.0)
    alice.record_end(key, ended_at=time.time())
    assert [r["op"] for _, r in registry.team_reports()] == ["open", "close"]  # nothing lost, in order
    with pytest.raises(ServiceUnavailable):
        alice.holdings("alice", time.time())
    service.start()
    alice._failed_at = 0.0  # no waiting out the retry pause in a test
    assert alice.flush() == 0 and registry.team_reports() == []
    [row] = [r for r in _rows(service.ledger) if r.pool_key == key]
    assert row.user_name == "alice" and row.ended_at is not None  # opened, then closed


def test_the_outbox_is_bounded_dropping_the_oldest(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "r.sqlite")
    for n in range(5):
        registry.queue_team_report({"op": "close", "key": f"k{n}", "ended_at": 1.0}, limit=3)
    assert [r["key"] for _, r in registry.team_reports()] == ["k2", "k3", "k4"]


def _rows(ledger: TeamLedger) -> list[Any]:
    from sqlalchemy import select

    with ledger.engine.connect() as db:
        return list(db.execute(select(POOLS)))


def test_the_services_quotas_count_not_the_users_own_settings(
    ledger: TeamLedger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The admin's quotas live in the service's settings; the user's process has looser ones (its own
    config), which do not count while the service answers, and do when it does not."""
    from types import SimpleNamespace

    from gpugeek_jupyter.config import GpugeekConfig
    from gpugeek_jupyter.cost.team import _admit_by_service
    from gpugeek_jupyter.cost.team_rows import pool_key
    from gpugeek_jupyter.errors import QuotaExceededError
    from gpugeek_jupyter.store import PoolStatus

    admins = GpugeekConfig(
        quota_max_workers=2, group_quotas={"small": {"max_workers": 1}}, team_budget_usd_per_month=50.0
    )
    users_own = GpugeekConfig(quota_max_workers=100)  # what a user's ~/.jupyter could say
    service = Service(ledger, config=admins)
    service.start()
    try:
        registry = Registry(tmp_path / "alice.sqlite")
        alice = ServiceLedger(service.url, registry, token="alice-token")
        manager = SimpleNamespace(registry=registry)  # what the admission check reads of the manager
        record, spec = _pool(registry, "first")
        registry.set_pool_status(record.id, PoolStatus.READY)
        alice.record_start(pool_key(registry, record.id), "alice", record, spec, 1.0)  # 2 workers held
        one_more = PoolSpec.create(gpu_type="cpu", count=1, name="second")
        with pytest.raises(
            QuotaExceededError, match=r"past the quota of 2 \(GpugeekConfig\.quota_max_workers; 2 held now\)"
        ):
            _admit_by_service(manager, one_more, "alice", alice, users_own)
        assert alice.limits() == (
            {
                "max_gpus": 0,
                "max_workers": 2,
                "backends": [],
                "gpu_types": [],
                "usd_per_day": 0.0,
                "usd_per_month": 0.0,
                "sources": {},
            },
            50.0,
        )
        # bob's hub group "small" gives him one worker, from the service's group_quotas
        bob = ServiceLedger(service.url, Registry(tmp_path / "bob.sqlite"), token="bob-token")
        two = PoolSpec.create(gpu_type="cpu", count=2, name="bobs")
        with pytest.raises(QuotaExceededError, match=r"group_quotas\['small'\]\['max_workers'\]"):
            _admit_by_service(SimpleNamespace(registry=bob.registry), two, "bob", bob, users_own)
    finally:
        service.stop()
    # the service down: the user's process counts its own settings and registry meanwhile
    _admit_by_service(manager, one_more, "alice", alice, users_own)
    assert alice.limits() is None
