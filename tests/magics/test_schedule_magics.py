"""``%gpugeek_schedule`` and ``%gpugeek_schedules`` in an in-process shell: bad input is one line
naming the value and an example, as flags; a schedule made here is listed, paused and deleted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from gpugeek_jupyter.magics.schedules import ScheduleMagics
from support.agent import agent_stopped_afterwards


@pytest.fixture
def shell() -> Any:
    shell = InteractiveShell.instance()
    shell.register_magics(ScheduleMagics)
    return shell


BAD_LINES = {
    "--every 1x": (
        "--every must be an interval such as 10s, 30m, 2h, 1d or 1w (units combine: 1h30m), got '1x' (e.g. --every 1d)"
    ),
    "--every 0s": "--every must be at least 1 second, got '0s' (e.g. --every 30m)",
    "--cron '0 25 * * *'": (
        "--cron must be a cron expression of five fields, minute hour day month weekday (bad hour), "
        "got '0 25 * * *' (e.g. --cron '0 2 * * *')"
    ),
    "--cron '0 2 * *'": (
        "--cron must be a cron expression of five fields, minute hour day month weekday (wrong number of fields), "
        "got '0 2 * *' (e.g. --cron '0 2 * * *')"
    ),
    "--cron '0 2 * * *' --timezone Mars/Olympus": (
        "--timezone must be an IANA time zone name, got 'Mars/Olympus' (e.g. --timezone Europe/Berlin)"
    ),
    "--gpu-type cpu": "give one of --every or --cron (e.g. --every 1d)",
    "--every 1d --every-x": None,  # argparse's own one line
    "--every 1d --overlap sometimes": "--overlap must be skip, queue or replace, got 'sometimes' (e.g. --overlap skip)",
    "--every 1d --max-failures 0": "--max-failures must be a whole number >= 1, got 0 (e.g. --max-failures 3)",
    "--every 1d --pool gone": (
        "no running pool named 'gone' for the schedule (launch it with %gpugeek_launch --keep ..., "
        "or give --gpu-type and --count for a pool made for each run)"
    ),
    "--every 1d --pool gone --count 2": (
        "--pool runs on an existing pool, so count cannot apply; give one or the other (e.g. --pool train)"
    ),
    "--every 1d --name Daily_Update": (
        "--name must be lowercase letters, digits and '-', 1-54 characters, starting and ending with a letter "
        "or digit, got 'Daily_Update' (e.g. --name daily-update)"
    ),
    "--every 1d --count 0": "--count must be a whole number from 1 to 1024, got '0' (e.g. --count 4)",
}


@pytest.mark.parametrize("line", sorted(BAD_LINES))
def test_bad_schedule_options_are_one_line_naming_the_value_and_an_example(shell: Any, line: str) -> None:
    with pytest.raises(UsageError) as raised:
        shell.run_cell_magic("gpugeek_schedule", line, "print(rank)")
    message = str(raised.value)
    assert "\n" not in message
    if BAD_LINES[line] is not None:
        assert message == BAD_LINES[line]


def test_the_line_magic_schedules_a_script_and_says_so_without_one(shell: Any) -> None:
    with pytest.raises(UsageError) as raised:
        shell.run_line_magic("gpugeek_schedule", "--every 1d")
    assert str(raised.value) == (
        "%gpugeek_schedule as a line magic schedules a script (e.g. %gpugeek_schedule --script-path train.py "
        "--every 1d --gpu-type cpu --count 2); for notebook code use the cell magic %%gpugeek_schedule"
    )


def test_an_unknown_action_or_schedule_is_one_line(shell: Any) -> None:
    with pytest.raises(UsageError) as raised:
        shell.run_line_magic("gpugeek_schedules", "stop daily")
    assert str(raised.value) == (
        "%gpugeek_schedules takes pause, resume or delete and a schedule's name, got 'stop daily' "
        "(e.g. %gpugeek_schedules pause daily)"
    )
    with pytest.raises(UsageError) as raised:
        shell.run_line_magic("gpugeek_schedules", "pause nightly")
    assert str(raised.value) == "no schedule 'nightly' (%gpugeek_schedules lists them)"


@pytest.fixture
def agent(monkeypatch: pytest.MonkeyPatch, isolated_registry: Path) -> Iterator[None]:
    monkeypatch.setenv("GPUGEEK_AGENT_IDLE", "60")
    with agent_stopped_afterwards():
        yield


@pytest.mark.slow
def test_a_schedule_made_by_the_cell_magic_is_listed_with_its_next_run_paused_and_deleted(
    shell: Any, agent: None, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell_magic("gpugeek_schedule", "--cron '0 2 * * *' --timezone Europe/Berlin --name nightly", "rank")
    said = capsys.readouterr().out
    assert said.startswith("[gpugeek] schedule 'nightly' (sched-") and "runs by cron '0 2 * * *'; next run " in said
    table = shell.run_line_magic("gpugeek_schedules", "")
    assert table.to_dict("records")[0] | {"next run": "?"} == {
        "name": "nightly",
        "status": "active",
        "when": "cron '0 2 * * *' (Europe/Berlin)",
        "next run": "?",
        "last run": "-",
        "job": "-",
        "cost": "-",
    }
    shell.run_line_magic("gpugeek_schedules", "pause nightly")
    paused = shell.run_line_magic("gpugeek_schedules", "").to_dict("records")[0]
    assert (paused["status"], paused["next run"]) == ("paused (paused by the user)", "-")
    shell.run_line_magic("gpugeek_schedules", "delete nightly")
    assert shell.run_line_magic("gpugeek_schedules", "") is None
    assert "no schedules" in capsys.readouterr().out
