"""When a schedule's runs are due: an interval (``every="1d"``) or a cron expression
(``cron="0 2 * * *"``, read by ``cronsim``) in a time zone (``zoneinfo``).

Intervals count from the schedule's creation, so its occurrences are fixed times (creation + k x
interval), as cron's are: a run that starts late does not push the next one back.

>>> parse_every("1h30m")
5400.0
>>> Timing(every_s=10.0, cron=None, timezone="UTC", anchor=100.0).next_after(125.0)
130.0
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..errors import SpecError

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
MIN_EVERY_S = 1.0
MAX_COUNTED = 10_000  # missed occurrences are counted up to this many (then: "at least")


def parse_every(every: object) -> float:
    """``"1d"``, ``"30m"``, ``"10s"``, ``"1h30m"`` (or a number of seconds) -> seconds; a SpecError
    naming the value otherwise."""
    if isinstance(every, int | float) and not isinstance(every, bool):
        seconds = float(every)
    elif isinstance(every, str) and (text := every.strip().lower()) and _covers(text):
        seconds = sum(float(n) * UNITS[unit] for n, unit in _PART.findall(text))
    else:
        raise SpecError(
            field="every",
            value=every,
            rule="an interval such as 10s, 30m, 2h, 1d or 1w (units combine: 1h30m)",
            example="1d",
        )
    if not math.isfinite(seconds) or seconds < MIN_EVERY_S:
        raise SpecError(field="every", value=every, rule=f"at least {MIN_EVERY_S:.0f} second", example="30m")
    return seconds


def _covers(text: str) -> bool:
    return _PART.sub("", text) == ""


def check_cron(cron: object) -> str:
    """``cron`` when it is a five-field cron expression; a SpecError naming it otherwise."""
    if isinstance(cron, str):
        try:
            CronSim(cron, datetime.now(ZoneInfo("UTC")))
            return cron
        except CronSimError as e:
            rule = f"a cron expression of five fields, minute hour day month weekday ({str(e).lower()})"
        except Exception:  # cronsim raises plain errors for some malformed fields
            rule = "a cron expression of five fields, minute hour day month weekday"
    else:
        rule = "a cron expression of five fields, minute hour day month weekday"
    raise SpecError(field="cron", value=cron, rule=rule, example="0 2 * * *")


def check_timezone(name: object) -> str:
    """``name`` when it is a time zone ``zoneinfo`` knows; a SpecError naming it otherwise."""
    if isinstance(name, str) and name:
        try:
            ZoneInfo(name)
            return name
        except (ZoneInfoNotFoundError, ValueError):
            pass
    raise SpecError(field="timezone", value=name, rule="an IANA time zone name", example="Europe/Berlin")


@dataclass(frozen=True)
class Timing:
    """A schedule's clock: ``every_s`` or ``cron`` (one of them), in ``timezone``; intervals count
    from ``anchor`` (the schedule's creation)."""

    every_s: float | None
    cron: str | None
    timezone: str
    anchor: float

    def next_after(self, t: float) -> float:
        """The first occurrence strictly after ``t`` (a Unix time)."""
        if self.every_s is not None:
            k = math.floor((t - self.anchor) / self.every_s) + 1
            return self.anchor + max(k, 1) * self.every_s
        assert self.cron is not None
        start = datetime.fromtimestamp(t, ZoneInfo(self.timezone))
        return next(CronSim(self.cron, start)).timestamp()

    def count_between(self, after: float, until: float) -> int:
        """How many occurrences fall in ``(after, until]`` (at most :data:`MAX_COUNTED`)."""
        if until <= after:
            return 0
        if self.every_s is not None:
            first = self.next_after(after)
            return 0 if first > until else min(MAX_COUNTED, int((until - first) // self.every_s) + 1)
        count, t = 0, after
        while count < MAX_COUNTED and (t := self.next_after(t)) <= until:
            count += 1
        return count

    def describe(self) -> str:
        """``every 1d`` / ``cron '0 2 * * *' (Europe/Berlin)``."""
        if self.every_s is not None:
            return f"every {format_seconds(self.every_s)}"
        return f"cron {self.cron!r} ({self.timezone})"


def format_seconds(seconds: float) -> str:
    """``86400`` -> ``1d``, ``5400`` -> ``1h30m``, ``10`` -> ``10s``."""
    parts, left = [], seconds
    for unit in "wdhm":
        count = int(left // UNITS[unit])
        if count:
            parts.append(f"{count}{unit}")
            left -= count * UNITS[unit]
    if left or not parts:
        parts.append(f"{left:g}s")
    return "".join(parts)
