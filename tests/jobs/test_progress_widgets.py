"""The ranks' progress bars as ipywidgets bars: one per rank, grouped across ranks, or rank 0's."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gpugeek_jupyter.jobs.progress_text import TextProgress
from gpugeek_jupyter.widgets import progress
from gpugeek_jupyter.widgets.progress import LazyProgressBars, ProgressBars, progress_display


def state(n: float, total: float | None = 50, closed: bool = False, bar: int = 0, **more: Any) -> dict[str, Any]:
    return {
        "id": bar,
        "desc": "train",
        "n": n,
        "total": total,
        "unit": "it",
        "elapsed": 2.0,
        "rate": 10.0,
        "closed": closed,
        **more,
    }


def bars(mode: str, **options: Any) -> tuple[ProgressBars, list[Any]]:
    shown: list[Any] = []
    return ProgressBars(mode, show=shown.append, interval=0.0, **options), shown


def test_all_mode_draws_a_bar_per_rank_and_shows_itself_once() -> None:
    view, shown = bars("all")
    view(0, state(20))
    view(1, state(25))
    assert shown == [view]
    assert view.bar_values() == {
        "train [rank 0]": (20.0, 50.0, "40% 20/50 [00:02<00:03, 10.0 it/s]"),
        "train [rank 1]": (25.0, 50.0, "50% 25/50 [00:02<00:02, 10.0 it/s]"),
    }
    assert [child.bar.bar_style for child in view.children] == ["", ""]


def test_a_closed_bar_finishes_at_100_percent_and_one_stopped_short_stays_red() -> None:
    view, _ = bars("all")
    view(0, state(50, closed=True))
    view(1, state(31, closed=True))  # e.g. the job failed there
    done, stopped = view.children
    assert (done.bar.value, done.bar.max, done.bar.bar_style) == (50.0, 50.0, "success")
    assert (stopped.bar.value, stopped.bar.max, stopped.bar.bar_style) == (31.0, 50.0, "danger")


def test_a_bar_without_a_total_is_full_and_blue_until_it_closes() -> None:
    view, _ = bars("rank0")
    view(0, state(7, total=None))
    ((only),) = view.children
    assert (only.bar.value, only.bar.max, only.bar.bar_style) == (1.0, 1.0, "info")
    assert view.bar_values()["train"][2] == "7 it [00:02, 10.0 it/s]"
    view(0, state(9, total=None, closed=True))
    assert only.bar.bar_style == "success"


def test_grouped_mode_draws_one_bar_per_bar_id_at_the_slowest_ranks_position() -> None:
    view, _ = bars("grouped")
    for rank in range(8):
        view(rank, state(20 + rank % 3 + (rank == 5) * 0.5, bar=0))
        view(rank, state(1, total=3, bar=1, desc="epoch"))
    assert list(view.bar_values()) == ["train [ranks 0-7]", "epoch [ranks 0-7]"]
    value, maximum, text = view.bar_values()["train [ranks 0-7]"]
    assert (value, maximum) == (20.0, 50.0)
    assert text == "40%-45% 20-22.5/50 [00:02<00:03, 10.0 it/s]"
    for rank in range(7):
        view(rank, state(50, closed=True))
    train = view.children[0]
    assert train.bar.bar_style == "" and train.bar.value == 21.0  # rank 7 (at 21) has not finished
    view(7, state(50, closed=True))
    assert (train.bar.value, train.bar.max, train.bar.bar_style) == (50.0, 50.0, "success")
    assert view.bar_values()["train [ranks 0-7]"][2] == "100% 50/50 [00:02, 10.0 it/s]"


def test_rank0_mode_ignores_the_other_ranks() -> None:
    view, _ = bars("rank0")
    view(1, state(10))
    view(0, state(5))
    assert list(view.bar_values()) == ["train"]
    assert view.bar_values()["train"][0] == 5.0


def test_a_bar_made_with_leave_false_goes_once_it_closes() -> None:
    view, _ = bars("all")
    view(0, state(3, total=3, bar=0, desc="epoch"))
    view(0, state(10, bar=1, leave=False))
    assert len(view.children) == 2
    view(0, state(50, bar=1, closed=True, leave=False))
    assert list(view.bar_values()) == ["epoch [rank 0]"]


def test_redraws_are_throttled_and_what_was_held_back_is_drawn_after_the_interval() -> None:
    view, _ = bars("all")
    view._interval = 0.2
    view(0, state(1))
    view(0, state(2))  # within the interval: held back
    assert view.bar_values()["train [rank 0]"][0] == 1.0
    deadline = time.monotonic() + 5
    while view.bar_values()["train [rank 0]"][0] != 2.0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert view.bar_values()["train [rank 0]"][0] == 2.0
    view(0, state(50, closed=True))  # a closed state is drawn at once
    assert view.bar_values()["train [rank 0]"][0] == 50.0


def test_outside_a_kernel_progress_display_writes_text() -> None:
    shown = progress_display(None, world_size=8)
    assert isinstance(shown, TextProgress) and shown.mode == "grouped"
    assert progress_display("rank0", world_size=8).mode == "rank0"  # type: ignore[attr-defined]


def test_in_a_kernel_no_widget_is_made_until_a_rank_opens_a_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    from ipywidgets.widgets.widget import _instances

    monkeypatch.setattr(progress, "in_kernel", lambda: True)
    before = set(_instances)
    callback = progress_display("all", world_size=2)
    assert isinstance(callback, LazyProgressBars) and callback.bars is None
    assert set(_instances) == before  # a cell whose ranks open no bar sends no widget
    shown: list[Any] = []
    lazy = LazyProgressBars("all", show=shown.append, interval=0.0)
    lazy(1, state(5))
    lazy(0, state(20))
    assert lazy.bars is not None and shown == [lazy.bars]
    assert sorted(lazy.bars.bar_values()) == ["train [rank 0]", "train [rank 1]"]
