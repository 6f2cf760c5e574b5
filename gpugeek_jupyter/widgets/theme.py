"""Bokeh charts in JupyterLab's theme: the colours of JupyterLab Light or Dark on a figure.

Bokeh draws on a canvas with concrete colours, so the kernel has to know the theme. It reads the
theme the user chose in JupyterLab (its ``themes`` settings, in ``JUPYTERLAB_SETTINGS_DIR`` or
``<jupyter config dir>/lab/user-settings``, which a kernel on the same machine as its server
reads), when the chart is made; a theme changed later applies to the next chart.
``GPUGEEK_CHART_THEME=dark`` (or ``light``) overrides it.

>>> palette(dark=True).background, palette(dark=False).text
('#111111', '#1f2328')
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

THEMES_SETTINGS = Path("@jupyterlab") / "apputils-extension" / "themes.jupyterlab-settings"


@dataclass(frozen=True)
class ChartPalette:
    """A theme's colours; text and axis colours keep WCAG AA contrast (>= 4.5:1) on the background."""

    background: str
    text: str
    muted: str  # axis ticks and labels
    grid: str


_LIGHT = ChartPalette(background="#ffffff", text="#1f2328", muted="#57606a", grid="#e5e7eb")  # 16.9:1, 6.2:1
_DARK = ChartPalette(background="#111111", text="#e6e6e6", muted="#a8a8a8", grid="#2f2f2f")  # 15.4:1, 8.4:1


def palette(dark: bool | None = None) -> ChartPalette:
    """The colours for JupyterLab's theme (``dark``: None reads it, see :func:`lab_theme_is_dark`)."""
    return _DARK if (lab_theme_is_dark() if dark is None else dark) else _LIGHT


def _settings_dirs() -> list[Path]:
    chosen = os.environ.get("JUPYTERLAB_SETTINGS_DIR")
    if chosen:
        return [Path(chosen)]
    try:
        from jupyter_core.paths import jupyter_config_dir
    except ImportError:
        return []
    return [Path(jupyter_config_dir()) / "lab" / "user-settings"]


def lab_theme_is_dark() -> bool:
    """Whether the JupyterLab theme the user chose is a dark one; False when nothing says so."""
    override = os.environ.get("GPUGEEK_CHART_THEME", "").strip().lower()
    if override in ("dark", "light"):
        return override == "dark"
    for folder in _settings_dirs():
        path = folder / THEMES_SETTINGS
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        try:  # JupyterLab writes JSON5: drop the comments it starts the file with
            settings = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.MULTILINE) or "{}")
        except ValueError as e:
            log.debug("cannot read the JupyterLab theme from %s: %s", path, e)
            continue
        return "dark" in str(settings.get("theme", "")).lower()
    return False


def apply_palette(plot: Any, colours: ChartPalette) -> Any:
    """Colour a bokeh figure (background, title, axes, grid, legend) with ``colours``; returns it."""
    plot.background_fill_color = colours.background
    plot.border_fill_color = colours.background
    plot.outline_line_color = colours.grid
    if plot.title is not None:
        plot.title.text_color = colours.text
    for axis in (*plot.xaxis, *plot.yaxis):
        axis.axis_line_color = colours.muted
        axis.major_tick_line_color = colours.muted
        axis.minor_tick_line_color = colours.muted
        axis.major_label_text_color = colours.muted
        axis.axis_label_text_color = colours.text
    for grid in (*plot.xgrid, *plot.ygrid):
        grid.grid_line_color = colours.grid
    for legend in plot.legend:
        legend.background_fill_color = colours.background
        legend.background_fill_alpha = 0.85
        legend.border_line_color = colours.grid
        legend.label_text_color = colours.text
    return plot
