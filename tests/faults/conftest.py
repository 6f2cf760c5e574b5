"""Fault scenarios report runs / survived / data lost; the table is printed at the end of the run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest


@dataclass
class ScenarioTally:
    scenario: str
    runs: int = 0
    survived: int = 0
    data_lost: int = 0

    def record(self, survived: bool, data_lost: int = 0) -> None:
        self.runs += 1
        self.survived += int(survived)
        self.data_lost += data_lost


_TALLIES: dict[str, ScenarioTally] = {}


@pytest.fixture
def scenario(request: pytest.FixtureRequest) -> Iterator[ScenarioTally]:
    """A tally for this test's scenario (named by the test's docstring's first line)."""
    name = (request.function.__doc__ or request.node.name).strip().splitlines()[0]
    tally = _TALLIES.setdefault(name, ScenarioTally(name))
    yield tally


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    if not _TALLIES:
        return
    terminalreporter.section("fault scenarios")
    terminalreporter.write_line(f"| {'scenario':70} | runs | survived | data lost |")
    terminalreporter.write_line(f"|{'-' * 72}|------|----------|-----------|")
    for t in _TALLIES.values():
        terminalreporter.write_line(f"| {t.scenario:70} | {t.runs:4} | {t.survived:8} | {t.data_lost:9} |")
