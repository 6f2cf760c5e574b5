"""Training metrics from the ranks (``gg.log``): checked on the rank, kept with the job, read back.

The first tests need no process; the last ones run cells and a script on a real 2-worker pool.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import gpugeek_jupyter
from gpugeek_jupyter.jobs import capture, run_cell
from gpugeek_jupyter.jobs.capture import Forwarder
from gpugeek_jupyter.jobs.events import RankMetrics, rank_event
from gpugeek_jupyter.jobs.logs import JobLogs, MetricsFile, logs_root
from gpugeek_jupyter.jobs.metrics import METRICS_FILE, check_values, metrics_frame, read_rows


# -- checks -------------------------------------------------------------------------------------------
def test_a_value_that_is_not_a_number_is_named_with_an_example() -> None:
    with pytest.raises(
        TypeError, match=r"^gg.log: loss must be a number, got 'high' \(e.g. gg.log\(step=7, loss=0.25\)\)$"
    ):
        check_values(7, {"loss": "high"})
    with pytest.raises(TypeError, match=r"gg.log: acc must be a number, got None"):
        check_values(7, {"acc": None})
    with pytest.raises(TypeError, match=r"gg.log: w must be a number, got \[1, 2\]"):
        check_values(7, {"w": [1, 2]})


def test_a_step_that_is_not_a_whole_number_from_zero_is_refused() -> None:
    for bad in (-1, 1.5, "3", True, None):
        with pytest.raises(ValueError, match=rf"gg.log: step must be a whole number >= 0, got {bad!r}"):
            check_values(bad, {"loss": 1.0})
    with pytest.raises(ValueError, match=r"gg.log: no value to log at step 4 \(e.g. gg.log\(step=4, loss=0.25\)\)"):
        check_values(4, {})


def test_numbers_of_any_kind_are_floats_and_a_nan_is_kept() -> None:
    torch = pytest.importorskip("torch")
    rows = check_values(2, {"a": 1, "b": float("nan"), "c": torch.tensor(0.5), "d": torch.tensor([3.0])}, now=9.0)
    assert [(s, t, n) for s, t, n, _ in rows] == [(2, 9.0, "a"), (2, 9.0, "b"), (2, 9.0, "c"), (2, 9.0, "d")]
    values = [v for *_, v in rows]
    assert values[0] == 1.0 and math.isnan(values[1]) and values[2:] == [0.5, 3.0]
    with pytest.raises(TypeError, match="gg.log: e must be a number, got tensor"):
        check_values(2, {"e": torch.zeros(3)})


def test_outside_a_job_values_are_checked_and_nothing_is_kept() -> None:
    gpugeek_jupyter.log(step=0, loss=1.0)
    with pytest.raises(TypeError, match="gg.log: loss must be a number"):
        gpugeek_jupyter.log(step=0, loss="x")


# -- the rank's side: buffered, sent in batches ------------------------------------------------------
class EventLog:
    """Stands in for the dask worker: keeps what ``log_event`` would publish."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def log_event(self, topic: str, message: dict[str, Any]) -> None:
        self.messages.append(message)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    event_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=event_loop.run_forever, daemon=True)
    thread.start()
    yield event_loop
    event_loop.call_soon_threadsafe(event_loop.stop)
    thread.join(5)
    event_loop.close()


def test_a_thousand_steps_go_out_in_few_messages_each_counted_as_sent(loop: asyncio.AbstractEventLoop) -> None:
    worker = EventLog()
    forwarder = Forwarder(worker, loop, "job-1", "launch-1", 1, stream=False)  # --no-stream: metrics still go
    with capture.captured(forwarder):
        for step in range(1000):
            gpugeek_jupyter.log(step=step, loss=1.0 / (step + 1), lr=0.1)
        forwarder.flush()
    batches = [m for m in worker.messages if "metrics" in m]
    assert 1 <= len(batches) <= 3  # 2000 rows: one full batch, maybe one more from the timer
    assert forwarder.sent == len(worker.messages)
    events = [rank_event(m) for m in batches]
    assert all(isinstance(e, RankMetrics) and e.rank == 1 and e.launch == "launch-1" for e in events)
    rows = [row for e in events for row in e.rows]  # type: ignore[union-attr]
    assert [(s, n) for s, _, n, _ in rows] == [(s, n) for s in range(1000) for n in ("loss", "lr")]


# -- the driver's side: kept, bounded, read back ----------------------------------------------------------
def test_kept_rows_stay_under_the_limit_and_span_the_whole_run(tmp_path: Path) -> None:
    kept = MetricsFile(tmp_path / METRICS_FILE, limit=1000)
    for step in range(100_000):
        kept.write(0, 0, [(step, 0.0, "loss", float(step))])
    kept.close()
    steps = [step for _, _, step, *_ in read_rows(tmp_path)]
    assert 500 < len(steps) <= 1000
    assert steps[:500] == list(range(500))  # the start at full grain
    assert steps[-1] >= 95_000  # and the end, coarser


def test_each_attempt_and_rank_is_kept_apart_and_read_as_a_tidy_frame() -> None:
    logs = JobLogs("job-0000abcd")
    logs.write_metrics(0, [(0, 1.0, "loss", 2.0), (0, 1.0, "acc", float("nan"))])
    logs.write_metrics(1, [(0, 1.5, "loss", 2.5)])
    logs.mark_attempt(1)
    logs.write_metrics(0, [(0, 3.0, "loss", 1.0)])
    logs.close()
    frame = metrics_frame("job-0000abcd")
    assert list(frame.columns) == ["job", "attempt", "rank", "step", "time", "name", "value"]
    assert frame[["attempt", "rank", "name"]].values.tolist() == [
        [0, 0, "loss"],
        [0, 0, "acc"],
        [0, 1, "loss"],
        [1, 0, "loss"],
    ]
    assert math.isnan(frame.value[1]) and frame.value[3] == 1.0
    assert str(frame.time.dt.tz) == "UTC" and frame.time[0].timestamp() == 1.0
    assert metrics_frame("job-00000000").empty  # no metrics: an empty frame with the same columns


# -- real ranks --------------------------------------------------------------------------------------------
TRAINING = """
import time
for step in range(30):
    t0 = time.perf_counter()
    loss = 1.0 / (step + 1) + rank
    time.sleep(0.002)
    gg.log(step=step, loss=loss, step_s=time.perf_counter() - t0)
"""


def test_a_two_rank_cell_keeps_every_logged_value_with_the_job(pool: Any) -> None:
    result = run_cell(pool, TRAINING, {}, timeout=120)
    assert result.ok, result.failure
    frame = result.metrics()
    assert len(frame) == 2 * 30 * 2
    assert set(frame.job) == {result.job_id} and set(frame.attempt) == {0}
    loss = frame[frame.name == "loss"].pivot(index="step", columns="rank", values="value")
    assert list(loss.columns) == [0, 1] and list(loss.index) == list(range(30))
    assert loss[0].tolist() == pytest.approx([1.0 / (s + 1) for s in range(30)])
    assert loss[1].tolist() == pytest.approx([1.0 / (s + 1) + 1 for s in range(30)])
    assert (frame[frame.name == "step_s"].value > 0).all()
    same = gpugeek_jupyter.job(result.job_id).metrics()
    assert same.equals(frame)
    lines = (logs_root() / result.job_id / METRICS_FILE).read_text().splitlines()
    assert all(json.loads(line)["rank"] in (0, 1) for line in lines)


def test_a_bad_value_fails_the_rank_with_the_one_line_message(pool: Any) -> None:
    result = run_cell(pool, "gg.log(step=rank, loss='nan?')", {}, timeout=120)
    assert not result.ok
    assert "gg.log: loss must be a number, got 'nan?' (e.g. gg.log(step=0, loss=0.25))" in (result.failure or "")


def test_a_script_logs_through_the_package(pool: Any, in_tmp: Path) -> None:
    from gpugeek_jupyter.jobs import run_script

    (in_tmp / "train.py").write_text(
        "import os\nimport gpugeek_jupyter\n"
        "for step in range(5):\n    gpugeek_jupyter.log(step=step, loss=float(os.environ['RANK']) + step)\n"
    )
    result = run_script(pool, "train.py", timeout=120)
    assert result.ok, result.failure
    frame = result.metrics()
    assert sorted(frame[frame.step == 4].value) == [4.0, 5.0]
