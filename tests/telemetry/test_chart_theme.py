"""Charts in JupyterLab's theme: the kernel reads the theme the user chose, and colours keep contrast."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpugeek_jupyter.telemetry import TelemetryFeed
from gpugeek_jupyter.widgets.monitor import MonitorPanel
from gpugeek_jupyter.widgets.theme import THEMES_SETTINGS, lab_theme_is_dark, palette


def _luminance(colour: str) -> float:
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two #rrggbb colours."""
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def _choose_theme(settings: Path, theme: str) -> None:
    path = settings / THEMES_SETTINGS
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'// JupyterLab writes comments first\n{{\n    "theme": "{theme}"\n}}\n')


def test_the_kernel_reads_the_theme_the_user_chose_in_jupyterlab(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("GPUGEEK_CHART_THEME", raising=False)
    monkeypatch.setenv("JUPYTERLAB_SETTINGS_DIR", str(tmp_path))
    assert lab_theme_is_dark() is False  # nothing chosen: JupyterLab's default, light
    _choose_theme(tmp_path, "JupyterLab Dark")
    assert lab_theme_is_dark() is True
    _choose_theme(tmp_path, "JupyterLab Light")
    assert lab_theme_is_dark() is False
    monkeypatch.setenv("GPUGEEK_CHART_THEME", "dark")
    assert lab_theme_is_dark() is True


@pytest.mark.parametrize("dark", [False, True])
def test_chart_text_keeps_wcag_aa_contrast_on_its_background(dark: bool) -> None:
    colours = palette(dark)
    assert contrast(colours.text, colours.background) >= 4.5
    assert contrast(colours.muted, colours.background) >= 4.5


def test_the_monitor_and_the_cost_chart_are_dark_in_jupyterlab_dark(simulated, tmp_path, monkeypatch) -> None:
    from gpugeek_jupyter.widgets.cost_chart import bar_chart

    monkeypatch.delenv("GPUGEEK_CHART_THEME", raising=False)
    monkeypatch.setenv("JUPYTERLAB_SETTINGS_DIR", str(tmp_path))
    _choose_theme(tmp_path, "JupyterLab Dark")
    workers = simulated(workers=1, gpus=1)
    feed = TelemetryFeed(client=None, pool_name="sim", period=1.0)
    feed.ingest(workers.answers())
    panel = MonitorPanel(feed, "sim")
    for plot in (panel._util_plot, panel._memory_plot):
        assert plot.background_fill_color == plot.border_fill_color == palette(True).background
        assert plot.yaxis[0].major_label_text_color == palette(True).muted
        assert plot.legend[0].label_text_color == palette(True).text
    chart = bar_chart([])
    assert chart.background_fill_color == palette(True).background
    assert chart.legend[0] in chart.right  # beside the bars, never over one
