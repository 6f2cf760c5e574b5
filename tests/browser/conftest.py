"""Fixtures for the browser tests: a real ``jupyter lab`` (Chromium and its pages: support/browser.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.lab_server import LabServer, start_lab


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    """One ``jupyter lab`` for the module, with its own registry; stopped with no process left behind."""
    home = tmp_path_factory.mktemp("lab")
    server = start_lab(home, home / "gpugeek.sqlite")
    yield server
    left = server.stop()
    assert left == [], f"processes left after jupyter lab stopped: {left}\n{server.log_tail()}"
