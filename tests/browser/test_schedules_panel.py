"""The schedules sidebar of a real JupyterLab (Chromium): a schedule made from Python is listed with
its next run, and once it runs, with its last run's outcome and job."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.agent import agent_stopped_afterwards
from support.lab_server import LabServer, start_lab
from support.panel import READY_TIMEOUT_MS, expect

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TAB = 'li[data-id="gpugeek-schedules-panel"]'
PANEL = "#gpugeek-schedules-panel"


@pytest.fixture
def lab_with_agent(isolated_registry: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LabServer]:
    monkeypatch.setenv("GPUGEEK_AGENT_IDLE", "60")
    with agent_stopped_afterwards():
        server = start_lab(tmp_path / "lab", isolated_registry)
        try:
            yield server
        finally:
            left = server.stop()
            assert left == [], f"processes left after jupyter lab stopped: {left}"


@pytest.mark.timeout(300)
def test_the_schedules_sidebar_lists_a_schedule_with_its_next_run_and_then_its_last_run(
    page: Any, lab_with_agent: LabServer, artifacts: Path
) -> None:
    import gpugeek_jupyter

    nightly = gpugeek_jupyter.schedule(
        cell="rank", cron="0 2 * * *", timezone="Europe/Berlin", name="nightly", namespace={}
    )
    quick = gpugeek_jupyter.schedule(cell="rank", every="1h", name="hourly", gpu_type="cpu", count=1, namespace={})

    page.goto(lab_with_agent.lab_url)
    page.locator(TAB).wait_for()
    page.locator("#jupyterlab-splash").wait_for(state="detached")
    if not page.locator(PANEL).is_visible():
        page.locator(TAB).click()
    panel = page.locator(PANEL)
    expect(panel).to_be_visible()

    row = panel.locator('.gpugeek-schedule[data-schedule="nightly"]')
    expect(row).to_be_visible(timeout=READY_TIMEOUT_MS)
    expect(row.locator(".gpugeek-schedule-when")).to_have_text("cron '0 2 * * *' (Europe/Berlin)")
    expect(row.locator(".gpugeek-schedule-next")).to_have_text(re.compile(r"^next run in (\d+h \d\dm|\d+m \d\ds)$"))
    expect(row.locator(".gpugeek-schedule-last")).to_have_text("last run no run yet")

    hourly = panel.locator('.gpugeek-schedule[data-schedule="hourly"]')  # an interval's first run is now
    job_text = re.compile(r"^last run succeeded \(job-[0-9a-f]{12}, \$\d+\.\d{4}\)$")
    expect(hourly.locator(".gpugeek-schedule-last")).to_have_text(job_text, timeout=120_000)
    expect(hourly.locator(".gpugeek-schedule-next")).to_have_text(re.compile(r"^next run in (1h 00m|\d+m \d\ds)$"))
    page.screenshot(path=str(artifacts / "schedules-sidebar.png"))
    quick.delete()

    # the row's buttons: Pause, then Resume; Delete asks first, and Enter keeps the schedule
    row.locator(".gpugeek-schedule-pause").click()
    expect(row.locator(".gpugeek-schedule-status")).to_have_text("paused: paused by the user")
    expect(row.locator(".gpugeek-schedule-next")).to_have_text("next run –")
    assert nightly.record().status.value == "paused"
    row.locator(".gpugeek-schedule-resume").click()
    expect(row.locator(".gpugeek-schedule-status")).to_have_text("active")
    assert nightly.record().status.value == "active"
    row.locator(".gpugeek-schedule-delete").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Delete schedule nightly?")
    page.keyboard.press("Enter")
    expect(dialog).to_have_count(0)
    assert nightly.record().status.value == "active"
    row.locator(".gpugeek-schedule-delete").click()
    page.locator(".jp-Dialog .jp-mod-warn").click()
    expect(row).to_have_count(0)
    assert nightly.record().status.value == "deleted"
