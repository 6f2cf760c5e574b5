"""The side panel's job view of a job a notebook kernel is running, in a real JupyterLab: the ranks'
states as chips and the grouped tail of their output, kept at its newest line while the job runs.

Screenshots go to ``test-artifacts/browser/<test>/``.
"""

from __future__ import annotations

import re
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

LINE = "the same line from every rank"
# both ranks print LINE every 0.2 s until the test releases them (or two minutes have passed)
CELL = f"""%%gpugeek_run
import os, time
deadline = time.monotonic() + 120
while not os.path.exists(release) and time.monotonic() < deadline:
    print({LINE!r}, flush=True)
    time.sleep(0.2)
"""
TAIL_LINES = 40  # the panel's default ?lines
TAIL_SHOWN_WITHIN_S = 6.0  # from the chips saying running to the grouped line in the tail


@pytest.fixture
def kernel(lab: LabServer) -> Iterator[KernelSession]:
    session = KernelSession(env={"GPUGEEK_REGISTRY": str(lab.registry), "GPUGEEK_HEARTBEAT": "0.5"})
    try:
        loaded = session.run(
            "%load_ext gpugeek_jupyter\n%gpugeek_launch --gpu-type cpu --count 2 --name output --quiet"
        )
        assert loaded.error is None, loaded.text
        yield session
    finally:
        session.run("%gpugeek_stop output")
        session.shutdown()


def scrolled_to_bottom(tail: Any) -> bool:
    return bool(tail.evaluate("el => el.scrollHeight - el.scrollTop - el.clientHeight <= 2"))


def wait_for(condition: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.1)


@pytest.mark.timeout(240)
def test_a_running_jobs_row_shows_its_ranks_states_and_their_grouped_output(
    page: Any, lab: LabServer, kernel: KernelSession, tmp_path: Path, artifacts: Path
) -> None:
    release = tmp_path / "release"
    assert kernel.run(f"release = {str(release)!r}").error is None
    running = kernel.execute(CELL)
    try:
        panel = open_panel(page, lab)
        widen_sidebar(page, 720)
        running_row = running_job_row(panel)
        expect(running_row).to_have_count(1, timeout=READY_TIMEOUT_MS)
        job_id = running_row.get_attribute("data-job-id")
        row = panel.locator(f'.gpugeek-job-row[data-job-id="{job_id}"]')
        row.scroll_into_view_if_needed()  # output is fetched for the rows on screen only (below the launch form)

        chips = row.locator(".gpugeek-rank-chip")
        expect(chips).to_have_text(["ranks 0-1 running"], timeout=READY_TIMEOUT_MS)
        tail = row.locator("pre.gpugeek-job-output-tail")
        expect(tail).to_contain_text(f"[ranks 0-1] {LINE}", timeout=TAIL_SHOWN_WITHIN_S * 1000)

        # once the tail is longer than its box, the newest line stays in view as lines come
        wait_for(lambda: len(tail.inner_text().splitlines()) >= TAIL_LINES, 30, f"{TAIL_LINES} lines in the tail")
        wait_for(lambda: tail.evaluate("el => el.scrollHeight > el.clientHeight + 20"), 10, "the tail overflowing")
        assert scrolled_to_bottom(tail)
        row.scroll_into_view_if_needed()  # it has grown
        row.screenshot(path=str(artifacts / "job-output.png"))

        # scrolled up by the user, it stays where they put it over the next polls
        tail.evaluate("el => { el.scrollTop = 0; el.dispatchEvent(new Event('scroll')); }")
        time.sleep(5)  # two polls of the panel (every 2 s) redraw the tail
        assert tail.evaluate("el => el.scrollTop") == 0
        tail.evaluate("el => { el.scrollTop = el.scrollHeight; el.dispatchEvent(new Event('scroll')); }")
        assert scrolled_to_bottom(tail)
    finally:
        release.touch()
    done = kernel.collect(running, timeout=60)
    assert done.error is None, done.text
    expect(row.locator(".gpugeek-status")).to_have_text("succeeded", timeout=READY_TIMEOUT_MS)
    expect(chips).to_have_text(["ranks 0-1 done"], timeout=READY_TIMEOUT_MS)  # the row keeps its final states
    expect(tail).to_contain_text(f"[ranks 0-1] {LINE}")


FAILING_CELL = """%%gpugeek_run
print('loading', rank, flush=True)
if rank == 1:
    raise ValueError('rank one is broken')
"""


@pytest.mark.timeout(240)
def test_a_failed_jobs_view_ends_with_the_ranks_traceback_and_copies_its_full_id(
    page: Any, lab: LabServer, kernel: KernelSession, artifacts: Path
) -> None:
    failed = kernel.run(FAILING_CELL)
    assert failed.error is not None and "rank one is broken" in failed.text, failed.text
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=lab.url.rstrip("/"))
    panel = open_panel(page, lab)
    widen_sidebar(page, 720)
    row = panel.locator(".gpugeek-job-row").filter(has=page.locator(".gpugeek-status-failed")).first
    expect(row).to_be_visible(timeout=READY_TIMEOUT_MS)
    job_id = row.get_attribute("data-job-id")
    row.scroll_into_view_if_needed()
    row.locator(".gpugeek-job-summary").click()

    tail = row.locator("pre.gpugeek-job-output-tail")
    expect(tail).to_contain_text("[rank 1] Traceback (most recent call last):", timeout=READY_TIMEOUT_MS)
    assert tail.inner_text().splitlines()[-1] == "[rank 1] ValueError: rank one is broken", tail.inner_text()

    full = row.locator(".gpugeek-job-full-id")
    expect(full.locator(".gpugeek-full-id-text")).to_have_text(job_id)
    copy = full.locator("button.gpugeek-copy-button")
    copy.click()
    expect(copy).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == job_id
    code = row.locator(".gpugeek-job-code")  # the code's short hash, the full one copied
    sha = code.locator(".gpugeek-job-code-sha").inner_text()
    assert re.fullmatch(r"[0-9a-f]{12}", sha), sha
    code.locator("button.gpugeek-copy-button").click()
    full_sha = page.evaluate("navigator.clipboard.readText()")
    assert re.fullmatch(r"[0-9a-f]{64}", full_sha) and full_sha.startswith(sha), full_sha
    assert row.locator(".gpugeek-job-hyperparams").count() == 0  # a cell has none: no empty section
    duration = row.locator(".gpugeek-key-values").first.inner_text()
    assert re.search(r"Duration\s+(<0\.1|\d+(\.\d)?)s", duration) and not re.search(r"Duration\s+0s", duration), (
        duration
    )
    row.screenshot(path=str(artifacts / "failed-job-view.png"))
    keep_for_docs(artifacts / "failed-job-view.png", "failed-job-view.png")


@pytest.mark.timeout(240)
def test_a_pool_launched_from_a_notebook_shows_the_notebook_as_its_owner(page: Any, lab: LabServer) -> None:
    session = KernelSession(
        env={"GPUGEEK_REGISTRY": str(lab.registry), "JPY_SESSION_NAME": "/home/ada/work/owned.ipynb"}
    )
    try:
        launched = session.run(
            "%load_ext gpugeek_jupyter\n%gpugeek_launch --gpu-type cpu --count 1 --name owned --quiet"
        )
        assert launched.error is None, launched.text
        panel = open_panel(page, lab)
        row = panel.locator('.gpugeek-pool-row[data-pool-name="owned"]')
        expect(row).to_be_visible(timeout=READY_TIMEOUT_MS)
        row.locator("button.gpugeek-pool-name").click()
        owner = row.locator(".gpugeek-pool-details dt", has_text="Owner").locator("xpath=following-sibling::dd[1]")
        expect(owner).to_have_text("notebook owned.ipynb", timeout=READY_TIMEOUT_MS)
    finally:
        session.run("%gpugeek_stop owned")
        session.shutdown()


LOGGING_CELL = """%%gpugeek_run
import os, time
step = 0
while not os.path.exists(release) and step < 600:
    gg.log(step=step, loss=1.0 / (step + 1) + rank)
    print(f"step {step}", flush=True)
    step += 1
    time.sleep(0.1)
"""


@pytest.mark.timeout(240)
def test_a_job_opens_as_a_tab_with_its_output_and_a_chart_per_logged_value_restored_after_a_reload(
    page: Any, lab: LabServer, kernel: KernelSession, tmp_path: Path, artifacts: Path
) -> None:
    release = tmp_path / "release"
    assert kernel.run(f"release = {str(release)!r}").error is None
    running = kernel.execute(LOGGING_CELL)
    try:
        panel = open_panel(page, lab)
        row = running_job_row(panel)
        expect(row).to_have_count(1, timeout=READY_TIMEOUT_MS)
        job_id = row.get_attribute("data-job-id")
        row.locator(".gpugeek-job-open-button").click()

        tab = page.locator(f"#gpugeek-job-{job_id}")
        expect(page.locator(".lm-TabBar-tab", has_text=f"Job {job_id}")).to_have_count(1, timeout=READY_TIMEOUT_MS)
        expect(tab.locator(".gpugeek-job-tab-heading")).to_have_text(f"Job {job_id}: running", timeout=READY_TIMEOUT_MS)
        expect(tab.locator(".gpugeek-rank-chip")).to_have_text(["ranks 0-1 running"])
        expect(tab.locator("pre.gpugeek-job-tab-tail")).to_contain_text("[ranks 0-1] step", timeout=READY_TIMEOUT_MS)
        loss = tab.locator('.gpugeek-monitor-chart[data-metric="loss"]')
        expect(loss.locator(".gpugeek-monitor-legend-item")).to_have_count(2, timeout=READY_TIMEOUT_MS)
        expect(loss.locator(".gpugeek-monitor-legend")).to_contain_text("rank 0")
        expect(loss.locator(".gpugeek-monitor-legend")).to_contain_text("rank 1")
        wait_for(
            lambda: (
                min(
                    len(p.split())
                    for p in loss.locator("polyline").evaluate_all("ls => ls.map(l => l.getAttribute('points'))")
                )
                >= 5
            ),
            30,
            "each rank's loss line growing",
        )
        tab.screenshot(path=str(artifacts / "job-tab.png"))
        keep_for_docs(artifacts / "job-tab.png", "job-tab.png")

        time.sleep(2)  # JupyterLab saves the layout shortly after a change
        page.reload()
        page.locator("#jupyterlab-splash").wait_for(state="detached")
        restored = page.locator(f"#gpugeek-job-{job_id}")
        expect(restored.locator('.gpugeek-monitor-chart[data-metric="loss"] polyline')).to_have_count(
            2, timeout=READY_TIMEOUT_MS
        )
    finally:
        release.touch()
    done = kernel.collect(running, timeout=60)
    assert done.error is None, done.text
    expect(restored.locator(".gpugeek-job-tab-heading")).to_have_text(
        f"Job {job_id}: succeeded", timeout=READY_TIMEOUT_MS
    )
    assert page.locator(f"#gpugeek-job-{job_id}").count() == 1


SLOW_RANK_1 = """%%gpugeek_run
import time
for step in range(40):
    time.sleep(0.005 + (0.050 if rank == 1 else 0.0))
    gg.log(step=step, loss=1.0)
"""


@pytest.mark.timeout(240)
def test_a_job_whose_rank_lagged_shows_the_slow_rank_in_its_record(
    page: Any, lab: LabServer, kernel: KernelSession, artifacts: Path
) -> None:
    done = kernel.run(SLOW_RANK_1, timeout=120)
    assert done.error is None, done.text
    assert "is slower than the others" in done.text, done.text  # said in the cell as it ran
    panel = open_panel(page, lab)
    widen_sidebar(page, 720)
    row = panel.locator(".gpugeek-job-row").filter(has=page.locator(".gpugeek-status-succeeded")).first
    expect(row).to_be_visible(timeout=READY_TIMEOUT_MS)
    row.scroll_into_view_if_needed()
    row.locator(".gpugeek-job-summary").click()
    record = row.locator(".gpugeek-key-values").first
    expect(record).to_contain_text("Slow rank", timeout=READY_TIMEOUT_MS)
    slow = record.locator("dt", has_text="Slow rank").locator("xpath=following-sibling::dd[1]")
    text = slow.inner_text()
    assert text.startswith("rank 1 (host ") and "is slower than the others" in text, text
    assert row.get_attribute("data-job-id") not in text  # the view names the job already
    row.screenshot(path=str(artifacts / "slow-rank-job-view.png"))
