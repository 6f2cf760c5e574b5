"""Every tutorial notebook runs top to bottom in a real kernel on a CPU-only machine."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError

from support.agent import agent_stopped_afterwards

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9][0-9]-*.ipynb"))

pytestmark = pytest.mark.slow


def test_there_are_tutorial_notebooks() -> None:
    assert NOTEBOOKS, "notebooks/ has no numbered tutorial"


CELL_TIMEOUT_S = 180  # per cell; under the test's own limit, so that a stuck cell is named with its output


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom_without_errors(path: Path, tmp_path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), f"{path.name} is stored with outputs"
    client = NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    try:
        with agent_stopped_afterwards():  # one a notebook started (kept pools, schedules), by its pid
            client.execute()  # raises CellExecutionError naming the cell that failed
    except CellTimeoutError as e:  # it names the cell; add what the notebook printed last
        printed = [c.get("outputs") for c in nb.cells if c.cell_type == "code" and c.get("outputs")]
        raise AssertionError(f"{path.name}: {e}\nlast outputs: {printed[-2:]}") from None
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert errors == []
