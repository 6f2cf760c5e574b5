"""The side panel's launch form makes Slurm pools: its Slurm fields, in real Chromium, against the
one-host Slurm (the server submits the batch jobs with what the form asked for)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm.one_host import SECOND_PARTITION, OneHostSlurm
from support.lab_server import LabServer, start_lab
from support.panel import READY_TIMEOUT_MS, expect, fill_launch_form, open_panel, pool_row, stop_from_panel

pytestmark = pytest.mark.slow


@pytest.fixture
def slurm_lab(slurm: OneHostSlurm, tmp_path: Path) -> Iterator[LabServer]:
    """A ``jupyter lab`` started after the Slurm fixture set SLURM_CONF and the shared directory."""
    server = start_lab(tmp_path / "lab", tmp_path / "lab" / "gpugeek.sqlite")
    yield server
    left = server.stop()
    assert left == [], f"processes left after jupyter lab stopped: {left}\n{server.log_tail()}"


def test_the_panel_launches_a_slurm_pool_with_its_partition_and_walltime_and_stops_it(
    page: Any, slurm_lab: LabServer, slurm: OneHostSlurm, artifacts: Path
) -> None:
    panel = open_panel(page, slurm_lab)
    form = panel.locator(".gpugeek-launch-form")
    walltime = form.locator('.gpugeek-field[data-field="walltime"]')
    expect(walltime).to_be_hidden()  # a local pool has no Slurm fields
    fill_launch_form(panel, backend="slurm")
    expect(walltime).to_be_visible()

    fill_launch_form(panel, gpu_type="cpu", count="2", name="from-panel", walltime="4h", partition=SECOND_PARTITION)
    panel.locator(".gpugeek-launch-button").click()
    expect(walltime.locator(".gpugeek-field-error")).to_have_text(  # in the form's own label
        "Walltime must be a Slurm time limit (minutes, HH:MM:SS or D-HH:MM:SS), got '4h' (e.g. 04:00:00)"
    )
    assert slurm.run("squeue", "-h", "-o", "%i").stdout.split() == []  # nothing submitted

    fill_launch_form(panel, walltime="00:30:00")
    panel.locator(".gpugeek-launch-button").click()
    row = pool_row(panel, "from-panel")
    expect(row.locator(".gpugeek-status")).to_have_text("ready", timeout=READY_TIMEOUT_MS)
    page.screenshot(path=str(artifacts / "slurm-pool-from-panel.png"))
    jobs = slurm.run("squeue", "-h", "-n", "gpugeek-from-panel", "-o", "%P|%l|%T").stdout.split()
    assert jobs == [f"{SECOND_PARTITION}|30:00|RUNNING"] * 2, jobs  # what the form asked for

    stop_from_panel(panel, "from-panel")
    assert slurm.wait_for_no_jobs(30) == []  # stopping the pool cancelled its jobs
