"""The inline widgets in a real JupyterLab notebook, rendered by headless Chromium.

A notebook launches a pool (its card, with the cost meter inside), opens the live utilization panel
(bokeh, through jupyter_bokeh) and keeps the workers busy with a job; the test checks that the
widgets rendered and move, then stops the pool from the notebook. With
``GPUGEEK_UPDATE_DOCS_SCREENSHOT=1`` the screenshot also replaces ``docs/images/inline-widgets.png``
(the README's).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from support.docs_images import keep_for_docs
from support.lab_server import LabServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CELLS = [
    "%load_ext gpugeek_jupyter",
    "%gpugeek_launch --gpu-type cpu --count 2 --name widgets-demo --price 2.50 --budget 5",
    "%gpugeek_monitor --period 0.5",
    "%%gpugeek_run --output grouped\nimport time\nend = time.monotonic() + 6\nwhile time.monotonic() < end:\n"
    "    pass\nprint(f'done on {rank}')\nrank",
]
STOP_CELL = "%gpugeek_stop widgets-demo"
RUN_TIMEOUT_MS = 90_000

PAGE_VIEWPORT = {"width": 1280, "height": 1000}  # the page fixture's size (support/browser.py)


def expect(target: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(target)


def write_notebook(path: Path, sources: list[str]) -> None:
    cells = [
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
        for source in sources
    ]
    notebook = {
        "cells": cells,
        "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(notebook, indent=1))


def test_pool_card_cost_meter_and_utilization_panel_render_and_move(
    page: Any, lab: LabServer, artifacts: Path, screenshot_on_failure: None
) -> None:
    root = lab.home / "notebooks"
    write_notebook(root / "widgets.ipynb", CELLS + [STOP_CELL])
    page.goto(f"{lab.url}/lab/tree/widgets.ipynb?token={lab.token}")
    page.locator("#jupyterlab-splash").wait_for(state="detached")
    notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    expect(notebook.locator(".jp-Notebook-cell")).to_have_count(len(CELLS) + 1)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=30_000)
    # collapse the side bar so the notebook has the width
    if page.locator("#jp-left-stack").is_visible():
        page.keyboard.press("Control+b")

    # run every cell but the last (the stop), then watch the widgets while the job runs
    cells = notebook.locator(".jp-Notebook-cell")
    cells.nth(len(CELLS)).locator(".jp-InputArea-editor").click()
    page.keyboard.press("Escape")
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Above Selected Cell$")).click()

    card = notebook.locator(".jupyter-widgets.gpugeek-pool-card")
    expect(card).to_be_visible(timeout=RUN_TIMEOUT_MS)
    expect(card).to_contain_text("widgets-demo", timeout=RUN_TIMEOUT_MS)
    expect(card).to_contain_text("ready", timeout=RUN_TIMEOUT_MS)
    meter = notebook.locator(".jupyter-widgets.gpugeek-cost-meter")
    expect(meter).to_contain_text("USD", timeout=RUN_TIMEOUT_MS)
    first_cost = meter.inner_text()
    monitor = notebook.locator(".jp-OutputArea-output canvas").first  # bokeh draws on canvases
    expect(monitor).to_be_visible(timeout=RUN_TIMEOUT_MS)
    expect(notebook.get_by_text("javascript error")).to_have_count(0)  # what JupyterLab shows for a broken output
    page.wait_for_timeout(4_000)  # the job keeps both workers busy; let the panel draw some seconds of it
    assert meter.inner_text() != first_cost, "the cost meter did not move"
    cells.nth(2).scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "inline-widgets.png"))
    keep_for_docs(artifacts / "inline-widgets.png", "inline-widgets.png")

    # the job's value comes back, then the pool is stopped from the notebook
    expect(cells.nth(3).locator(".jp-OutputArea-output").last).to_contain_text("[0, 1]", timeout=RUN_TIMEOUT_MS)
    # lines that differ only by the rank's number: one grouped line saying each rank's, no placeholder
    expect(cells.nth(3).locator(".jp-OutputArea")).to_contain_text("[ranks 0-1] done on 0, 1")
    assert "{rank}" not in cells.nth(3).locator(".jp-OutputArea").inner_text()
    cells.nth(len(CELLS)).locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    expect(card).to_contain_text("stopped", timeout=RUN_TIMEOUT_MS)
