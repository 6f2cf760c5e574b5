"""The pool's monitor as a JupyterLab main-area tab: opened from the panel's pool row, drawing the
pool's metrics, restored with the layout (and the window the user picked) after a reload of the
page, and saying so once the pool has stopped.

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
from support.panel import READY_TIMEOUT_MS, expect, open_panel

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TAB = "#gpugeek-monitor-watched"


@pytest.fixture
def kernel(lab: LabServer) -> Iterator[KernelSession]:
    session = KernelSession(env={"GPUGEEK_REGISTRY": str(lab.registry), "GPUGEEK_HEARTBEAT": "0.5"})
    try:
        loaded = session.run(
            "%load_ext gpugeek_jupyter\n%gpugeek_launch --gpu-type cpu --count 2 --name watched --quiet"
        )
        assert loaded.error is None, loaded.text
        yield session
    finally:
        session.run("%gpugeek_stop watched")
        session.shutdown()


@pytest.mark.timeout(240)
def test_the_monitor_opens_as_a_tab_draws_each_worker_and_is_restored_after_a_reload(
    page: Any, lab: LabServer, kernel: KernelSession, artifacts: Path
) -> None:
    panel = open_panel(page, lab)
    row = panel.locator('.gpugeek-pool-row[data-pool-name="watched"]')
    expect(row.locator(".gpugeek-status")).to_have_text("ready", timeout=READY_TIMEOUT_MS)
    row.locator("button.gpugeek-monitor-button").click()

    tab = page.locator(TAB)
    expect(tab).to_be_visible(timeout=READY_TIMEOUT_MS)
    expect(page.locator(".lm-TabBar-tab", has_text="Monitor: watched")).to_have_count(1)
    cpu = tab.locator('.gpugeek-monitor-chart[data-metric="cpu_pct"]')
    expect(cpu.locator(".gpugeek-monitor-legend-item")).to_have_count(2, timeout=READY_TIMEOUT_MS)
    expect(cpu.locator(".gpugeek-monitor-legend")).to_contain_text("rank 0")
    expect(cpu.locator(".gpugeek-monitor-legend")).to_contain_text("rank 1")
    # after a few polls each worker's line has several points
    deadline = time.monotonic() + 30
    while (
        min(len(p.split()) for p in cpu.locator("polyline").evaluate_all("ls => ls.map(l => l.getAttribute('points'))"))
        < 3
    ):
        assert time.monotonic() < deadline, "the monitor's lines did not grow"
        time.sleep(0.5)
    tab.screenshot(path=str(artifacts / "monitor-tab.png"))
    keep_for_docs(artifacts / "monitor-tab.png", "monitor-tab.png")

    time.sleep(2)  # JupyterLab saves the layout to the workspace shortly after a change
    page.reload()
    page.locator("#jupyterlab-splash").wait_for(state="detached")
    restored = page.locator(TAB)
    expect(restored).to_be_visible(timeout=READY_TIMEOUT_MS)
    expect(restored.locator('.gpugeek-monitor-chart[data-metric="cpu_pct"] polyline')).to_have_count(
        2, timeout=READY_TIMEOUT_MS
    )
    assert page.locator(TAB).count() == 1  # restored once, not beside a second copy
    window = restored.locator("select.gpugeek-monitor-window")
    expect(window).to_have_value("300")  # 5 minutes at first
    window.select_option("60")
    expect(restored.locator(".gpugeek-monitor-title")).to_have_text("Pool watched, last")

    time.sleep(2)
    page.reload()
    page.locator("#jupyterlab-splash").wait_for(state="detached")
    again = page.locator(TAB)
    expect(again.locator("select.gpugeek-monitor-window")).to_have_value("60", timeout=READY_TIMEOUT_MS)  # kept
    expect(again.locator('.gpugeek-monitor-chart[data-metric="cpu_pct"] polyline')).to_have_count(
        2, timeout=READY_TIMEOUT_MS
    )

    # the pool stops: the tab says so (and stops asking) instead of showing its last numbers as live
    stopped = kernel.run("%gpugeek_stop watched")
    assert stopped.error is None, stopped.text
    expect(again.locator(".gpugeek-monitor-status")).to_have_text(
        "Pool watched is stopped: the charts end at its last sample.", timeout=READY_TIMEOUT_MS
    )
    expect(again.locator('.gpugeek-monitor-chart[data-metric="cpu_pct"] polyline')).to_have_count(2)
