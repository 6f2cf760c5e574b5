"""Progress bars as plain lines (terminals, scripts): a line per bar every ~2 s and at close."""

from __future__ import annotations

from typing import Any

import pytest

from gpugeek_jupyter.errors import SpecError
from gpugeek_jupyter.jobs.output import format_ranks
from gpugeek_jupyter.jobs.progress_text import (
    TextProgress,
    aggregate,
    choose_mode,
    format_bar,
    format_group,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def state(n: float, total: float | None = 50, closed: bool = False, **more: Any) -> dict[str, Any]:
    return {
        "id": 0,
        "desc": "train",
        "n": n,
        "total": total,
        "unit": "it",
        "elapsed": n / 20,
        "rate": 19.8,
        "closed": closed,
        **more,
    }


def renderer(mode: str) -> tuple[TextProgress, list[str], Clock]:
    lines: list[str] = []
    clock = Clock()
    return TextProgress(mode, write=lines.append, clock=clock), lines, clock


def test_one_rank_gets_a_line_every_two_seconds_and_one_at_close() -> None:
    show, lines, clock = renderer("all")
    for n in range(51):  # 8 states a second for 6.25 s
        clock.now = 100.0 + n * 0.125
        show(0, state(n, closed=n == 50))
    assert lines == [
        "[rank 0] train: 16/50 32% 19.8 it/s",
        "[rank 0] train: 32/50 64% 19.8 it/s",
        "[rank 0] train: 48/50 96% 19.8 it/s",
        "[rank 0] train: 50/50 100% 19.8 it/s",
    ]
    assert not any("\r" in line for line in lines)


def test_a_short_bar_shows_only_its_final_line_and_closing_twice_prints_once() -> None:
    show, lines, clock = renderer("all")
    show(0, state(0))
    clock.now += 0.5
    show(0, state(50, closed=True))
    show(0, state(50, closed=True))
    assert lines == ["[rank 0] train: 50/50 100% 19.8 it/s"]


def test_ranks_get_lines_of_their_own_and_rank0_mode_shows_only_rank_0() -> None:
    show, lines, _ = renderer("all")
    show(1, state(50, closed=True))
    show(0, state(50, closed=True))
    assert lines == ["[rank 1] train: 50/50 100% 19.8 it/s", "[rank 0] train: 50/50 100% 19.8 it/s"]
    only_rank0, rank0_lines, _ = renderer("rank0")
    only_rank0(1, state(50, closed=True))
    only_rank0(0, state(50, closed=True))
    assert rank0_lines == ["[rank 0] train: 50/50 100% 19.8 it/s"]


def test_grouped_mode_writes_the_slowest_and_fastest_rank_and_finishes_when_every_rank_has() -> None:
    show, lines, clock = renderer("grouped")
    for rank in range(8):
        show(rank, state(0))
    clock.now += 1.0
    for rank in range(1, 8):
        show(rank, state(20 + (rank % 3), rate=10.0 + rank))
    assert lines == []
    clock.now += 1.5
    show(0, state(20, rate=10.0))
    assert lines == ["[ranks 0-7] train: 20-22/50 40%-44% 10.0 it/s"]  # the first line after 2 s
    for rank in range(7):
        show(rank, state(50, closed=True))
    assert len(lines) == 1  # rank 7 still runs (and fewer than 2 s passed)
    show(7, state(50, closed=True))
    assert lines[-1] == "[ranks 0-7] train: 50/50 100% 19.8 it/s"


def test_a_bar_that_closed_and_shows_again_starts_over() -> None:
    show, lines, clock = renderer("all")
    show(0, state(50, closed=True))
    show(0, state(0))  # a restarted attempt numbers its bars from 0 again
    clock.now += 0.2
    show(0, state(50, closed=True))
    assert lines == ["[rank 0] train: 50/50 100% 19.8 it/s"] * 2


def test_a_bar_made_with_leave_false_prints_no_final_line() -> None:
    show, lines, _ = renderer("all")
    show(0, state(50, closed=True, leave=False))
    assert lines == []


def test_through_output_gives_unlabelled_lines_to_on_output() -> None:
    seen: list[tuple[int, str, str]] = []
    show = TextProgress.through_output(lambda rank, stream, text: seen.append((rank, stream, text)))
    show(1, state(50, closed=True))
    assert seen == [(1, "stderr", "train: 50/50 100% 19.8 it/s\n")]


def test_bar_formats_follow_tqdm() -> None:
    assert format_bar(state(7, total=None)) == "train: 7 it 19.8 it/s"
    assert format_bar(state(3, rate=0.4)) == "train: 3/50 6% 2.50 s/it"
    assert format_bar(state(3, rate=None, desc="")) == "3/50 6%"
    assert format_bar(state(3, postfix="loss=0.25")) == "train: 3/50 6% 19.8 it/s loss=0.25"
    downloaded = state(1_572_864, total=10_485_760, unit="B", unit_scale=True, unit_divisor=1024, rate=2_097_152)
    assert format_bar(downloaded) == "train: 1.50M/10.0M 15% 2.00MB/s"
    assert format_bar(state(49.99)) == "train: 49.99/50 99% 19.8 it/s"  # not 100% before it is


def test_aggregate_takes_the_slowest_rank_and_the_spread() -> None:
    group = aggregate({r: state(20 + r, rate=20.0 - r) for r in range(6)} | {7: state(22, rate=30.0)})
    assert group.ranks == (0, 1, 2, 3, 4, 5, 7)
    assert (group.n_min, group.n_max, group.total, group.rate) == (20, 25, 50, 15.0)
    assert group.percents == (40, 50) and not group.closed
    assert format_group(group) == "[ranks 0-5,7] train: 20-25/50 40%-50% 15.0 it/s"
    assert aggregate({0: state(50, closed=True), 1: state(50, closed=True)}).closed
    with pytest.raises(ValueError):
        aggregate({})


def test_rank_lists_are_written_as_ranges() -> None:
    assert format_ranks([0]) == "rank 0"
    assert format_ranks([3, 1, 2, 0]) == "ranks 0-3"
    assert format_ranks([0, 2, 3, 4, 9]) == "ranks 0,2-4,9"


def test_the_mode_is_grouped_above_two_ranks_and_a_bad_one_is_refused() -> None:
    assert [choose_mode(None, n) for n in (1, 2, 3, 64)] == ["all", "all", "grouped", "grouped"]
    assert choose_mode("rank0", 64) == "rank0"
    with pytest.raises(SpecError) as caught:
        choose_mode("fancy", 2)
    assert (
        str(caught.value)
        == "progress must be one of 'grouped', 'all' or 'rank0', got 'fancy' (e.g. progress='grouped')"
    )
