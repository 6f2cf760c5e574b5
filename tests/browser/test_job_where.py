"""The side panel's Where button on a job a notebook kernel is running, in a real JupyterLab.

Screenshots go to ``test-artifacts/browser/<test>/``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.docs_images import keep_for_docs
from support.kernel import KernelSession
from support.lab_server import LabServer
from support.panel import READY_TIMEOUT_MS, expect, open_panel, running_job_row, widen_sidebar

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# rank 1 waits for a file on line 4 of the cell; rank 0 reduces on line 5
CELL = """%%gpugeek_run
import os, time
print(f"rank {rank} ready", flush=True)
if rank == 1:
    while not os.path.exists(release): time.sleep(0.05)
dist.all_reduce(t := torch.ones(1))
"""


@pytest.fixture
def kernel(lab: LabServer) -> Iterator[KernelSession]:
    session = KernelSession(env={"GPUGEEK_REGISTRY": str(lab.registry), "GPUGEEK_HEARTBEAT": "0.5"})
    try:
        loaded = session.run("%load_ext gpugeek_jupyter\n%gpugeek_launch --gpu-type cpu --count 2 --name where --quiet")
        assert loaded.error is None, loaded.text
        yield session
    finally:
        session.run("%gpugeek_stop where")
        session.shutdown()


@pytest.mark.timeout(240)
def test_where_on_a_running_job_shows_each_rank_grouped(
    page: Any, lab: LabServer, kernel: KernelSession, tmp_path: Path, artifacts: Path
) -> None:
    release = tmp_path / "release"
    assert kernel.run(f"import torch\nrelease = {str(release)!r}").error is None
    running = kernel.execute(CELL)
    try:
        panel = open_panel(page, lab)
        widen_sidebar(page, 720)
        job = running_job_row(panel)
        button = job.locator(".gpugeek-job-where-button")
        expect(button).to_have_text("Where", timeout=READY_TIMEOUT_MS)
        text = job.locator(".gpugeek-job-where-text")
        expected = "rank 0 waiting in dist.all_reduce at cell:5; rank 1 at cell:4"
        deadline = time.monotonic() + 60
        while True:  # asked again until both ranks have reached their lines (the job imports torch first)
            button.click()
            expect(button).to_have_text("Where", timeout=15_000)  # answered
            shown = text.inner_text() if text.count() else ""
            if expected in shown or time.monotonic() > deadline:
                break
        assert expected in shown, shown
        assert "cell:4 in <module>: while not os.path.exists(release): time.sleep(0.05)" in shown
        job.scroll_into_view_if_needed()
        job.screenshot(path=str(artifacts / "job-where.png"))
        keep_for_docs(artifacts / "job-where.png", "job-where.png")
    finally:
        release.touch()
    done = kernel.collect(running, timeout=60)
    assert done.error is None, done.text
    expect(job.locator(".gpugeek-job-where-button")).to_have_count(0, timeout=READY_TIMEOUT_MS)  # it ended


@pytest.mark.timeout(240)
def test_cancel_on_a_notebooks_running_job_ends_its_cell(
    page: Any, lab: LabServer, kernel: KernelSession, artifacts: Path
) -> None:
    """The job runs in the kernel's cell (not detached): the panel's Cancel reaches it through the
    pool's scheduler, and the cell ends cancelled with the reason."""
    running = kernel.execute("%%gpugeek_run\nimport time\nfor _ in range(1200): time.sleep(0.1)\nprint('finished')")
    panel = open_panel(page, lab)
    widen_sidebar(page, 720)
    job = running_job_row(panel)
    button = job.locator(".gpugeek-job-cancel-button")
    expect(button).to_have_text("Cancel", timeout=READY_TIMEOUT_MS)
    assert "on every rank" in (button.get_attribute("title") or "")
    button.click()
    done = kernel.collect(running, timeout=60)

    assert "finished" not in done.text
    assert done.error is not None and "cancelled through the Jupyter server" in done.error["evalue"], done.text
    ended = panel.locator(".gpugeek-job-row").filter(has=page.locator(".gpugeek-status-cancelled"))
    expect(ended).to_have_count(1, timeout=READY_TIMEOUT_MS)
    expect(ended.locator(".gpugeek-job-cancel-button")).to_have_count(0)
    ended.screenshot(path=str(artifacts / "attached-cancelled.png"))
    again = kernel.run("%%gpugeek_run\nrank")
    assert again.error is None and "[0, 1]" in again.text, again.text
