"""Quotas and a team budget, from one team ledger that an admin can read.

A single user needs none of this: their private SQLite registry is the record of their pools and
cost, and stays so. A team on one JupyterHub (or any set of users) shares one **team ledger**: a
database that every user's kernels, scripts and Jupyter server write their pools into (who, which
pool, where, how many GPUs and workers, at what price, from when to when), reached through
SQLAlchemy Core, so the same code runs on PostgreSQL for a team and on SQLite for a try-out::

    c.GpugeekConfig.team_ledger_url = "postgresql+psycopg://gpugeek@db.internal/gpugeek"

The admin's settings (``GpugeekConfig``, read by every user's process from the hub's config) then
limit what a user may launch, checked before anything starts, on every surface (the pool manager
checks every launch):

- ``quota_max_gpus`` / ``quota_max_workers``: GPUs and workers a user may hold at once, over all
  their live pools (the ledger's open rows; without a ledger, this host's registry);
- ``quota_backends`` / ``quota_gpu_types``: what a user may launch on (empty: anything);
- ``quota_usd_per_day`` / ``quota_usd_per_month``: a user's spend since midnight UTC, and since the
  first of the month (UTC) (without a ledger, what this host's registry's pools cost then);
- ``team_budget_usd_per_month``: the whole team's spend this calendar month (UTC), which also
  stops running pools once reached, as a pool's own ``--budget`` does;
- ``group_quotas``: per hub group, e.g. ``{"students": {"max_gpus": 1}}``: a group's limits apply
  to its members (the most generous of their groups');
- ``user_quotas``: per-user overrides, e.g. ``{"ada": {"max_gpus": 16}}``, over everything.

On JupyterHub the team's ledger service (:mod:`gpugeek_jupyter.hub.ledger_service`,
``team_service_url``) owns the database instead, and users' processes report to it with their hub
token (:mod:`.team_service`).

A breach is one line naming the limit, the usage and the setting. :func:`team_report` is the
admin's view: spend per user, hub group or pool (and GPU type) over a period, from the ledger.

Spend is each pool's hourly rate (the prices in force at its launch) times the time it was live
within the period; a pool whose owner was killed is closed at the next check of the same user on
the same host (its registry says it is lost).
"""

from __future__ import annotations

import functools
import getpass
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config import get_config
from ..errors import (
    GpugeekError,
    NotAllowedError,
    NotFoundError,
    Phrase,
    QuotaExceededError,
    Setting,
    SpecError,
    Value,
)
from .team_rows import Holdings, opening_report, pool_key, start_of_day, start_of_month
from .team_rows import gpus_of as _gpus_of

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from ..config import GpugeekConfig
    from ..pools import Pool, PoolManager
    from ..spec import PoolSpec
    from ..store import PoolRecord, Registry

log = logging.getLogger(__name__)

TEAM_PLUGIN = "gpugeek-team-ledger"
TEAM_BUDGET_CHECK_S = 30.0  # how often a running pool's process reads the team's spend


def current_user() -> str:
    """Who launches: the hub's name for the user under JupyterHub, else the OS user."""
    return os.environ.get("JUPYTERHUB_USER") or getpass.getuser()


# -- quotas ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Quota:
    """What one user may launch (0 or empty: no limit)."""

    max_gpus: int = 0
    max_workers: int = 0
    backends: tuple[str, ...] = ()
    gpu_types: tuple[str, ...] = ()
    usd_per_day: float = 0.0
    usd_per_month: float = 0.0
    # where a limit was set, when not by its quota_* setting: (limit, "user_quotas['ada']['max_gpus']")
    sources: tuple[tuple[str, str], ...] = ()

    def setting(self, limit: str) -> str:
        """The setting that gave ``limit`` its value, for the refusal line."""
        return dict(self.sources).get(limit, f"quota_{limit}")

    @property
    def limits_anything(self) -> bool:
        return bool(
            self.max_gpus
            or self.max_workers
            or self.backends
            or self.gpu_types
            or self.usd_per_day
            or self.usd_per_month
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the team's ledger service answers with it)."""
        return {
            "max_gpus": self.max_gpus,
            "max_workers": self.max_workers,
            "backends": list(self.backends),
            "gpu_types": list(self.gpu_types),
            "usd_per_day": self.usd_per_day,
            "usd_per_month": self.usd_per_month,
            "sources": dict(self.sources),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Quota:
        return cls(
            max_gpus=int(data.get("max_gpus") or 0),
            max_workers=int(data.get("max_workers") or 0),
            backends=tuple(data.get("backends") or ()),
            gpu_types=tuple(data.get("gpu_types") or ()),
            usd_per_day=float(data.get("usd_per_day") or 0.0),
            usd_per_month=float(data.get("usd_per_month") or 0.0),
            sources=tuple(sorted(dict(data.get("sources") or {}).items())),
        )


_QUOTA_FIELDS = {
    "max_gpus": int,
    "max_workers": int,
    "backends": tuple,
    "gpu_types": tuple,
    "usd_per_day": float,
    "usd_per_month": float,
}


def _checked(table: str, name: str, override: Any) -> dict[str, Any]:
    values = {}
    for key, value in dict(override or {}).items():
        if key not in _QUOTA_FIELDS:
            raise GpugeekError(
                Phrase(
                    "GpugeekConfig.{table}[{name}] has an unknown limit {key}; use one of {known} "
                    "(e.g. {{'ada': {{'max_gpus': 8}}}})",
                    table=table,
                    name=Value(name),
                    key=Value(key),
                    known=", ".join(_QUOTA_FIELDS),
                )
            )
        values[key] = _QUOTA_FIELDS[key](value)
    return values


def _most_generous(a: Any, b: Any) -> Any:
    """The limit that allows more: 0 or empty is no limit; lists join (either group's types)."""
    if not a or not b:
        return type(a)()
    if isinstance(a, tuple):
        return tuple(dict.fromkeys((*b, *a)))
    return max(a, b)


def quota_for(user: str, config: GpugeekConfig | None = None, groups: tuple[str, ...] | list[str] = ()) -> Quota:
    """``user``'s quota: the ``quota_*`` settings, then the hub groups' ``group_quotas`` over them (a
    user in several groups gets each limit's most generous value among them), then
    ``user_quotas[user]`` over those."""
    config = config or get_config()
    values: dict[str, Any] = {
        "max_gpus": int(config.quota_max_gpus),
        "max_workers": int(config.quota_max_workers),
        "backends": tuple(config.quota_backends),
        "gpu_types": tuple(config.quota_gpu_types),
        "usd_per_day": float(config.quota_usd_per_day),
        "usd_per_month": float(config.quota_usd_per_month),
    }
    sources: dict[str, str] = {}
    table = dict(config.group_quotas)
    for group in sorted(set(groups) & set(table)):
        for key, value in _checked("group_quotas", group, table[group]).items():
            source = f"group_quotas[{group!r}][{key!r}]"
            if key in sources:  # set by an earlier group of this user: the most generous of the two
                value, source = _most_generous(value, values[key]), f"{sources[key]} / {source}"
            values[key], sources[key] = value, source
    for key, value in _checked("user_quotas", user, dict(config.user_quotas).get(user)).items():
        values[key], sources[key] = value, f"user_quotas[{user!r}][{key!r}]"
    return Quota(**values, sources=tuple(sorted(sources.items())))


def hub_groups(user: str) -> tuple[str, ...]:
    """``user``'s JupyterHub groups, asked of the hub (``GET $JUPYTERHUB_API_URL/users/<user>`` with
    ``JUPYTERHUB_API_TOKEN``; the token needs ``read:users:groups``, which the hub's ``server`` role
    can be given); () outside a hub, or when the hub does not say."""
    api, token = os.environ.get("JUPYTERHUB_API_URL"), os.environ.get("JUPYTERHUB_API_TOKEN")
    if not api or not token or not os.environ.get("JUPYTERHUB_USER"):
        return ()
    import json
    import urllib.parse
    import urllib.request

    url = f"{api.rstrip('/')}/users/{urllib.parse.quote(user)}"
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            model = json.loads(response.read())
    except (OSError, ValueError) as e:
        log.warning("the hub did not say %s's groups (%s): group_quotas do not apply", user, e)
        return ()
    if "groups" not in model:
        log.warning(
            "the hub does not show %s's groups to this server's token (give the hub's server role "
            "read:users:groups!user): group_quotas do not apply",
            user,
        )
    return tuple(str(g) for g in model.get("groups") or ())


@dataclass(frozen=True)
class Usage:
    """What a user holds now and has spent today and this month, and what the team has spent this
    month."""

    gpus: int = 0
    workers: int = 0
    user_usd_today: float = 0.0
    team_usd_month: float = 0.0
    user_usd_month: float = 0.0


def _usd(amount: float) -> str:
    return f"${amount:,.2f}"


def check_quota(spec: PoolSpec, user: str, quota: Quota, usage: Usage, team_budget: float) -> None:
    """Raise :class:`QuotaExceededError`, one line naming the limit, the usage and the setting, when
    launching ``spec`` would break ``quota`` or the team budget; nothing otherwise."""
    ask = "stop one of your pools or ask your admin"
    if quota.backends and spec.backend not in quota.backends:
        raise QuotaExceededError(
            Phrase(
                "{user} may launch on {allowed} only, not {asked} (GpugeekConfig.{setting}); ask your admin",
                setting=quota.setting("backends"),
                user=Value(user),
                allowed=", ".join(quota.backends),
                asked=Setting(backend=spec.backend),
            ),
            field="backend",
        )
    if quota.gpu_types and spec.gpu_type.lower() not in {t.lower() for t in quota.gpu_types}:
        raise QuotaExceededError(
            Phrase(
                "{user} may launch {allowed} only, not {asked} (GpugeekConfig.{setting}); ask your admin",
                setting=quota.setting("gpu_types"),
                user=Value(user),
                allowed=", ".join(quota.gpu_types),
                asked=Setting(gpu_type=spec.gpu_type),
            ),
            field="gpu_type",
        )
    gpus = _gpus_of(spec)
    if quota.max_gpus and gpus and usage.gpus + gpus > quota.max_gpus:
        raise QuotaExceededError(
            Phrase(
                "{asked} would give {user} {total} GPUs at once, past the quota of {limit} "
                "(GpugeekConfig.{setting}; {held} held now); {ask}",
                setting=quota.setting("max_gpus"),
                asked=Setting(count=spec.count),
                user=Value(user),
                total=str(usage.gpus + gpus),
                limit=str(quota.max_gpus),
                held=str(usage.gpus),
                ask=ask,
            ),
            field="count",
        )
    if quota.max_workers and usage.workers + spec.count > quota.max_workers:
        raise QuotaExceededError(
            Phrase(
                "{asked} would give {user} {total} workers at once, past the quota of {limit} "
                "(GpugeekConfig.{setting}; {held} held now); {ask}",
                setting=quota.setting("max_workers"),
                asked=Setting(count=spec.count),
                user=Value(user),
                total=str(usage.workers + spec.count),
                limit=str(quota.max_workers),
                held=str(usage.workers),
                ask=ask,
            ),
            field="count",
        )
    spend_limits = (  # limit, its value, what counts against it, the period, when it is over
        ("usd_per_day", quota.usd_per_day, usage.user_usd_today, "today (UTC), the daily", "midnight UTC"),
        (
            "usd_per_month",
            quota.usd_per_month,
            usage.user_usd_month,
            "this month (UTC), the monthly",
            "the first of next month",
        ),
    )
    for limit, allowed, spent, period, over in spend_limits:
        if allowed and spent >= allowed:
            raise QuotaExceededError(
                Phrase(
                    "{user} has spent {spent} {period} quota of {limit} (GpugeekConfig.{setting}); no pool "
                    "starts before {over} unless your admin raises it",
                    setting=quota.setting(limit),
                    user=Value(user),
                    spent=_usd(spent),
                    period=period,
                    limit=_usd(allowed),
                    over=over,
                )
            )
    if team_budget and usage.team_usd_month >= team_budget:
        raise QuotaExceededError(
            Phrase(
                "the team has spent {spent} this month (UTC), its budget of {limit} "
                "(GpugeekConfig.team_budget_usd_per_month); no pool starts until your admin raises it",
                spent=_usd(usage.team_usd_month),
                limit=_usd(team_budget),
            )
        )


# -- the ledger -----------------------------------------------------------------------------------
def _tables() -> Any:
    from sqlalchemy import Column, Float, Integer, MetaData, String, Table

    metadata = MetaData()
    pools = Table(
        "gpugeek_team_pools",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("pool_key", String(512), nullable=False, unique=True),  # host, registry, pool id
        Column("user_name", String(255), nullable=False, index=True),
        Column("host", String(255), nullable=False),
        Column("pool_name", String(255), nullable=False),
        Column("backend", String(32), nullable=False),
        Column("gpu_type", String(64), nullable=False),
        Column("gpus", Integer, nullable=False),
        Column("workers", Integer, nullable=False),
        Column("usd_per_hour", Float, nullable=False),
        Column("started_at", Float, nullable=False, index=True),
        Column("ended_at", Float, nullable=True, index=True),
    )
    # the hub groups its user was in when the pool opened (none outside a hub): the team report per group
    groups = Table(
        "gpugeek_team_pool_groups",
        metadata,
        Column("pool_id", Integer, nullable=False, index=True),  # gpugeek_team_pools.id
        Column("group_name", String(255), nullable=False),
    )
    return metadata, pools, groups


@functools.cache
def _team_tables() -> Any:
    """The ledger's tables, made on first use: SQLAlchemy is the ``team`` extra's, and a process with
    no team ledger never imports it."""
    return _tables()


def _pools() -> Any:
    return _team_tables()[1]


def _pool_groups() -> Any:
    return _team_tables()[2]


def __getattr__(name: str) -> Any:  # ``POOLS``, for readers of the table outside this module
    if name == "POOLS":
        return _pools()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _live_hours(row: Any, since: float, until: float) -> float:
    """The hours ledger row ``row``'s pool was live between ``since`` and ``until``."""
    start = max(float(row.started_at), since)
    end = min(float(row.ended_at) if row.ended_at is not None else until, until)
    return max(0.0, end - start) / 3600.0


def _spend(rows: Any, since: float, until: float) -> float:
    return sum(float(row.usd_per_hour) * _live_hours(row, since, until) for row in rows)


REPORT_BY = ("user", "group", "pool")  # what a team report's rows are per


def _report_rows(
    rows: list[Any], since: float, until: float, by: str, groups_of: Mapping[int, list[str]]
) -> list[dict[str, Any]]:
    """The ledger's pool rows summed per ``by`` over the period (see :meth:`TeamLedger.report`)."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        hours = _live_hours(row, since, until)
        gpu_hours, usd = hours * int(row.gpus), hours * float(row.usd_per_hour)
        if by == "pool":
            out[(row.id,)] = {
                "user": row.user_name,
                "pool": row.pool_name,
                "host": row.host,
                "backend": row.backend,
                "gpu_type": row.gpu_type,
                "started_at": float(row.started_at),
                "ended_at": None if row.ended_at is None else float(row.ended_at),
                "gpu_hours": gpu_hours,
                "usd": usd,
            }
            continue
        if by == "group":
            groups = sorted(set(groups_of.get(int(row.id), []))) or [""]
            for group in groups:
                entry = out.setdefault(
                    (group, row.gpu_type),
                    {
                        "group": group,
                        "gpu_type": row.gpu_type,
                        "users": set(),
                        "pools": 0,
                        "gpu_hours": 0.0,
                        "usd": 0.0,
                    },
                )
                entry["users"].add(row.user_name)
                entry["pools"] += 1
                entry["gpu_hours"] += gpu_hours / len(groups)
                entry["usd"] += usd / len(groups)
            continue
        entry = out.setdefault(
            (row.user_name, row.gpu_type),
            {"user": row.user_name, "gpu_type": row.gpu_type, "pools": 0, "gpu_hours": 0.0, "usd": 0.0},
        )
        entry["pools"] += 1
        entry["gpu_hours"] += gpu_hours
        entry["usd"] += usd
    entries = [{**e, "users": len(e["users"])} if by == "group" else e for e in out.values()]
    return sorted(entries, key=lambda e: (-e["usd"], e[by], e["gpu_type"]))


@dataclass
class TeamLedger:
    """The team ledger at ``url`` (an SQLAlchemy URL); its table is made on first use."""

    url: str
    _engine: Engine | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def engine(self) -> Engine:
        with self._lock:
            if self._engine is None:
                from sqlalchemy import create_engine

                engine = create_engine(self.url, pool_pre_ping=True)
                _team_tables()[0].create_all(engine)
                self._engine = engine
            return self._engine

    def record_start(
        self,
        key: str,
        user: str,
        record: PoolRecord,
        spec: PoolSpec,
        usd_per_hour: float,
    ) -> None:
        """Open ``key``'s row (again, if a registry made anew reused an id: the old row is closed),
        with ``user``'s hub groups of now (the ledger service asks the hub for its caller's itself)."""
        self.open_row(user, opening_report(key, record, spec, usd_per_hour), hub_groups(user))

    def open_row(self, user: str, report: dict[str, Any], groups: tuple[str, ...] | list[str] = ()) -> None:
        """Open the row an ``opening_report`` describes, as ``user``'s, in ``user``'s hub ``groups`` of
        now; the same report again (a resend) changes nothing."""
        from sqlalchemy import insert, select, update

        now = time.time()
        key = str(report["key"])
        with self.engine.begin() as db:
            same = db.execute(
                select(_pools().c.id).where(
                    _pools().c.pool_key == key,
                    _pools().c.user_name == user,
                    _pools().c.started_at == float(report["started_at"]),
                )
            ).first()
            if same is not None:
                return
            db.execute(
                update(_pools()).where(_pools().c.pool_key == key, _pools().c.ended_at.is_(None)).values(ended_at=now)
            )
            db.execute(
                update(_pools())
                .where(_pools().c.pool_key == key)
                .values(pool_key=_pools().c.pool_key + f"#ended-{now:.6f}")
            )
            opened = db.execute(
                insert(_pools()).values(
                    pool_key=key,
                    user_name=user,
                    host=str(report["host"]),
                    pool_name=str(report["pool_name"]),
                    backend=str(report["backend"]),
                    gpu_type=str(report["gpu_type"]),
                    gpus=int(report["gpus"]),
                    workers=int(report["workers"]),
                    usd_per_hour=float(report["usd_per_hour"]),
                    started_at=float(report["started_at"]),
                )
            )
            names = sorted({str(g) for g in groups if str(g)})
            if names:
                row_id = opened.inserted_primary_key[0]  # type: ignore[index]  # an insert has one
                db.execute(insert(_pool_groups()), [{"pool_id": row_id, "group_name": g} for g in names])

    def owner_of(self, key: str) -> str | None:
        """Whose row ``key`` is (None: no such row)."""
        from sqlalchemy import select

        with self.engine.connect() as db:
            row = db.execute(select(_pools().c.user_name).where(_pools().c.pool_key == key)).first()
        return None if row is None else str(row.user_name)

    def holdings(self, user: str, now: float) -> Holdings:
        """``user``'s open rows, their spend today and this month, and the team's this month (UTC)."""
        return self.holdings_since(user, start_of_day(now), start_of_month(now), now)

    def holdings_since(self, user: str, day: float, month: float, now: float) -> Holdings:
        """:meth:`holdings` with the day and the month starting at ``day`` and ``month`` (the
        ledger service takes them from its caller); the user's two periods from one read."""
        from sqlalchemy import or_, select

        overlapping = select(_pools().c.started_at, _pools().c.ended_at, _pools().c.usd_per_hour).where(
            _pools().c.user_name == user,
            _pools().c.started_at < now,
            or_(_pools().c.ended_at.is_(None), _pools().c.ended_at > min(day, month)),
        )
        with self.engine.connect() as db:
            rows = list(db.execute(overlapping))
        return Holdings(self.open_pools(user), _spend(rows, day, now), _spend(rows, month, now), self.spend(month, now))

    def record_end(self, key: str, ended_at: float | None = None) -> None:
        from sqlalchemy import update

        with self.engine.begin() as db:
            db.execute(
                update(_pools())
                .where(_pools().c.pool_key == key, _pools().c.ended_at.is_(None))
                .values(ended_at=float(ended_at or time.time()))
            )

    def open_pools(self, user: str) -> list[Any]:
        from sqlalchemy import select

        with self.engine.connect() as db:
            return list(db.execute(select(_pools()).where(_pools().c.user_name == user, _pools().c.ended_at.is_(None))))

    def spend(self, since: float, until: float | None = None, user: str | None = None) -> float:
        """USD spent between ``since`` and ``until`` (now), by ``user`` or the whole team."""
        from sqlalchemy import or_, select

        until = until or time.time()
        query = select(_pools().c.started_at, _pools().c.ended_at, _pools().c.usd_per_hour).where(
            _pools().c.started_at < until, or_(_pools().c.ended_at.is_(None), _pools().c.ended_at > since)
        )
        if user is not None:
            query = query.where(_pools().c.user_name == user)
        with self.engine.connect() as db:
            return _spend(db.execute(query), since, until)

    def report(
        self, since: float, until: float | None = None, user: str | None = None, by: str = "user"
    ) -> list[dict[str, Any]]:
        """Spend between ``since`` and ``until`` (of ``user`` only, if given), largest first, per
        ``by`` (:data:`REPORT_BY`): ``"user"``, rows of user, gpu_type, pools, gpu_hours and usd;
        ``"group"``, rows of group, gpu_type, users, pools, gpu_hours and usd, where a pool counts in
        each hub group its user was in at its launch, its hours and USD shared evenly among them (so
        the groups add up to the team's spend; ``""``: in no group); ``"pool"``, a row per pool:
        user, pool, host, backend, gpu_type, started_at, ended_at, gpu_hours and usd."""
        from sqlalchemy import or_, select

        until = until or time.time()
        query = select(_pools()).where(
            _pools().c.started_at < until, or_(_pools().c.ended_at.is_(None), _pools().c.ended_at > since)
        )
        if user is not None:
            query = query.where(_pools().c.user_name == user)
        with self.engine.connect() as db:
            rows = list(db.execute(query))
            groups_of: dict[int, list[str]] = {}
            if by == "group" and rows:
                ids = [int(r.id) for r in rows]
                for start in range(0, len(ids), 500):  # bound the IN list
                    chosen = select(_pool_groups()).where(_pool_groups().c.pool_id.in_(ids[start : start + 500]))
                    for link in db.execute(chosen):
                        groups_of.setdefault(int(link.pool_id), []).append(str(link.group_name))
        return _report_rows(rows, since, until, by, groups_of)

    def close_lost(self, user: str, registry: Registry) -> None:
        """Close this user's open rows of this host and registry whose pool is no longer live there
        (an owner killed before it could record the end)."""
        host = socket.gethostname()
        prefix = f"{host}:{registry.path}:"
        for row in self.open_pools(user):
            if not str(row.pool_key).startswith(prefix):
                continue
            try:
                record = registry.pool_by_id(int(str(row.pool_key).rsplit(":", 1)[1]))
            except Exception:
                self.record_end(row.pool_key)
                continue
            if not record.status.is_live:
                self.record_end(row.pool_key, record.ended_at or time.time())


@functools.cache
def _ledger(url: str) -> TeamLedger:
    return TeamLedger(url)


def team_ledger(config: GpugeekConfig | None = None, registry: Registry | None = None) -> Any:
    """The configured team ledger: the team's ledger service (``team_service_url``, reached with the
    user's hub token; reports it misses wait in ``registry``'s outbox), else the database
    (``team_ledger_url``), else None (a single user's private registry only)."""
    config = config or get_config()
    if config.team_service_url:
        from ..store import get_registry
        from .team_service import service_ledger

        return service_ledger(config.team_service_url, registry or get_registry())
    url = config.team_ledger_url
    return _ledger(url) if url else None


def _registry_usage(registry: Registry, spec_of: Any) -> tuple[int, int]:
    gpus = workers = 0
    for record in registry.list_pools(live_only=True):
        spec = spec_of(record)
        gpus += _gpus_of(spec)
        workers += int(spec.count)
    return gpus, workers


def _registry_spend(registry: Registry, since: float, now: float) -> float:
    """What this registry's pools cost from ``since`` to ``now`` (those live then, or ended since)."""
    from .ledger import pool_cost

    return sum(
        pool_cost(registry, record.id, now=now, since=since, include_idle=False).total_usd
        for record in registry.recent_pools(ended_since=since)
    )


def _usage_of_registry(registry: Registry, now: float) -> Usage:
    """What this registry's pools hold now and cost today and this month (UTC): a lone user's
    usage, with no ledger (their registry is then the record of their spend)."""
    from ..spec import PoolSpec

    gpus, workers = _registry_usage(registry, lambda r: PoolSpec.from_dict(r.spec))
    month = _registry_spend(registry, start_of_month(now), now)
    day = start_of_day(now)
    today = month if day <= start_of_month(now) else _registry_spend(registry, day, now)
    return Usage(gpus=gpus, workers=workers, user_usd_today=today, user_usd_month=month)


def usage_of(user: str, registry: Registry, ledger: Any) -> Usage:
    """What ``user`` holds and spent, from the ledger when there is one, else from this registry."""
    from ..spec import PoolSpec

    now = time.time()
    if ledger is None:
        return _usage_of_registry(registry, now)
    try:
        ledger.close_lost(user, registry)
        held = ledger.holdings(user, now)
    except OSError as e:  # the ledger service does not answer: this registry is the record meanwhile
        log.warning("the team's ledger service did not answer (%s): quotas count this registry only", e)
        return _usage_of_registry(registry, now)
    recorded = {str(r.pool_key) for r in held.open_rows}
    # pools of this registry still starting have no row yet (it is written when they are ready)
    starting = [
        PoolSpec.from_dict(r.spec)
        for r in registry.list_pools(live_only=True)
        if pool_key(registry, r.id) not in recorded
    ]
    return Usage(
        gpus=sum(int(r.gpus) for r in held.open_rows) + sum(_gpus_of(spec) for spec in starting),
        workers=sum(int(r.workers) for r in held.open_rows) + sum(int(spec.count) for spec in starting),
        user_usd_today=held.user_usd_today,
        user_usd_month=held.user_usd_month,
        team_usd_month=held.team_usd_month,
    )


def admit_launch(manager: PoolManager, spec: PoolSpec) -> None:
    """The pool manager's admission check: quotas and the team budget, before anything starts.

    With the team's ledger service, the quotas and the budget are the service's (its own settings,
    the admin's, and the hub's groups of the caller), so a user's own configuration cannot raise
    them; while the service does not answer, this process's settings and registry count instead.
    """
    config = get_config()
    user = current_user()
    ledger = team_ledger(config, manager.registry)
    if getattr(ledger, "serves_quotas", False):
        _admit_by_service(manager, spec, user, ledger, config)
        return
    quota = quota_for(user, config, hub_groups(user) if config.group_quotas else ())
    budget = float(config.team_budget_usd_per_month)
    if not quota.limits_anything and not (ledger is not None and budget):
        return
    try:
        usage = usage_of(user, manager.registry, ledger)
    except QuotaExceededError:
        raise
    except Exception as e:
        raise QuotaExceededError(
            Phrase(
                "the team ledger (GpugeekConfig.team_ledger_url) cannot be read, so {user}'s quota cannot be "
                "checked: {cause}; try again, or ask your admin",
                user=Value(user),
                cause=f"{type(e).__name__}: {e}",
            )
        ) from e
    check_quota(spec, user, quota, usage, budget if ledger is not None else 0.0)


def _admit_by_service(manager: PoolManager, spec: PoolSpec, user: str, ledger: Any, config: GpugeekConfig) -> None:
    """The service's quotas and budget over the service's count of the caller's holdings."""
    usage = usage_of(user, manager.registry, ledger)  # asks the service, which says the limits too
    served = ledger.limits()
    if served is None:  # it did not answer: this process's settings, as without a service
        quota = quota_for(user, config, hub_groups(user) if config.group_quotas else ())
        budget = float(config.team_budget_usd_per_month)
    else:
        quota, budget = Quota.from_dict(served[0]), served[1]
    check_quota(spec, user, quota, usage, budget)


def quota_status(registry: Registry, config: GpugeekConfig | None = None) -> dict[str, Any]:
    """This user's limits and what counts against them, for the side panel's quota line
    (``GET /gpugeek/quota``): ``{"user", "limited", "quota", "usage", "team_budget_usd_per_month",
    "from"}``; ``limited`` is False when no limit and no budget apply (the line is then not shown).
    With the team's ledger service, its limits (``"from": "service"``)."""
    config = config or get_config()
    user = current_user()
    ledger = team_ledger(config, registry)
    serves_quotas = getattr(ledger, "serves_quotas", False)
    usage = usage_of(user, registry, ledger) if serves_quotas else None  # the service says its limits with it
    served = ledger.limits() if serves_quotas else None
    if served is not None:
        quota, budget, source = Quota.from_dict(served[0]), served[1], "service"
    else:
        quota = quota_for(user, config, hub_groups(user) if config.group_quotas else ())
        budget = float(config.team_budget_usd_per_month) if ledger is not None else 0.0
        source = "settings"
    if usage is None:  # nothing is read for a line that is not shown
        usage = usage_of(user, registry, ledger) if quota.limits_anything or budget else Usage()
    return {
        "user": user,
        "limited": quota.limits_anything or bool(budget),
        "quota": quota.to_dict(),
        "usage": {
            "gpus": usage.gpus,
            "workers": usage.workers,
            "user_usd_today": usage.user_usd_today,
            "user_usd_month": usage.user_usd_month,
            "team_usd_month": usage.team_usd_month,
        },
        "team_budget_usd_per_month": budget,
        "from": source,
    }


class TeamLedgerReporter:
    """Pool plugin: writes each pool this process launches into the team ledger (its start and end),
    and stops a running pool once the team's monthly budget is spent."""

    name = TEAM_PLUGIN

    def __init__(self, ledger: Any) -> None:
        self.ledger = ledger
        self._checked_at: dict[int, float] = {}

    def ready(self, manager: PoolManager, pool: Pool) -> None:
        from ..pricing import hourly_rate

        record = pool.record
        user = current_user()
        key, rate = pool_key(manager.registry, pool.id), hourly_rate(pool.spec, record.prices)
        self.ledger.record_start(key, user, record, pool.spec, rate)

    def stopped(self, manager: PoolManager, record: PoolRecord) -> None:
        self._checked_at.pop(record.id, None)
        self.ledger.record_end(pool_key(manager.registry, record.id), record.ended_at)

    def heartbeat(self, manager: PoolManager, pool: Pool) -> None:
        flush = getattr(self.ledger, "flush", None)
        if flush is not None:
            flush()  # reports the ledger service missed, once it answers again
        served = getattr(self.ledger, "serves_quotas", False)
        budget = float(get_config().team_budget_usd_per_month)
        now = time.monotonic()
        if not (budget or served) or now - self._checked_at.get(pool.id, 0.0) < TEAM_BUDGET_CHECK_S:
            return
        self._checked_at[pool.id] = now
        try:
            if served:  # the service's budget (the admin's settings), with the team's spend
                spent = self.ledger.holdings(current_user(), time.time()).team_usd_month
                limits = self.ledger.limits()
                budget = limits[1] if limits is not None else budget
            else:
                spent = self.ledger.spend(start_of_month(time.time()))
        except OSError as e:
            log.info("the team's spend could not be read (%s); checked again in %.0f s", e, TEAM_BUDGET_CHECK_S)
            return
        if not budget:
            return
        if spent >= budget:
            from .guards import stop_for

            stop_for(
                manager,
                pool,
                "team-budget-stop",
                f"pool '{pool.name}' was stopped: the team has spent {_usd(spent)} this month, its budget of "
                f"{_usd(budget)} (GpugeekConfig.team_budget_usd_per_month)",
            )


def install_team_ledger(manager: PoolManager) -> None:
    """Check every launch against the quotas; with a team ledger configured, report to it too."""
    manager.admission_checks.append(functools.partial(admit_launch, manager))
    ledger = team_ledger(registry=manager.registry)
    if ledger is not None:
        manager.register_plugin(TeamLedgerReporter(ledger))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Viewer:
    """Who asks for the team's spend: a hub admin (``admin``) sees every user's rows, anyone else
    their own."""

    name: str
    admin: bool
    token: str | None = field(default=None, repr=False, compare=False)  # theirs, for the ledger service


def viewer_from_hub_model(model: Mapping[str, Any]) -> Viewer:
    """The viewer a JupyterHub identity model names (the hub's ``GET /hub/api/user`` answer, which a
    single-user server's ``current_user.hub_user`` is): an admin when the hub says ``admin`` or the
    token holds the hub's unfiltered ``admin:users`` scope (a service's token, for instance)."""
    scopes = set(model.get("scopes") or ())
    return Viewer(name=str(model["name"]), admin=bool(model.get("admin")) or "admin:users" in scopes)


def kernel_viewer() -> Viewer:
    """This process's viewer: under JupyterHub (``JUPYTERHUB_USER``) the hub says whether the user is
    an admin, asked with the server's own token (``JUPYTERHUB_API_TOKEN``); a hub that cannot be
    asked makes the user no admin. Outside a hub there is no admin but whoever holds the ledger's URL,
    who can read every row with it anyway."""
    user = os.environ.get("JUPYTERHUB_USER")
    if not user:
        return Viewer(name=current_user(), admin=True)
    api, token = os.environ.get("JUPYTERHUB_API_URL"), os.environ.get("JUPYTERHUB_API_TOKEN")
    if not api or not token:
        return Viewer(name=user, admin=False)
    import json
    import urllib.request

    request = urllib.request.Request(api.rstrip("/") + "/user", headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            model = json.loads(response.read())
    except (OSError, ValueError) as e:
        log.warning("the hub at %s did not say whether %s is an admin (%s): their own rows only", api, user, e)
        return Viewer(name=user, admin=False)
    return viewer_from_hub_model({**model, "name": model.get("name") or user})


def _when(value: float | str | None, name: str) -> float | None:
    """A timestamp, or an ISO date or date-time (local time, as ``since`` everywhere) as one."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    from .tco import parse_since

    try:
        return float(str(value))  # a timestamp, as text (a query string's)
    except ValueError:
        pass
    try:
        return parse_since(str(value))
    except SpecError:
        if name == "since":
            raise
        raise SpecError(
            field=name, value=value, rule="an ISO date or date-time (or a timestamp)", example="2026-11-01"
        ) from None


def team_report(
    since: float | str | None = None,
    until: float | str | None = None,
    user: str | None = None,
    *,
    by: str = "user",
    viewer: Viewer | None = None,
) -> list[dict[str, Any]]:
    """The team's spend since ``since`` (a timestamp or an ISO date such as ``"2026-11-01"``; default:
    the first of this month, UTC) until ``until`` (default: now), of every user or of ``user`` only,
    largest spend first: per user and GPU type (``by="user"``: rows of user, gpu_type, pools,
    gpu_hours and usd), per hub group and GPU type (``by="group"``: group, gpu_type, users, pools,
    gpu_hours, usd; a user's pool is shared evenly among the groups they were in at its launch) or
    per pool (``by="pool"``: user, pool, host, backend, gpu_type, started_at, ended_at, gpu_hours, usd).

    A hub admin sees every user; under JupyterHub anyone else sees their own rows only (``viewer``,
    default :func:`kernel_viewer`; the server extension passes the caller's hub identity).
    """
    ledger = team_ledger()
    if ledger is None:
        raise NotFoundError(
            Phrase(
                "no team ledger is configured, so there is no team spend to show; the admin sets "
                "GpugeekConfig.team_ledger_url (e.g. {example})",
                example="'postgresql+psycopg:///gpugeek?host=/var/run/postgresql'",
            )
        )
    if by not in REPORT_BY:
        raise SpecError(field="by", value=by, rule=f"one of {', '.join(REPORT_BY)}", example="group")
    viewer = viewer or kernel_viewer()
    if not viewer.admin:
        if user is not None and user != viewer.name:
            raise NotAllowedError(
                Phrase(
                    "{asked}: only a hub admin sees another user's spend; {name} sees their own (e.g. {own})",
                    asked=Setting(user=user),
                    name=Value(viewer.name),
                    own=Setting(user=viewer.name),
                ),
                field="user",
            )
        user = viewer.name
    if viewer.token and hasattr(ledger, "with_token"):
        ledger = ledger.with_token(viewer.token)  # the ledger service asks the hub who they are itself
    start = _when(since, "since")
    rows: list[dict[str, Any]] = ledger.report(
        start if start is not None else start_of_month(time.time()), _when(until, "until"), user, by
    )
    return rows
