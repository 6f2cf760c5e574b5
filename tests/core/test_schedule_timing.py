"""When a schedule's runs are due: intervals from the schedule's creation, cron in a time zone (across
a daylight-saving change), missed occurrences counted; bad values are one line in Python's syntax."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from gpugeek_jupyter.errors import SpecError
from gpugeek_jupyter.schedules.agent import _last_due
from gpugeek_jupyter.schedules.timing import Timing, check_cron, check_timezone, format_seconds, parse_every


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10.0), ("30m", 1800.0), ("2h", 7200.0), ("1d", 86400.0), ("1w", 604800.0), ("1h30m", 5400.0)]
    + [(" 1D ", 86400.0), ("0.5h", 1800.0), (90, 90.0)],
)
def test_intervals_read_as_seconds(text: object, seconds: float) -> None:
    assert parse_every(text) == seconds


@pytest.mark.parametrize("bad", ["1x", "daily", "", "1 d", "d1", "-1d", True, None, [1]])
def test_an_interval_that_does_not_parse_names_the_value_and_an_example(bad: object) -> None:
    with pytest.raises(SpecError) as raised:
        parse_every(bad)
    assert str(raised.value) == (
        f"every must be an interval such as 10s, 30m, 2h, 1d or 1w (units combine: 1h30m), got {bad!r} "
        "(e.g. every='1d')"
    )


def test_an_interval_under_a_second_is_refused() -> None:
    with pytest.raises(SpecError) as raised:
        parse_every("0s")
    assert str(raised.value) == "every must be at least 1 second, got '0s' (e.g. every='30m')"


def test_a_bad_cron_expression_or_time_zone_names_it() -> None:
    with pytest.raises(SpecError) as raised:
        check_cron("61 * * * *")
    assert str(raised.value) == (
        "cron must be a cron expression of five fields, minute hour day month weekday (bad minute), "
        "got '61 * * * *' (e.g. cron='0 2 * * *')"
    )
    with pytest.raises(SpecError) as raised:
        check_timezone("Europe/Atlantis")
    assert str(raised.value) == (
        "timezone must be an IANA time zone name, got 'Europe/Atlantis' (e.g. timezone='Europe/Berlin')"
    )
    assert check_cron("0 2 * * 1-5") == "0 2 * * 1-5" and check_timezone("Asia/Tokyo") == "Asia/Tokyo"


def test_interval_occurrences_are_fixed_times_from_the_creation() -> None:
    timing = Timing(every_s=10.0, cron=None, timezone="UTC", anchor=100.0)
    assert [timing.next_after(t) for t in (99.0, 100.0, 105.0, 110.0, 129.9)] == [110.0, 110.0, 110.0, 120.0, 130.0]
    assert timing.count_between(110.0, 145.0) == 3  # 120, 130, 140
    assert timing.count_between(110.0, 115.0) == 0
    assert _last_due(timing, 110.0, 145.0) == 140.0


def test_cron_occurrences_follow_the_wall_clock_of_their_time_zone_across_daylight_saving() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    timing = Timing(every_s=None, cron="0 2 * * *", timezone="Europe/Berlin", anchor=0.0)
    before = datetime(2026, 3, 27, 12, 0, tzinfo=berlin).timestamp()  # DST starts 29 March, 02:00 -> 03:00
    first = timing.next_after(before)
    second = timing.next_after(first)
    third = timing.next_after(second)
    assert datetime.fromtimestamp(first, berlin).isoformat() == "2026-03-28T02:00:00+01:00"
    assert datetime.fromtimestamp(third, berlin).isoformat() == "2026-03-30T02:00:00+02:00"
    assert timing.count_between(before, third) == 3


def test_intervals_are_described_as_they_are_written() -> None:
    assert [format_seconds(s) for s in (10, 1800, 5400, 86400, 90061)] == ["10s", "30m", "1h30m", "1d", "1d1h1m1s"]
