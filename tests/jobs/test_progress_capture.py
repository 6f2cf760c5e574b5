"""A rank's tqdm bars send their states as events instead of writing ``\\r``-redrawn text.

The unit tests run a real tqdm loop on a thread inside :func:`capture.captured`, with a real
:class:`~gpugeek_jupyter.jobs.capture.Forwarder` and a real event loop for its timers; the worker
is an event log (what ``Worker.log_event`` would publish). The last test runs a cell on a real pool.
"""

from __future__ import annotations

import asyncio
import io
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpugeek_jupyter.jobs import capture, run_cell
from gpugeek_jupyter.jobs.capture import PROGRESS_INTERVAL_S, Forwarder
from gpugeek_jupyter.jobs.payload import OUTPUT_TOPIC

tqdm = pytest.importorskip("tqdm")


class EventLog:
    """Stands in for the dask worker: keeps what ``log_event`` would publish, with when."""

    def __init__(self) -> None:
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def log_event(self, topic: str, message: dict[str, Any]) -> None:
        assert topic == OUTPUT_TOPIC
        with self.lock:
            self.events.append((time.monotonic(), message))

    def progress(self) -> list[tuple[float, dict[str, Any]]]:
        return [(t, m["progress"]) for t, m in self.events if "progress" in m]

    def text(self) -> str:
        return "".join(m["text"] for _, m in self.events if "text" in m)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop on its own thread, as a worker's is (the forwarder's timers run there)."""
    event_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=event_loop.run_forever, daemon=True)
    thread.start()
    yield event_loop
    event_loop.call_soon_threadsafe(event_loop.stop)
    thread.join(5)
    event_loop.close()


def run_as_job(
    loop: asyncio.AbstractEventLoop, body: Callable[[], None], stream: bool = True
) -> tuple[Forwarder, EventLog]:
    """Run ``body`` on a thread of its own, as a rank runs a cell: inside ``captured``."""
    worker = EventLog()
    forwarder = Forwarder(worker, loop, "job-1", "launch-1", 3, stream)
    failures: list[BaseException] = []

    def rank_thread() -> None:
        try:
            with capture.captured(forwarder):
                body()
                forwarder.flush()
        except BaseException as e:
            failures.append(e)

    thread = threading.Thread(target=rank_thread)
    thread.start()
    thread.join(30)
    assert not failures, failures
    return forwarder, worker


def test_a_tqdm_loop_sends_at_most_ten_states_a_second_then_its_final_state_closed(
    loop: asyncio.AbstractEventLoop, capfd: pytest.CaptureFixture[str]
) -> None:
    def body() -> None:
        for _ in tqdm.tqdm(range(50), desc="train", mininterval=0):  # tqdm itself would redraw 50 times
            time.sleep(0.01)

    started = time.monotonic()
    forwarder, worker = run_as_job(loop, body)
    took = time.monotonic() - started
    states = worker.progress()
    assert all(m["job"] == "job-1" and m["launch"] == "launch-1" and m["rank"] == 3 for _, m in worker.events)
    assert forwarder.sent == len(worker.events)  # what the rank's answer says it sent
    *running, (_, final) = states
    gaps = [later - earlier for (earlier, _), (later, _) in zip(running, running[1:])]
    assert all(gap >= PROGRESS_INTERVAL_S * 0.9 for gap in gaps), gaps
    assert 3 <= len(running) <= took / PROGRESS_INTERVAL_S + 2, len(running)
    assert not any(s["closed"] for _, s in running)
    assert final["closed"] and final["n"] == final["total"] == 50
    assert final["id"] == 0 and final["desc"] == "train" and final["unit"] == "it" and final["rate"] > 0
    assert final["elapsed"] >= 0.5
    out, err = capfd.readouterr()
    assert out == "" and err == "" and worker.text() == ""  # no text of the bar anywhere


def test_every_kind_of_tqdm_bar_is_taken_over_and_tqdm_notebook_makes_no_widget(
    loop: asyncio.AbstractEventLoop, capfd: pytest.CaptureFixture[str]
) -> None:
    import tqdm.auto
    import tqdm.notebook
    import tqdm.std

    made: list[Any] = []

    def body() -> None:
        for bar in (
            tqdm.tqdm(range(3), desc="tqdm"),
            tqdm.auto.tqdm(range(3), desc="auto"),
            tqdm.notebook.tqdm(range(3), desc="notebook"),
            tqdm.std.tqdm(range(3), desc="std"),
            tqdm.trange(3, desc="trange"),
            tqdm.auto.trange(3, desc="auto.trange"),
            tqdm.notebook.trange(3, desc="notebook.trange"),
        ):
            made.append(bar)
            for _ in bar:
                pass

    _, worker = run_as_job(loop, body)
    finals = [s for _, s in worker.progress() if s["closed"]]
    assert [(s["id"], s["desc"], s["n"], s["total"]) for s in finals] == [
        (0, "tqdm", 3, 3),
        (1, "auto", 3, 3),
        (2, "notebook", 3, 3),
        (3, "std", 3, 3),
        (4, "trange", 3, 3),
        (5, "auto.trange", 3, 3),
        (6, "notebook.trange", 3, 3),
    ]
    assert not any(hasattr(bar, "container") for bar in made)  # tqdm.notebook's widget box
    out, err = capfd.readouterr()
    assert out == "" and err == "" and worker.text() == ""


def test_tqdm_is_as_it_was_once_the_job_has_ended(loop: asyncio.AbstractEventLoop) -> None:
    import tqdm.notebook
    import tqdm.std

    def methods(cls: type) -> dict[str, Any]:
        return dict(vars(cls))

    before = methods(tqdm.std.tqdm), methods(tqdm.notebook.tqdm_notebook)
    run_as_job(loop, lambda: list(tqdm.notebook.tqdm(range(2))))
    assert (methods(tqdm.std.tqdm), methods(tqdm.notebook.tqdm_notebook)) == before
    file = io.StringIO()
    list(tqdm.tqdm(range(2), file=file, desc="after"))
    assert "\r" in file.getvalue() and "after: 100%" in file.getvalue()  # tqdm writes its text again


def test_print_and_tqdm_write_still_reach_the_output(
    loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    def body() -> None:
        for i in tqdm.tqdm(range(2)):
            tqdm.tqdm.write(f"step {i}")
        print("done")

    monkeypatch.setattr(sys, "stdout", capture._RoutedStream(sys.stdout, "stdout"))  # as on a worker
    _, worker = run_as_job(loop, body)
    assert worker.text() == "step 0\nstep 1\ndone\n"
    assert [s["n"] for _, s in worker.progress() if s["closed"]] == [2]


def test_a_bar_left_open_sends_its_final_state_when_the_job_ends(loop: asyncio.AbstractEventLoop) -> None:
    kept: list[Any] = []

    def body() -> None:
        bar = tqdm.tqdm(total=10, desc="manual")
        bar.update(4)
        bar.set_postfix(loss=0.25)
        kept.append(bar)  # never closed, still referenced when the job ends

    _, worker = run_as_job(loop, body)
    final = worker.progress()[-1][1]
    assert final["closed"] and final["n"] == 4 and final["total"] == 10 and final["postfix"] == "loss=0.25"
    kept[0].close()  # after the job: silent, and nothing more is sent
    assert worker.progress()[-1][1] is final


def test_states_held_back_by_the_throttle_go_out_when_the_interval_is_over(loop: asyncio.AbstractEventLoop) -> None:
    def body() -> None:
        bar = tqdm.tqdm(total=10, desc="slow", mininterval=0)
        bar.update(7)  # right after the first state: held back
        time.sleep(PROGRESS_INTERVAL_S * 3)  # the loop stalls; the held-back state must not wait for it
        bar.close()

    _, worker = run_as_job(loop, body)
    states = [s for _, s in worker.progress()]
    assert [(s["n"], s["closed"]) for s in states] == [(0, False), (7, False), (7, True)]


def test_no_stream_collects_a_bars_final_state_as_one_line(loop: asyncio.AbstractEventLoop) -> None:
    def body() -> None:
        for _ in tqdm.tqdm(range(20), desc="train"):
            pass

    forwarder, worker = run_as_job(loop, body, stream=False)
    assert worker.events == [] and forwarder.sent == 0
    ((stream, text),) = forwarder.collected
    assert stream == "stderr" and text.startswith("train: 20/20 100% ") and text.endswith(" it/s\n")
    assert "\r" not in text


def test_a_bar_with_its_own_file_or_disabled_is_left_alone(loop: asyncio.AbstractEventLoop) -> None:
    log = io.StringIO()

    def body() -> None:
        list(tqdm.tqdm(range(3), file=log, desc="to a file"))
        list(tqdm.tqdm(range(3), disable=True, desc="disabled"))
        list(tqdm.tqdm(range(3), desc="shown"))

    _, worker = run_as_job(loop, body)
    assert "to a file: 100%" in log.getvalue()
    assert {(s["id"], s["desc"]) for _, s in worker.progress()} == {(0, "shown")}  # numbered from 0


def test_without_tqdm_a_job_runs_as_before(loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm.std", None)  # import tqdm.std raises ImportError
    ran: list[bool] = []
    forwarder, worker = run_as_job(loop, lambda: ran.append(True))
    assert ran == [True] and worker.events == []


def test_the_ranks_bars_reach_on_progress_before_run_cell_returns(pool: Any) -> None:
    cell = "import time\nfrom tqdm import tqdm\nfor _ in tqdm(range(30), desc='train'):\n    time.sleep(0.01)\n"
    states: dict[int, list[dict[str, Any]]] = {}
    output: list[str] = []
    result = run_cell(
        pool,
        cell,
        {},
        on_output=lambda rank, stream, text: output.append(text),
        on_progress=lambda rank, state: states.setdefault(rank, []).append(state),
    )
    assert result.ok, result.failure
    assert sorted(states) == [0, 1]
    for rank_states in states.values():  # all there when run_cell returns: the drain waited for them
        final = rank_states[-1]
        assert final["closed"] and final["n"] == final["total"] == 30 and final["desc"] == "train"
        assert not any(s["closed"] for s in rank_states[:-1])
    assert "".join(output) == ""  # the bars wrote no text
