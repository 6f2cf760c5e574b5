"""JupyterLab Dark in headless Chromium: the pool card, the monitor and the cost chart follow it.

The user chose JupyterLab Dark (its themes settings, where JupyterLab keeps them); a notebook
launches a pool, opens the monitor and the cost chart, and the test reads the colours the browser
drew: the bokeh canvases are dark, and the card's labels keep WCAG AA contrast (>= 4.5:1) on the
notebook's background. Screenshot: ``test-artifacts/browser/<test>/dark.png``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpugeek_jupyter.widgets.theme import THEMES_SETTINGS
from support.docs_images import keep_for_docs
from support.lab_server import LabServer, start_lab
from support.panel import PANEL, TAB, pool_row

from .test_inline_widgets import write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PAGE_VIEWPORT = {"width": 1280, "height": 1000}
RUN_TIMEOUT_MS = 90_000
CELLS = [
    "%load_ext gpugeek_jupyter",
    "%gpugeek_launch --gpu-type cpu --count 1 --name dark-demo --price 2.50",
    "%gpugeek_monitor --period 0.5",
    "%gpugeek_cost dark-demo --chart --no-jobs",
    "%%gpugeek_run\nrank",
    "%gpugeek_cost dark-demo",
    "%gpugeek_stop dark-demo",
]
# what reads text in the side panel: the header's glance, a pool card's name, status, lines and muted text
PANEL_TEXTS = (
    ".gpugeek-glance-text",
    ".gpugeek-glance-spent",
    ".gpugeek-pool-name",
    ".gpugeek-pool-capacity",
    ".gpugeek-pool-cost",
    ".gpugeek-section h3",
    ".gpugeek-job-row .gpugeek-status",
)
# every cell of a table that shows less than its text (cut, or overflowing its output area)
CUT_CELLS_JS = """table => {
  const area = table.closest('.jp-OutputArea-output');
  const cut = [...table.querySelectorAll('th, td')]
    .filter(cell => cell.scrollWidth > cell.clientWidth + 1)
    .map(cell => cell.textContent);
  return { cut, tableWidth: table.getBoundingClientRect().width, areaWidth: area.getBoundingClientRect().width };
}"""

# colours as the page computes them: the nearest opaque background up the tree, and the text's colour
COLOURS_JS = """element => {
  const rgb = text => (text.match(/[\\d.]+/g) || []).map(Number);
  let node = element, background = null;
  while (node && node.nodeType === 1) {
    const colour = rgb(getComputedStyle(node).backgroundColor);
    if (colour.length >= 3 && (colour.length < 4 || colour[3] > 0.5)) { background = colour; break; }
    node = node.parentElement;
  }
  return { text: rgb(getComputedStyle(element).color), background: background || [255, 255, 255] };
}"""

# the mean colour of a canvas's top-left corner (where bokeh fills the figure's border)
CANVAS_CORNER_JS = """canvas => {
  const context = canvas.getContext('2d');
  const pixels = context.getImageData(2, 2, 8, 8).data;
  let sum = [0, 0, 0];
  for (let i = 0; i < pixels.length; i += 4) { sum[0] += pixels[i]; sum[1] += pixels[i + 1]; sum[2] += pixels[i + 2]; }
  return sum.map(v => v / (pixels.length / 4));
}"""


def _luminance(rgb: list[float]) -> float:
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (v / 255 for v in rgb[:3])]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: list[float], b: list[float]) -> float:
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def expect(target: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(target)


@pytest.fixture
def dark_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    home = tmp_path_factory.mktemp("dark-lab")
    chosen = home / "settings" / THEMES_SETTINGS
    chosen.parent.mkdir(parents=True, exist_ok=True)
    chosen.write_text('{\n    "theme": "JupyterLab Dark"\n}\n')
    server = start_lab(home, home / "gpugeek.sqlite")
    yield server
    left = server.stop()
    assert left == [], f"processes left after jupyter lab stopped: {left}\n{server.log_tail()}"


def test_the_card_monitor_and_cost_chart_follow_jupyterlab_dark(
    page: Any, dark_lab: LabServer, artifacts: Path, screenshot_on_failure: None
) -> None:
    write_notebook(dark_lab.home / "notebooks" / "dark.ipynb", CELLS)
    page.goto(f"{dark_lab.url}/lab/tree/dark.ipynb?token={dark_lab.token}")
    page.locator("#jupyterlab-splash").wait_for(state="detached")
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=30_000)
    notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    expect(notebook.locator(".jp-Notebook-cell")).to_have_count(len(CELLS))
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=30_000)
    if page.locator("#jp-left-stack").is_visible():
        page.keyboard.press("Control+b")
    cells = notebook.locator(".jp-Notebook-cell")
    cells.nth(len(CELLS) - 1).locator(".jp-InputArea-editor").click()
    page.keyboard.press("Escape")
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Above Selected Cell$")).click()

    card = notebook.locator(".jupyter-widgets.gpugeek-pool-card")
    expect(card).to_contain_text("ready", timeout=RUN_TIMEOUT_MS)
    label = card.locator("td").first
    colours = label.evaluate(COLOURS_JS)
    ratio = contrast(colours["text"], colours["background"])
    assert ratio >= 4.5, f"card label contrast {ratio:.2f}:1 ({colours})"

    monitor = cells.nth(2).locator(".jp-OutputArea-output canvas").first
    expect(monitor).to_be_visible(timeout=RUN_TIMEOUT_MS)
    chart = cells.nth(3).locator(".jp-OutputArea-output canvas").first
    expect(chart).to_be_visible(timeout=RUN_TIMEOUT_MS)
    page.wait_for_timeout(2_000)  # bokeh draws after the widget shows
    for name, canvas in (("monitor", monitor), ("cost chart", chart)):
        corner = canvas.evaluate(CANVAS_CORNER_JS)
        assert _luminance(corner) < 0.05, f"the {name} is not dark: {corner}"
    cells.nth(2).scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "dark.png"))

    # the cost summary at 1280 px: no column cut, nothing wider than its output area
    summary = cells.nth(5).locator(".jp-OutputArea-output table").first
    expect(summary).to_contain_text("dark-demo", timeout=RUN_TIMEOUT_MS)
    expect(summary.locator("tbody tr")).to_have_count(2)  # the pool, and its job
    fit = summary.evaluate(CUT_CELLS_JS)
    assert fit["cut"] == [] and fit["tableWidth"] <= fit["areaWidth"], fit
    cells.nth(5).scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "cost-summary.png"))

    # the side panel in the dark theme: its text at AA contrast on its own background
    page.locator(TAB).click()
    panel = page.locator(PANEL)
    expect(pool_row(panel, "dark-demo").locator(".gpugeek-status")).to_have_text("ready", timeout=RUN_TIMEOUT_MS)
    expect(panel.locator(".gpugeek-job-row")).to_have_count(1, timeout=RUN_TIMEOUT_MS)
    background = panel.evaluate(COLOURS_JS)["background"]
    assert _luminance(background) < 0.05, f"the panel is not dark: {background}"
    for selector in PANEL_TEXTS:
        colours = panel.locator(selector).first.evaluate(COLOURS_JS)
        ratio = contrast(colours["text"], colours["background"])
        assert ratio >= 4.5, f"{selector}: contrast {ratio:.2f}:1 ({colours})"
    job = panel.locator(".gpugeek-job-row").first
    expect(job.locator(".gpugeek-job-ranks")).to_have_text("1 rank")
    job_id = job.locator(".gpugeek-job-id")
    assert job_id.evaluate("node => node.scrollWidth <= node.clientWidth"), job_id.inner_text()  # whole, not cut
    page.screenshot(path=str(artifacts / "dark-panel.png"))
    keep_for_docs(artifacts / "dark-panel.png", "dark-theme.png")
    page.locator(TAB).click()  # closed again: the notebook's cells are where the test goes on

    cells.nth(len(CELLS) - 1).locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    expect(card).to_contain_text("stopped", timeout=RUN_TIMEOUT_MS)
