"""A rank's messages on the output topic read as typed job events."""

from __future__ import annotations

import pytest

from gpugeek_jupyter.jobs.events import RankEnded, RankOutput, RankProgress, rank_event


def test_a_line_a_rank_printed_is_rank_output() -> None:
    message = {"job": "j", "launch": "ab12", "rank": 1, "seq": 3, "stream": "stderr", "text": "warn\n"}
    assert rank_event(message) == RankOutput(launch="ab12", rank=1, stream="stderr", text="warn\n", seq=3)


def test_a_progress_bars_state_is_rank_progress() -> None:
    state = {"id": 0, "desc": "epoch", "n": 3, "total": 10, "closed": False}
    message = {"job": "j", "launch": "ab12", "rank": 0, "seq": 0, "progress": state}
    assert rank_event(message) == RankProgress(launch="ab12", rank=0, progress=state, seq=0)


def test_an_early_end_notice_is_rank_ended() -> None:
    assert rank_event({"job": "j", "launch": "ab12", "rank": 2, "ended": "failed"}) == RankEnded("ab12", 2, "failed")


def test_a_message_of_another_shape_is_refused() -> None:
    with pytest.raises(KeyError):
        rank_event({"job": "j", "launch": "ab12", "rank": 0})
