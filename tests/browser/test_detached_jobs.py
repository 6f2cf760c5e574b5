"""A detached job in the side panel of a real JupyterLab: still listed running, first, after the Jupyter
server was restarted mid-job, and a JupyterLab notification when it ends; a second one cancelled
by the panel's Cancel button. The jobs run in the user's agent, started by the notebook kernel that
submitted them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.agent import agent_stopped_afterwards
from support.kernel import KernelSession
from support.lab_server import LabServer, start_lab
from support.panel import READY_TIMEOUT_MS, expect, open_panel, widen_sidebar

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CELL = """%%gpugeek_run --detach
import os, time
deadline = time.monotonic() + 120
while not os.path.exists({release!r}) and time.monotonic() < deadline:
    time.sleep(0.2)
print("released on", rank)
"""


@pytest.fixture
def lab_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("lab")
    monkeypatch.setenv("GPUGEEK_REGISTRY", str(home / "gpugeek.sqlite"))  # this test's agent is that registry's
    with agent_stopped_afterwards():
        yield home


@pytest.mark.timeout(300)
def test_a_detached_job_is_listed_running_after_a_server_restart_and_its_end_is_notified(
    page: Any, lab_home: Path, tmp_path: Path, artifacts: Path
) -> None:
    registry = lab_home / "gpugeek.sqlite"
    release = tmp_path / "release"
    first: LabServer | None = start_lab(lab_home, registry)
    kernel = KernelSession(
        env={"GPUGEEK_REGISTRY": str(registry), "GPUGEEK_HEARTBEAT": "0.5", "GPUGEEK_AGENT_IDLE": "60"}
    )
    try:
        launched = kernel.run(
            "%load_ext gpugeek_jupyter\n%gpugeek_launch --gpu-type cpu --count 2 --name kept --keep --quiet",
            timeout=180,
        )
        assert launched.error is None, launched.text
        submitted = kernel.run(CELL.format(release=str(release)), timeout=60)
        job_id = re.search(r"(job-[0-9a-f]{12}) runs on pool 'kept', detached", submitted.stdout)
        assert job_id, submitted.text
        job = job_id.group(1)
        assert first is not None
        left = first.stop()  # the server goes; the job, in the agent, goes on
        assert left == [], left
        first = None
        second = start_lab(lab_home, registry)
        try:
            panel = open_panel(page, second)
            widen_sidebar(page, 720)
            rows = panel.locator(".gpugeek-job-row")
            expect(rows.first).to_have_attribute("data-job-id", job, timeout=READY_TIMEOUT_MS)
            expect(rows.first.locator(".gpugeek-status")).to_have_text("running")
            page.screenshot(path=str(artifacts / "detached-running.png"))

            release.touch()
            ended = panel.locator(f'.gpugeek-job-row[data-job-id="{job}"] .gpugeek-status')
            expect(ended).to_have_text("succeeded", timeout=READY_TIMEOUT_MS)
            page.screenshot(path=str(artifacts / "detached-ended.png"))
            toast = page.locator(".Toastify__toast").filter(has_text=f"Job {job} on pool kept succeeded")
            expect(toast).to_have_count(1, timeout=10_000)

            # a second one, never released, is cancelled from the panel's Cancel button
            held = kernel.run(CELL.format(release=str(tmp_path / "never")), timeout=60)
            held_id = re.search(r"(job-[0-9a-f]{12}) runs on pool 'kept', detached", held.stdout)
            assert held_id, held.text
            held_row = panel.locator(f'.gpugeek-job-row[data-job-id="{held_id.group(1)}"]')
            expect(held_row.locator(".gpugeek-status")).to_have_text("running", timeout=READY_TIMEOUT_MS)
            held_row.locator(".gpugeek-job-cancel-button").click()
            expect(held_row.locator(".gpugeek-status")).to_have_text("cancelled", timeout=15_000)
            expect(held_row.locator(".gpugeek-job-cancel-button")).to_have_count(0)
            page.screenshot(path=str(artifacts / "detached-cancelled.png"))
        finally:
            left = second.stop()
            assert left == [], left
    finally:
        release.touch()
        if first is not None:
            first.stop()
        kernel.run("%gpugeek_stop kept", timeout=120)
        kernel.shutdown()
