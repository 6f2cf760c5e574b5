"""A user's side of the team's ledger service (:mod:`gpugeek_jupyter.hub.ledger_service`).

With ``GpugeekConfig.team_service_url`` set, a user's processes never open the team's database:
they send what they would have written (a pool opened, a pool closed) to the service with the
user's hub token (``JUPYTERHUB_API_TOKEN``, which the hub gives every single-user server and its
kernels), and the service writes it as the token's owner, so no one can write another user's rows.
Quotas and the team budget read the same service.

A report the service does not take (it is down, restarting, unreachable) waits in the user's own
registry (its ``team_outbox``, in order) and goes, oldest first, before the next report and at each
heartbeat of the user's pools; the registry stays the user's record meanwhile, and quotas count it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..spec import PoolSpec
    from ..store import PoolRecord, Registry
    from .team_rows import Holdings

log = logging.getLogger(__name__)

TIMEOUT_S = 5.0
BATCH = 200  # reports sent in one request
RETRY_AFTER_S = 2.0  # after a failed send, the outbox is not tried again sooner (heartbeats are 1 s)


class ServiceUnavailable(OSError):
    """The ledger service did not answer (or answered 5xx): the report waits in the outbox."""


class ServiceLedger:
    """The team ledger behind the team's ledger service at ``url``, as this user (their hub token)."""

    def __init__(self, url: str, registry: Registry, token: str | None = None) -> None:
        self.url = url.rstrip("/") + "/"
        self.registry = registry
        self.token = token if token is not None else os.environ.get("JUPYTERHUB_API_TOKEN", "")
        self._lock = threading.Lock()
        self._failed_at = 0.0
        self._limits: tuple[dict[str, Any], float] | None = None

    def with_token(self, token: str) -> ServiceLedger:
        """The same service asked with another hub token (a caller's own, for their view)."""
        return ServiceLedger(self.url, self.registry, token=token)

    # -- HTTP ---------------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None) -> Any:
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        request = urllib.request.Request(
            url,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                message = json.loads(text).get("message", text)
            except (ValueError, AttributeError):
                message = text
            if e.code >= 500:
                raise ServiceUnavailable(f"the team's ledger service answered {e.code}: {message}") from None
            from ..errors import GpugeekError

            error = GpugeekError(f"the team's ledger service refused {method} {path}: {message}")
            error.http_status = e.code
            raise error from None
        except (OSError, ValueError) as e:
            raise ServiceUnavailable(f"the team's ledger service at {self.url} did not answer: {e}") from None

    # -- reports, through the outbox ----------------------------------------------------------
    def send(self, report: dict[str, Any]) -> None:
        """Send ``report`` after the ones still waiting; if the service does not take them, it
        waits with them in the outbox."""
        with self._lock:
            self.registry.queue_team_report(report)
            self._flush(force=True)

    def flush(self) -> int:
        """Send the waiting reports, oldest first; returns how many still wait."""
        with self._lock:
            return self._flush(force=False)

    def _flush(self, force: bool) -> int:
        if not force and time.monotonic() - self._failed_at < RETRY_AFTER_S:
            return len(self.registry.team_reports(limit=1))
        while True:
            waiting = self.registry.team_reports(limit=BATCH)
            if not waiting:
                return 0
            try:
                answer = self._call("POST", "api/reports", {"reports": [r for _, r in waiting]})
            except ServiceUnavailable as e:
                self._failed_at = time.monotonic()
                log.info("%s; %d report(s) wait in the outbox", e, len(waiting))
                return len(waiting)
            for (report_id, report), result in zip(waiting, answer["results"], strict=True):
                if result != "ok":
                    log.warning("the team's ledger service refused a report of %s: %s", report.get("key"), result)
                self.registry.drop_team_report(report_id)

    def record_start(self, key: str, user: str, record: PoolRecord, spec: PoolSpec, usd_per_hour: float) -> None:
        from .team_rows import opening_report

        self.send(opening_report(key, record, spec, usd_per_hour))  # the service names the user

    def record_end(self, key: str, ended_at: float | None = None) -> None:
        self.send({"op": "close", "key": key, "ended_at": float(ended_at or time.time())})

    # -- reads --------------------------------------------------------------------------------
    serves_quotas = True  # the service says the caller's quota and the team budget (its settings)

    def holdings(self, user: str, now: float) -> Holdings:
        """The caller's open rows, their spend today and this month, and the team's this month (UTC);
        the quota and budget the same answer gives are kept for :meth:`limits`."""
        from .team_rows import Holdings, start_of_day, start_of_month

        self.flush()
        self._limits = None
        answer = self._call("GET", "api/usage", query={"day": start_of_day(now), "month": start_of_month(now)})
        if isinstance(answer.get("quota"), dict):
            self._limits = (dict(answer["quota"]), float(answer.get("team_budget_usd_per_month") or 0.0))
        rows = [SimpleNamespace(**row) for row in answer["open"]]
        return Holdings(
            rows,
            float(answer["user_usd_today"]),
            float(answer.get("user_usd_month") or 0.0),  # a service of an earlier release does not say
            float(answer["team_usd_month"]),
        )

    def limits(self) -> tuple[dict[str, Any], float] | None:
        """The caller's quota (``Quota.to_dict``'s form) and the team's monthly budget as the service said them in its last
        :meth:`holdings` answer; None when it did not answer (or is of a release that does not say)."""
        return self._limits

    def open_pools(self, user: str) -> list[Any]:
        return self.holdings(user, time.time()).open_rows

    def spend(self, since: float, until: float | None = None, user: str | None = None) -> float:
        return float(self._call("GET", "api/spend", query={"since": since, "until": until, "user": user})["usd"])

    def report(
        self, since: float, until: float | None = None, user: str | None = None, by: str = "user"
    ) -> list[dict[str, Any]]:
        query = {"since": since, "until": until, "user": user, "by": by}
        return list(self._call("GET", "api/report", query=query)["rows"])

    def close_lost(self, user: str, registry: Registry) -> None:
        """Close the caller's open rows of this registry whose pool is no longer live here."""
        from .team_rows import pool_key

        prefix = pool_key(registry, 0).rsplit(":", 1)[0] + ":"
        for row in self.open_pools(user):
            key = str(row.pool_key)
            if not key.startswith(prefix):
                continue
            try:
                record = registry.pool_by_id(int(key.rsplit(":", 1)[1]))
            except Exception:
                self.record_end(key)
                continue
            if not record.status.is_live:
                self.record_end(key, record.ended_at or time.time())


_LEDGERS: dict[tuple[str, str], ServiceLedger] = {}
_LEDGERS_LOCK = threading.Lock()


def service_ledger(url: str, registry: Registry) -> ServiceLedger:
    """The one :class:`ServiceLedger` of ``url`` and ``registry``'s file in this process (one outbox
    sender per registry)."""
    with _LEDGERS_LOCK:
        key = (url, str(registry.path))
        if key not in _LEDGERS:
            _LEDGERS[key] = ServiceLedger(url, registry)
        return _LEDGERS[key]


def keep_flushing(ledger: ServiceLedger, stop: threading.Event, period_s: float = 10.0) -> threading.Thread:
    """A daemon thread that sends ``ledger``'s waiting reports every ``period_s`` until ``stop`` is
    set (the Jupyter server runs one, so reports catch up with no pool running)."""

    def run() -> None:
        while not stop.wait(period_s):
            try:
                ledger.flush()
            except Exception as e:  # a refusal of the whole batch (4xx): said, tried again later
                log.warning("sending the team outbox failed: %s", e)

    thread = threading.Thread(target=run, name="gpugeek-team-outbox", daemon=True)
    thread.start()
    return thread
