"""The ranks' tqdm bars as widget bars in a real JupyterLab notebook, rendered by headless Chromium.

A notebook launches a 2-worker cpu pool and runs two jobs through ``run_cell(..., on_progress=
progress_display(mode, 2))``: one bar per rank (mode "all"), then nested bars grouped across the
ranks (mode "grouped", the inner bar made with ``leave=False``). The test checks that the bars
render, move, end at 100 %, and that no bar text reached the output. With
``GPUGEEK_UPDATE_DOCS_SCREENSHOT=1`` the screenshot, taken while the grouped job runs, also
replaces ``docs/images/progress-bars.png``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from support.docs_images import keep_for_docs
from support.lab_server import LabServer

from .test_inline_widgets import expect, write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SETUP = """\
import gpugeek_jupyter
from gpugeek_jupyter.jobs import run_cell
from gpugeek_jupyter.jobs.output import LabelledWriter
from gpugeek_jupyter.widgets.progress import progress_display

pool = gpugeek_jupyter.current_pool()
ONE_LOOP = '''
import time
from tqdm import tqdm
for step in tqdm(range(50), desc="train"):
    time.sleep(0.02)
'''
NESTED = '''
import time
from tqdm.auto import tqdm, trange
for epoch in trange(3, desc="epoch"):
    for step in tqdm(range(40), desc="train", leave=False):
        time.sleep(0.04 if rank == 0 else 0.055)  # rank 1 is the slower one
'''"""
CELLS = [
    "%load_ext gpugeek_jupyter",
    "%gpugeek_launch --gpu-type cpu --count 2 --name bars-demo",
    SETUP,
    'run_cell(pool, ONE_LOOP, {}, on_output=LabelledWriter(), on_progress=progress_display("all", 2)).ok',
    'run_cell(pool, NESTED, {}, on_output=LabelledWriter(), on_progress=progress_display("grouped", 2)).ok',
]
STOP_CELL = "%gpugeek_stop bars-demo"
RUN_TIMEOUT_MS = 120_000

PAGE_VIEWPORT = {"width": 1280, "height": 900}  # the page fixture's size (support/browser.py)


def bars_of(cell: Any) -> list[dict[str, Any]]:
    """The progress bars a cell's output shows: label, text, drawn width (%) and colour class."""
    return cell.locator(".gpugeek-progress-bar").evaluate_all(
        """rows => rows.map(row => {
            const bar = row.querySelector('.progress-bar');
            const html = row.querySelectorAll('.widget-html-content');
            return {
                label: html[0] ? html[0].innerText.trim() : '',
                text: html[1] ? html[1].innerText.trim() : '',
                width: bar ? parseFloat(bar.style.width) : null,
                classes: bar ? bar.className : '',
            };
        })"""
    )


def run_all_but_the_last(page: Any, cells: Any) -> None:
    """Run Menu > Run All Above Selected Cell, with the stop cell selected; again if it did not start
    (a click that lands while JupyterLab is still settling is lost now and then)."""
    first_prompt = cells.nth(0).locator(".jp-InputPrompt")
    for _ in range(3):
        cells.nth(len(CELLS)).locator(".jp-InputArea-editor").click()
        page.keyboard.press("Escape")
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Above Selected Cell$")).click()
        for _ in range(50):
            if first_prompt.inner_text().strip() not in ("", "[ ]:"):
                return
            page.wait_for_timeout(200)
    raise AssertionError("Run All Above Selected Cell did not start the cells")


def test_rank_bars_render_move_and_end_at_100_percent(
    page: Any, lab: LabServer, artifacts: Path, screenshot_on_failure: None
) -> None:
    write_notebook(lab.home / "notebooks" / "bars.ipynb", CELLS + [STOP_CELL])
    page.goto(f"{lab.url}/lab/tree/bars.ipynb?token={lab.token}")
    page.locator("#jupyterlab-splash").wait_for(state="detached")
    notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    expect(notebook.locator(".jp-Notebook-cell")).to_have_count(len(CELLS) + 1)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=30_000)
    if page.locator("#jp-left-stack").is_visible():
        page.keyboard.press("Control+b")

    cells = notebook.locator(".jp-Notebook-cell")
    run_all_but_the_last(page, cells)

    # mode "all": one bar per rank, both at 100 % once the job is done
    one_loop, nested = cells.nth(3), cells.nth(4)
    expect(one_loop.locator(".jp-OutputArea-output").last).to_contain_text("True", timeout=RUN_TIMEOUT_MS)
    per_rank = bars_of(one_loop)
    assert [b["label"] for b in per_rank] == ["train [rank 0]", "train [rank 1]"], per_rank
    for bar in per_rank:
        assert bar["width"] == 100.0 and "success" in bar["classes"] and bar["text"].startswith("100% 50/50"), bar

    # mode "grouped": the nested bars move while the job runs
    grouped = nested.locator(".gpugeek-progress-bar", has_text="train [ranks 0-1]")
    expect(grouped).to_be_visible(timeout=RUN_TIMEOUT_MS)
    widths = set()
    for _ in range(40):
        moving = [b for b in bars_of(nested) if b["label"] == "train [ranks 0-1]"]
        if moving and moving[0]["width"] is not None:
            widths.add(moving[0]["width"])
        if len(widths) >= 3:
            break
        page.wait_for_timeout(150)
    assert len(widths) >= 3, f"the grouped bar did not move: {widths}"
    nested.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "progress-bars.png"))
    keep_for_docs(artifacts / "progress-bars.png", "progress-bars.png")

    expect(nested.locator(".jp-OutputArea-output").last).to_contain_text("True", timeout=RUN_TIMEOUT_MS)
    finished = bars_of(nested)
    assert [b["label"] for b in finished] == ["epoch [ranks 0-1]"], finished  # train (leave=False) went
    assert finished[0]["width"] == 100.0 and "success" in finished[0]["classes"], finished
    # no bar text reached the notebook, and nothing broke
    for cell in (one_loop, nested):
        assert cell.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count() == 0
    expect(notebook.get_by_text("javascript error")).to_have_count(0)

    cells.nth(len(CELLS)).locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    expect(cells.nth(len(CELLS)).locator(".jp-OutputArea-output")).to_contain_text("stopped", timeout=RUN_TIMEOUT_MS)
