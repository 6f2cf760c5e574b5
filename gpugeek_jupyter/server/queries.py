"""The query strings of the REST routes, checked in one place: a bad value is a 400 naming its
parameter and a valid example, phrased for the request (names and values as JSON writes them).

=============================================  ==========================================================
``GET /gpugeek/pools``                         live pools and pools that ended in the last 24 h (the
                                               panel's poll: the newest record of each name)
``?state=live``                                live pools only
``?state=ended[&before=ID][&limit=N]``         history, newest first, every record; the answer's
                                               ``next`` is the ``before`` of the following page
``&namespace=team-a``                          with any of them: only that Kubernetes namespace
``GET /gpugeek/jobs[?pool=NAME][&limit=N]``    the newest ``limit`` jobs (50), of one pool or of all
``GET /gpugeek/jobs/<id>/output[?lines=N]``    the last ``lines`` lines of the job's output (40)
``GET /gpugeek/changes[?since=T][&wait=S]``    the registry's status token, once it differs from ``T``
                                               or after ``wait`` seconds (25, at most 60)
``GET /gpugeek/team[?since=D][&until=D]``      the team's spend per user and GPU type (``&user=NAME``:
                                               one user's); dates as ``2026-11-01``
``GET /gpugeek/pools/<name>/metrics[?since=T]``  the newest sample of each GPU (or CPU worker); with
                                               ``since`` (seconds since the epoch) every sample the
                                               workers keep that is newer (their last 10 minutes)
=============================================  ==========================================================

A bare key without a value is JupyterLab's cache-buster (``ServerConnection`` adds ``?<timestamp>``):
it is ignored, as are empty values.

>>> parse_pools_query({"state": "ended", "before": "120", "limit": "20"})
PoolsQuery(state='ended', before=120, limit=20, namespace=None)
>>> parse_jobs_query({"pool": "dev", "limit": "10"})
JobsQuery(pool='dev', limit=10)
>>> from gpugeek_jupyter.errors import Surface, phrased_for
>>> with phrased_for(Surface.SERVER):
...     parse_jobs_query({"limit": "0"})
Traceback (most recent call last):
  ...
gpugeek_jupyter.errors.SpecError: "limit" must be a whole number from 1 to 500, got "0" (e.g. ?limit=50)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..client import DEFAULT_JOBS_LIMIT
from ..errors import Phrase, SpecError, Value

RECENT = "recent"
LIVE = "live"
ENDED = "ended"
STATES = (RECENT, LIVE, ENDED)
DEFAULT_PAGE = 50
MAX_PAGE = 500
MAX_POOL_ID = 2**63 - 1  # SQLite's largest integer
DEFAULT_OUTPUT_LINES = 40  # lines of a job's grouped tail in the panel's job view
MAX_OUTPUT_LINES = 500
POOLS_PARAMETERS = ("namespace", "state", "before", "limit")
JOBS_PARAMETERS = ("pool", "limit")
OUTPUT_PARAMETERS = ("lines", "since", "limit")
CHANGES_PARAMETERS = ("since", "wait")
TEAM_PARAMETERS = ("since", "until", "user", "by")
METRICS_PARAMETERS = ("since",)
JOB_METRICS_PARAMETERS = ("name", "points")
DEFAULT_CHANGES_WAIT = 25  # seconds: under proxies' usual 60 s idle timeout
MAX_CHANGES_WAIT = 60


@dataclass(frozen=True)
class PoolsQuery:
    """Which pools ``GET /gpugeek/pools`` answers with; ``before`` and ``limit`` page through ``ended``."""

    state: str = RECENT
    before: int | None = None
    limit: int = DEFAULT_PAGE
    namespace: str | None = None


@dataclass(frozen=True)
class JobsQuery:
    """Which jobs ``GET /gpugeek/jobs`` answers with, newest first."""

    pool: str | None = None
    limit: int = DEFAULT_JOBS_LIMIT


def _given(arguments: Mapping[str, str | None], known: tuple[str, ...], route: str, example: str) -> dict[str, str]:
    """The arguments that carry a value; a SpecError naming the first unknown one."""
    for key, value in arguments.items():
        if key not in known and value:
            raise SpecError(
                Phrase(
                    "unknown query parameter {key} for {route} (known: {known}); e.g. {example}",
                    key=Value(key),
                    route=route,
                    known=", ".join(known),
                    example=example,
                ),
                field=key,
            )
    return {key: value for key, value in arguments.items() if value}


def _whole_number(key: str, raw: str, low: int, high: int, rule: str, example: str) -> int:
    number = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 19 else None
    if number is None or not low <= number <= high:
        raise SpecError(
            Phrase("{field} must be {rule}, got {value} (e.g. {query})", query=example), field=key, value=raw, rule=rule
        )
    return number


def parse_pools_query(arguments: Mapping[str, str | None]) -> PoolsQuery:
    """A :class:`PoolsQuery` from the request's query arguments (absent or empty: the default)."""
    given = _given(arguments, POOLS_PARAMETERS, "GET /gpugeek/pools", "?state=ended&limit=50")
    state = given.get("state", RECENT)
    if state not in STATES:
        raise SpecError(
            Phrase("{field} must be one of {states}, got {value} (e.g. ?state=ended)", states=", ".join(STATES)),
            field="state",
            value=state,
        )
    for key in ("before", "limit"):
        if key in given and state != ENDED:
            why = "got state {state}" if "state" in given else f"and state defaults to {RECENT}"
            raise SpecError(
                Phrase(
                    "{field} pages through ended pools, so it needs state=ended ("
                    + why
                    + "); e.g. ?state=ended&{key}={n}",
                    state=Value(state),
                    key=key,
                    n=120 if key == "before" else DEFAULT_PAGE,
                ),
                field=key,
            )
    before = None
    if "before" in given:
        before = _whole_number(
            "before", given["before"], 1, MAX_POOL_ID, "a pool id (a whole number from 1)", "?state=ended&before=120"
        )
    limit = DEFAULT_PAGE
    if "limit" in given:
        rule = f"a whole number from 1 to {MAX_PAGE}"
        limit = _whole_number("limit", given["limit"], 1, MAX_PAGE, rule, f"?state=ended&limit={DEFAULT_PAGE}")
    return PoolsQuery(state=state, before=before, limit=limit, namespace=given.get("namespace"))


def parse_jobs_query(arguments: Mapping[str, str | None]) -> JobsQuery:
    """A :class:`JobsQuery`: ``pool`` (a pool's name) and ``limit`` (1 to 500, default 50), as
    ``%gpugeek_jobs --pool NAME --limit N`` and ``ClusterClient().jobs(limit=, pool=)``."""
    given = _given(arguments, JOBS_PARAMETERS, "GET /gpugeek/jobs", f"?pool=dev&limit={DEFAULT_JOBS_LIMIT}")
    limit = DEFAULT_JOBS_LIMIT
    if "limit" in given:
        rule = f"a whole number from 1 to {MAX_PAGE}"
        limit = _whole_number("limit", given["limit"], 1, MAX_PAGE, rule, f"?limit={DEFAULT_JOBS_LIMIT}")
    return JobsQuery(pool=given.get("pool"), limit=limit)


@dataclass(frozen=True)
class OutputQuery:
    """``GET /gpugeek/jobs/<id>/output``: the grouped tail's ``lines``, or, with ``since``, a page of
    ``limit`` events of the job's stream from that seq."""

    lines: int = DEFAULT_OUTPUT_LINES
    since: int | None = None
    limit: int = MAX_PAGE


def parse_output_query(arguments: Mapping[str, str | None]) -> OutputQuery:
    """An :class:`OutputQuery`: ``lines`` (1 to 500; absent or empty: 40), ``since`` (a seq >= 0)
    and ``limit`` (1 to 500).

    >>> parse_output_query({"lines": "100"}), parse_output_query({"since": "42"})
    (OutputQuery(lines=100, since=None, limit=500), OutputQuery(lines=40, since=42, limit=500))
    """
    example = f"?lines={DEFAULT_OUTPUT_LINES}"
    given = _given(arguments, OUTPUT_PARAMETERS, "GET /gpugeek/jobs/<id>/output", example)
    lines, since, limit = DEFAULT_OUTPUT_LINES, None, MAX_PAGE
    if "lines" in given:
        rule = f"a whole number from 1 to {MAX_OUTPUT_LINES}"
        lines = _whole_number("lines", given["lines"], 1, MAX_OUTPUT_LINES, rule, example)
    if "since" in given:
        since = _whole_number("since", given["since"], 0, 2**62, "a whole number >= 0", "?since=0")
    if "limit" in given:
        limit = _whole_number(
            "limit", given["limit"], 1, MAX_PAGE, f"a whole number from 1 to {MAX_PAGE}", "?limit=100"
        )
    return OutputQuery(lines=lines, since=since, limit=limit)


@dataclass(frozen=True)
class ChangesQuery:
    """``GET /gpugeek/changes``: answer once the status token differs from ``since`` (absent: at
    once), else after ``wait`` seconds."""

    since: str | None = None
    wait: int = DEFAULT_CHANGES_WAIT


def parse_changes_query(arguments: Mapping[str, str | None]) -> ChangesQuery:
    """A :class:`ChangesQuery`: ``since`` (a token this route answered) and ``wait`` (0 to 60 s).

    >>> parse_changes_query({"since": "9f2c", "wait": "5"})
    ChangesQuery(since='9f2c', wait=5)
    """
    given = _given(arguments, CHANGES_PARAMETERS, "GET /gpugeek/changes", "?since=9f2c41d07a3b5e68&wait=25")
    wait = DEFAULT_CHANGES_WAIT
    if "wait" in given:
        rule = f"a whole number of seconds from 0 to {MAX_CHANGES_WAIT}"
        wait = _whole_number("wait", given["wait"], 0, MAX_CHANGES_WAIT, rule, f"?wait={DEFAULT_CHANGES_WAIT}")
    return ChangesQuery(since=given.get("since"), wait=wait)


@dataclass(frozen=True)
class TeamQuery:
    """Whose spend ``GET /gpugeek/team`` answers with, over which period (dates are checked by
    :func:`~gpugeek_jupyter.cost.team.team_report`, as on the other surfaces)."""

    since: str | None = None
    until: str | None = None
    user: str | None = None
    by: str = "user"


def parse_team_query(arguments: Mapping[str, str | None]) -> TeamQuery:
    """A :class:`TeamQuery`.

    >>> parse_team_query({"since": "2026-11-01", "user": "ada"})
    TeamQuery(since='2026-11-01', until=None, user='ada', by='user')
    """
    given = _given(arguments, TEAM_PARAMETERS, "GET /gpugeek/team", "?since=2026-11-01&user=ada")
    return TeamQuery(
        since=given.get("since"), until=given.get("until"), user=given.get("user"), by=given.get("by") or "user"
    )


@dataclass(frozen=True)
class MetricsQuery:
    """Which samples ``GET /gpugeek/pools/<name>/metrics`` answers with: the newest of each device,
    or (``since``, seconds since the epoch) every kept sample newer than that."""

    since: float | None = None


@dataclass(frozen=True)
class JobMetricsQuery:
    """``GET /gpugeek/jobs/<id>/metrics``: one metric's rows only (``name``), and with ``points``
    each line thinned for a chart to at most that many rows (see :mod:`..jobs.metrics_thinning`)."""

    name: str | None = None
    points: int | None = None


def parse_job_metrics_query(arguments: Mapping[str, str | None]) -> JobMetricsQuery:
    """A :class:`JobMetricsQuery`.

    >>> parse_job_metrics_query({"points": "400"})
    JobMetricsQuery(name=None, points=400)
    """
    from ..jobs.metrics_thinning import MAX_POINTS, MIN_POINTS

    example = "?points=400"
    given = _given(arguments, JOB_METRICS_PARAMETERS, "GET /gpugeek/jobs/<id>/metrics", example)
    points = None
    if "points" in given:
        rule = f"a whole number from {MIN_POINTS} to {MAX_POINTS}"
        points = _whole_number("points", given["points"], MIN_POINTS, MAX_POINTS, rule, example)
    return JobMetricsQuery(name=given.get("name"), points=points)


def parse_metrics_query(arguments: Mapping[str, str | None]) -> MetricsQuery:
    """A :class:`MetricsQuery`.

    >>> parse_metrics_query({"since": "1796000000.5"})
    MetricsQuery(since=1796000000.5)
    """
    given = _given(arguments, METRICS_PARAMETERS, "GET /gpugeek/pools/<name>/metrics", "?since=1796000000")
    if "since" not in given:
        return MetricsQuery()
    raw = given["since"]
    try:
        since = float(raw)
    except ValueError:
        since = float("nan")
    if not 0 <= since < 1e11:  # NaN and infinities fail too
        raise SpecError(
            Phrase("{field} must be {rule}, got {value} (e.g. {query})", query="?since=1796000000"),
            field="since",
            value=raw,
            rule="a time in seconds since the epoch",
        )
    return MetricsQuery(since=since)
