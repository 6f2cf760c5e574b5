"""Driving the side panel in Chromium: open it, fill its launch form, find and stop pool rows."""

from __future__ import annotations

from typing import Any

from support.lab_server import LabServer

PANEL = "#gpugeek-sidebar"
TAB = 'li[data-id="gpugeek-sidebar"]'
READY_TIMEOUT_MS = 45_000
STOP_TIMEOUT_MS = 30_000


def expect(target: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(target)


def open_panel(page: Any, lab: LabServer) -> Any:
    """Load JupyterLab and show the panel (it may already be open: JupyterLab restores its layout)."""
    page.goto(lab.lab_url)
    page.locator(TAB).wait_for()
    page.locator("#jupyterlab-splash").wait_for(state="detached")  # the layout is restored
    panel = page.locator(PANEL)
    if not panel.is_visible():
        page.locator(TAB).click()
    expect(panel).to_be_visible()
    # the launch form has the server's catalog
    expect(panel.locator('select[name="gpu_type"] option[value="cpu"]')).to_have_count(1)
    return panel


def widen_sidebar(page: Any, right_edge_px: int = 400) -> None:
    """Drag the left sidebar's edge so the screenshots show pool rows without wrapping."""
    handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first
    box = handle.bounding_box()
    middle_y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] / 2, middle_y)
    page.mouse.down()
    page.mouse.move(right_edge_px, middle_y, steps=5)
    page.mouse.up()


def pool_row(panel: Any, name: str) -> Any:
    """A live pool's card."""
    return panel.locator(f'.gpugeek-pool-row[data-pool-name="{name}"]')


def running_job_row(panel: Any) -> Any:
    """The row of the job that runs now (the tests run one at a time)."""
    return panel.locator(".gpugeek-job-row").filter(has=panel.page.locator(".gpugeek-status-running"))


def ended_row(panel: Any, name: str) -> Any:
    """An ended pool's compact row (in Recent, or in the older history below it)."""
    return panel.locator(f'.gpugeek-ended-row[data-pool-name="{name}"]')


def open_recent(panel: Any) -> None:
    toggle = panel.locator(".gpugeek-recent-toggle")
    if toggle.get_attribute("aria-expanded") != "true":
        toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")


def open_launch_form(panel: Any) -> None:
    """Open the launch form (collapsed under the pools, jobs and Recent at first)."""
    toggle = panel.locator(".gpugeek-launch-toggle")
    if toggle.get_attribute("aria-expanded") != "true":
        toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")


def fill_launch_form(panel: Any, **values: str) -> None:
    open_launch_form(panel)
    form = panel.locator(".gpugeek-launch-form")
    for field, value in values.items():
        control = form.locator(f'[name="{field}"]')
        if control.evaluate("element => element.tagName") == "SELECT":
            control.select_option(value)
        else:
            control.fill(value)


def stop_from_panel(panel: Any, name: str) -> None:
    row = pool_row(panel, name)
    row.locator(".gpugeek-stop-button").click()
    dialog = panel.page.locator(".jp-Dialog")
    expect(dialog).to_contain_text(f"Stop pool {name}?")
    dialog.locator(".jp-Dialog-button.jp-mod-accept").click()
    # once stopped, the pool leaves the live cards for a compact row in Recent, with nothing to stop
    expect(row).to_have_count(0, timeout=STOP_TIMEOUT_MS)
    open_recent(panel)
    stopped = ended_row(panel, name)
    expect(stopped.locator(".gpugeek-status")).to_have_text("stopped")
    expect(stopped.locator("button, .gpugeek-stop-button")).to_have_count(0)
