"""The team outbox: reports for the team's ledger service that could not be sent yet (the service
was down or unreachable), kept in the user's own registry in the order they were made and sent,
oldest first, once it answers again. Bounded: past :data:`OUTBOX_LIMIT` reports the oldest go, with
a warning (a service down for that long has lost more than these)."""

from __future__ import annotations

import json
import logging
from typing import Any

from ._connection import Database

log = logging.getLogger(__name__)

OUTBOX_LIMIT = 10_000


class OutboxQueries(Database):
    """The ``team_outbox`` table."""

    def queue_team_report(self, report: dict[str, Any], limit: int = OUTBOX_LIMIT) -> int:
        """Keep ``report`` (JSON-ready) to send later; returns how many wait now."""
        with self._write() as db:
            db.execute("INSERT INTO team_outbox (report, queued_at) VALUES (?, ?)", (json.dumps(report), self.clock()))
            waiting = int(db.execute("SELECT COUNT(*) FROM team_outbox").fetchone()[0])
            if waiting > limit:
                db.execute(
                    "DELETE FROM team_outbox WHERE id IN (SELECT id FROM team_outbox ORDER BY id LIMIT ?)",
                    (waiting - limit,),
                )
                log.warning("the team outbox is full: dropped its %d oldest reports", waiting - limit)
                waiting = limit
            return waiting

    def team_reports(self, limit: int = 500) -> list[tuple[int, dict[str, Any]]]:
        """The oldest ``limit`` waiting reports, as (id, report)."""
        rows = self._read("SELECT id, report FROM team_outbox ORDER BY id LIMIT ?", (limit,))
        return [(int(r["id"]), json.loads(r["report"])) for r in rows]

    def drop_team_report(self, report_id: int) -> None:
        """Forget a report the service has taken."""
        with self._write() as db:
            db.execute("DELETE FROM team_outbox WHERE id = ?", (report_id,))
