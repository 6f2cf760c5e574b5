"""The team's ledger service: a JupyterHub service that owns the team ledger, so users never hold
the database's credentials.

The hub starts it as a managed service (``jupyterhub_config.py``)::

    c.JupyterHub.services = [{
        "name": "gpugeek-ledger",
        "url": "http://127.0.0.1:10101",
        "command": ["/opt/gpugeek/bin/python", "-m", "gpugeek_jupyter.hub.ledger_service"],
        "environment": {"GPUGEEK_TEAM_LEDGER": "postgresql+psycopg://gpugeek@db/gpugeek"},
    }]
    c.Spawner.environment = {"GPUGEEK_TEAM_SERVICE": "http://127.0.0.1:10101/services/gpugeek-ledger/"}

Every request carries a hub token (a single-user server's ``JUPYTERHUB_API_TOKEN``); the service
asks the hub whose it is (``HubAuth.user_for_token``, cached a minute) and acts as that user: it
writes the user's own rows only (a report naming another user's pool is refused, per report), and
it shows a report of every user only to a hub admin (the hub's ``admin`` flag or a token with the
unfiltered ``admin:users`` scope). No client names the user.

Routes (under the service's prefix, ``/services/gpugeek-ledger/``):

- ``POST api/reports`` ``{"reports": [{"op": "open", ...}, {"op": "close", "key", "ended_at"}]}``:
  applied in order; answers ``{"results": ["ok" | why refused, ...]}``;
- ``GET api/usage?day=T&month=T``: the caller's open rows, their spend since ``day`` and since
  ``month``, the team's since ``month``, with the caller's quota and the team's monthly budget from the service's own
  settings (the admin's ``GpugeekConfig``) and the caller's hub groups: the quota check, which a
  user's own configuration cannot loosen;
- ``GET api/spend?since=T[&until=T][&user=NAME]``: USD spent, by the team or one user (the budget);
- ``GET api/report?since=T[&until=T][&user=NAME][&by=user|group|pool]``: ``team_report``'s rows
  for the caller.

A pool's row carries the hub groups its user was in when it opened, as the hub tells the service
(the caller's token needs ``read:users:groups``): the report per group.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from typing import Any
from urllib.parse import urlparse

from tornado import ioloop, web

from ..config import get_config
from ..cost.team import REPORT_BY, TeamLedger, Viewer, quota_for, team_ledger, viewer_from_hub_model
from ..errors import GpugeekError

log = logging.getLogger("gpugeek_jupyter.hub.ledger_service")

OPENING_FIELDS = ("key", "host", "pool_name", "backend", "gpu_type", "gpus", "workers", "usd_per_hour", "started_at")


def apply_report(ledger: TeamLedger, user: str, report: dict[str, Any], groups: tuple[str, ...] = ()) -> str:
    """Write one report as ``user``'s (a pool it opens counts in ``user``'s hub ``groups``, as the hub
    says them); "ok", or why it was refused (one line)."""
    op, key = report.get("op"), report.get("key")
    if op not in ("open", "close") or not isinstance(key, str) or not key:
        return f"a report needs op 'open' or 'close' and a key, got op {op!r}, key {key!r}"
    owner = ledger.owner_of(key)
    if owner is not None and owner != user:
        return f"pool {key!r} belongs to {owner!r}, not to {user!r}: a user reports their own pools only"
    if op == "open":
        missing = [f for f in OPENING_FIELDS if f not in report]
        if missing:
            return f"an 'open' report needs {', '.join(missing)}"
        ledger.open_row(user, report, groups)
    else:
        ledger.record_end(key, float(report.get("ended_at") or time.time()))
    return "ok"


class LedgerHandler(web.RequestHandler):
    """A route of the service: JSON in and out, the caller from the hub."""

    @property
    def hub_auth(self) -> Any:
        """jupyterhub.services.auth.HubAuth (who a token is)."""
        return self.settings["hub_auth"]

    @property
    def ledger(self) -> TeamLedger:
        return self.settings["ledger"]  # type: ignore[no-any-return]

    def check_xsrf_cookie(self) -> None:
        pass  # token-authenticated only: no cookies are read

    async def caller(self) -> dict[str, Any]:
        header = self.request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() not in ("token", "bearer") or not token:
            raise web.HTTPError(401, "send a hub token: Authorization: token <JUPYTERHUB_API_TOKEN>")
        model = await self.hub_auth.user_for_token(token.strip(), sync=False)
        if not model:
            raise web.HTTPError(403, "the hub does not know this token")
        is_user = model.get("kind", "user") == "user"
        if not is_user and "admin:users" not in set(model.get("scopes") or ()):
            raise web.HTTPError(403, f"{model.get('name')!r} is a hub service without admin:users, not a user")
        return dict(model)

    async def blocking(self, call: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, call, *args)

    def number(self, name: str, default: float | None = None) -> float | None:
        raw = self.get_query_argument(name, None)
        if raw in (None, ""):
            return default
        try:
            return float(raw)  # type: ignore[arg-type]
        except ValueError:
            raise web.HTTPError(400, f"?{name}= must be a Unix time, got {raw!r} (e.g. ?{name}=1764547200)") from None

    def answer(self, body: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error = kwargs.get("exc_info", (None, None))[1]
        message = error.log_message if isinstance(error, web.HTTPError) and error.log_message else str(error or "")
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"message": message or self._reason}))


class ReportsHandler(LedgerHandler):
    async def post(self) -> None:
        model = await self.caller()
        user, groups = model["name"], tuple(str(g) for g in model.get("groups") or ())
        try:
            reports = json.loads(self.request.body or b"{}")["reports"]
            assert isinstance(reports, list)
        except (ValueError, KeyError, TypeError, AssertionError):
            raise web.HTTPError(400, 'the body must be {"reports": [...]}') from None

        def write() -> list[str]:
            return [apply_report(self.ledger, user, r if isinstance(r, dict) else {}, groups) for r in reports]

        self.answer({"results": await self.blocking(write)})


class UsageHandler(LedgerHandler):
    async def get(self) -> None:
        model = await self.caller()
        user = model["name"]
        now = time.time()
        day, month = self.number("day", now - 86400), self.number("month", now - 30 * 86400)
        config = self.settings.get("config") or get_config()
        try:  # the admin's settings, here, and the caller's hub groups as the hub gave them
            quota = quota_for(user, config, tuple(model.get("groups") or ()))
        except GpugeekError as e:  # a bad group_quotas/user_quotas entry: the admin's to fix
            raise web.HTTPError(500, str(e)) from None

        def read() -> dict[str, Any]:
            held = self.ledger.holdings_since(user, day or 0.0, month or 0.0, now)
            return {
                "user": user,
                "open": [
                    {"pool_key": r.pool_key, "gpus": int(r.gpus), "workers": int(r.workers)} for r in held.open_rows
                ],
                "user_usd_today": held.user_usd_today,
                "user_usd_month": held.user_usd_month,
                "team_usd_month": held.team_usd_month,
                "quota": quota.to_dict(),
                "team_budget_usd_per_month": float(config.team_budget_usd_per_month),
            }

        self.answer(await self.blocking(read))


class SpendHandler(LedgerHandler):
    async def get(self) -> None:
        viewer = viewer_from_hub_model(await self.caller())
        user = self.get_query_argument("user", None) or None
        if user is not None and user != viewer.name and not viewer.admin:
            raise web.HTTPError(403, f"only a hub admin reads another user's spend, not {viewer.name!r}")
        since, until = self.number("since", 0.0), self.number("until")
        self.answer({"usd": await self.blocking(self.ledger.spend, since, until, user)})


class ReportHandler(LedgerHandler):
    async def get(self) -> None:
        viewer: Viewer = viewer_from_hub_model(await self.caller())
        user = self.get_query_argument("user", None) or None
        if not viewer.admin:
            if user is not None and user != viewer.name:
                raise web.HTTPError(403, f"only a hub admin sees another user's spend, not {viewer.name!r}")
            user = viewer.name
        by = self.get_query_argument("by", None) or "user"
        if by not in REPORT_BY:
            raise web.HTTPError(400, f"?by= must be one of {', '.join(REPORT_BY)}, got {by!r} (e.g. ?by=group)")
        since, until = self.number("since", 0.0), self.number("until")
        self.answer({"rows": await self.blocking(self.ledger.report, since, until, user, by)})


def make_app(ledger: TeamLedger, hub_auth: Any, prefix: str, config: Any = None) -> web.Application:
    """The service's routes under ``prefix``; ``hub_auth`` says whose a token is (``HubAuth``);
    ``config``: the settings whose quotas and budget it answers with (default: this process's)."""
    prefix = "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"
    routes = [("api/reports", ReportsHandler), ("api/usage", UsageHandler), ("api/spend", SpendHandler)]
    routes.append(("api/report", ReportHandler))
    return web.Application(
        [(prefix + path, handler) for path, handler in routes], ledger=ledger, hub_auth=hub_auth, config=config
    )


def main() -> None:
    """Run as the hub's managed service: the ledger from ``GpugeekConfig.team_ledger_url``
    (``GPUGEEK_TEAM_LEDGER``), the address and prefix from the hub's ``JUPYTERHUB_SERVICE_URL`` and
    ``JUPYTERHUB_SERVICE_PREFIX``."""
    logging.basicConfig(level=logging.INFO, format="[gpugeek-ledger %(asctime)s] %(message)s")
    config = get_config()
    if config.team_service_url:
        config.team_service_url = ""  # the service itself writes the database
    ledger = team_ledger(config)
    if not isinstance(ledger, TeamLedger):
        raise SystemExit(
            "gpugeek-ledger: no team ledger to own: set GPUGEEK_TEAM_LEDGER (GpugeekConfig.team_ledger_url), "
            "e.g. postgresql+psycopg://gpugeek@db/gpugeek, in the service's environment"
        )
    try:
        ledger.engine.dispose()  # made (and its table) before the first report
    except Exception as e:
        raise SystemExit(f"gpugeek-ledger: the team ledger cannot be opened: {type(e).__name__}: {e}") from e
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101"))
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/gpugeek-ledger/")
    from jupyterhub.services.auth import HubAuth

    app = make_app(ledger, HubAuth(cache_max_age=60), prefix, config)
    app.listen(url.port or 80, url.hostname or "127.0.0.1")
    log.info("serving the team ledger at %s%s", url.geturl().rstrip("/"), prefix)
    loop = ioloop.IOLoop.current()
    aio = loop.asyncio_loop  # type: ignore[attr-defined]
    for stop_signal in (signal.SIGTERM, signal.SIGINT):  # how the hub stops its services
        aio.add_signal_handler(stop_signal, aio.stop)
    loop.start()
    ledger.engine.dispose()
    log.info("stopped")


if __name__ == "__main__":
    main()
