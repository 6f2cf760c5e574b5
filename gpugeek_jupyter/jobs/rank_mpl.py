"""matplotlib's backend on the ranks (``MPLBACKEND``, set by :func:`.rank_display.use_on_ranks`):
Agg's canvas, and ``plt.show()`` sends each open figure to the notebook as a PNG, then closes it, as
the notebook's inline backend does. Imported by matplotlib only, when a rank's cell uses pyplot."""

from __future__ import annotations

from typing import Any

from matplotlib._pylab_helpers import Gcf
from matplotlib.backends.backend_agg import FigureCanvasAgg, FigureManagerBase

from .rank_display import display

FigureCanvas = FigureCanvasAgg
FigureManager = FigureManagerBase


def show(*args: Any, **kwargs: Any) -> None:
    """Every open figure to the notebook as a PNG (with its text), then closed."""
    for manager in Gcf.get_all_fig_managers():
        display(manager.canvas.figure)
    Gcf.destroy_all()
