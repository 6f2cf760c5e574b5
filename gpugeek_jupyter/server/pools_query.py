"""The query string of ``GET /gpugeek/pools``, checked here: a bad value is a 400 naming its parameter.

=============================================  ==========================================================
``GET /gpugeek/pools``                         live pools and pools that ended in the last 24 h (the
                                               panel's poll: the newest record of each name)
``?state=live``                                live pools only
``?state=ended[&before=ID][&limit=N]``         history, newest first, every record; the answer's
                                               ``next`` is the ``before`` of the following page
``&namespace=team-a``                          with any of them: only that Kubernetes namespace
=============================================  ==========================================================

>>> parse_pools_query({"state": "ended", "before": "120", "limit": "20"})
PoolsQuery(state='ended', before=120, limit=20, namespace=None)
>>> parse_pools_query({"state": "ended", "limit": "0"})
Traceback (most recent call last):
  ...
gpugeek_jupyter.errors.SpecError: 'limit' must be a whole number from 1 to 500, got '0'; e.g. ?state=ended&limit=50
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import SpecError

RECENT = "recent"
LIVE = "live"
ENDED = "ended"
STATES = (RECENT, LIVE, ENDED)
DEFAULT_PAGE = 50
MAX_PAGE = 500
MAX_POOL_ID = 2**63 - 1  # SQLite's largest integer
PARAMETERS = ("namespace", "state", "before", "limit")
_WHOLE_NUMBER = re.compile(r"[0-9]{1,19}")


@dataclass(frozen=True)
class PoolsQuery:
    """Which pools ``GET /gpugeek/pools`` answers with; ``before`` and ``limit`` page through ``ended``."""

    state: str = RECENT
    before: int | None = None
    limit: int = DEFAULT_PAGE
    namespace: str | None = None


def _shown(value: str, limit: int = 40) -> str:
    """``value`` quoted as Python would, shortened: one line whatever the client sent."""
    return repr(value if len(value) <= limit else value[: limit - 3] + "...")


def _whole_number(key: str, value: str, low: int, high: int, rule: str, example: str) -> int:
    number = int(value) if _WHOLE_NUMBER.fullmatch(value) else None
    if number is None or not low <= number <= high:
        raise SpecError(f"'{key}' must be {rule}, got {_shown(value)}; e.g. {example}", field=key)
    return number


def parse_pools_query(arguments: Mapping[str, str | None]) -> PoolsQuery:
    """A :class:`PoolsQuery` from the request's query arguments (absent or empty: the default);
    SpecError with ``field`` set to the parameter otherwise."""
    for key, value in arguments.items():
        # a bare key without a value is JupyterLab's cache-buster (ServerConnection adds ?<timestamp>)
        if key not in PARAMETERS and value:
            raise SpecError(
                f"unknown query parameter {_shown(key)} for GET /gpugeek/pools (known: {', '.join(PARAMETERS)}); "
                "e.g. ?state=ended&limit=50",
                field=key,
            )
    given = {key: value for key, value in arguments.items() if value}
    state = given.get("state", RECENT)
    if state not in STATES:
        raise SpecError(
            f"'state' must be one of {', '.join(repr(s) for s in STATES)}, got {_shown(state)}; e.g. ?state=ended",
            field="state",
        )
    for key in ("before", "limit"):
        if key in given and state != ENDED:
            got = f"got state {_shown(state)}" if "state" in given else f"and state defaults to {RECENT!r}"
            raise SpecError(
                f"'{key}' pages through ended pools, so it needs state=ended ({got}); "
                f"e.g. ?state=ended&{key}={120 if key == 'before' else DEFAULT_PAGE}",
                field=key,
            )
    before = None
    if "before" in given:
        before = _whole_number(
            "before", given["before"], 1, MAX_POOL_ID, "a pool id (a whole number from 1)", "?state=ended&before=120"
        )
    limit = DEFAULT_PAGE
    if "limit" in given:
        limit = _whole_number(
            "limit",
            given["limit"],
            1,
            MAX_PAGE,
            f"a whole number from 1 to {MAX_PAGE}",
            f"?state=ended&limit={DEFAULT_PAGE}",
        )
    return PoolsQuery(state=state, before=before, limit=limit, namespace=given.get("namespace"))
