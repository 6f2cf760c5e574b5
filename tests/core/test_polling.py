"""poll_until / apoll_until: the one deadline-and-sleep loop (gpugeek_jupyter/polling.py)."""

from __future__ import annotations

import asyncio

import pytest

from gpugeek_jupyter.polling import PollTimeout, apoll_until, poll_until


class FakeClock:
    """A clock that moves only when the loop sleeps, so the tests count polls, not seconds."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_returns_the_first_true_answer_after_sleeping_the_interval_between_asks() -> None:
    clock, answers = FakeClock(), iter([None, 0, "ready"])
    assert (
        poll_until(lambda: next(answers), timeout=10, interval=0.5, what="x", clock=clock, sleep=clock.sleep) == "ready"
    )
    assert clock.sleeps == [0.5, 0.5]


def test_asks_once_more_after_the_deadline_before_giving_up() -> None:
    clock, asked = FakeClock(), []

    def condition() -> bool:
        asked.append(clock.now)
        return clock.now > 1.0  # true only on the ask after the deadline

    assert poll_until(condition, timeout=1.0, interval=0.6, what="x", clock=clock, sleep=clock.sleep)
    assert asked == [0.0, 0.6, 1.2]


def test_timeout_names_what_was_waited_for() -> None:
    clock = FakeClock()
    with pytest.raises(PollTimeout, match=r"^pool 'dev' to stop: not done within 2 s$"):
        poll_until(lambda: False, timeout=2, interval=1, what="pool 'dev' to stop", clock=clock, sleep=clock.sleep)
    assert clock.sleeps == [1, 1, 1]  # asked at 0, 1, 2 and once past the deadline, at 3


def test_timeout_raises_the_callers_exception() -> None:
    clock = FakeClock()
    with pytest.raises(KeyError, match="mine"):
        poll_until(
            lambda: None,
            timeout=1,
            interval=1,
            what="x",
            on_timeout=lambda: KeyError("mine"),
            clock=clock,
            sleep=clock.sleep,
        )


def test_an_error_of_the_condition_ends_the_wait_at_once() -> None:
    clock = FakeClock()

    def condition() -> bool:
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        poll_until(condition, timeout=60, interval=1, what="x", clock=clock, sleep=clock.sleep)
    assert clock.sleeps == []


def test_the_coroutine_form_polls_without_blocking_the_loop() -> None:
    async def main() -> tuple[str, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        side = asyncio.create_task(ticker())
        answers = iter([None, None, "up"])

        async def condition() -> str | None:
            return next(answers)

        result = await apoll_until(condition, timeout=5, interval=0.01, what="x")
        side.cancel()
        return result, ticks

    result, ticks = asyncio.run(main())
    assert result == "up"
    assert ticks >= 2  # the other task ran while the condition was waited for


def test_the_coroutine_form_times_out_with_the_callers_exception() -> None:
    async def never() -> None:
        return None

    with pytest.raises(ConnectionError, match="silent"):
        asyncio.run(apoll_until(never, timeout=0, interval=0, what="x", on_timeout=lambda: ConnectionError("silent")))
