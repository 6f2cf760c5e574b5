"""The ranks' rich output in the notebook: each ``display(...)`` / ``plt.show()`` of a rank
(:mod:`gpugeek_jupyter.jobs.rank_display`) shown as display data under a ``[rank N]`` label.

With ``--output grouped`` a display several ranks send alike is shown once, its label updated in
place (``[ranks 0-7]``); ``--output rank0`` shows rank 0's only; ``all`` shows every rank's. A rank's ipywidgets widget is
made again in this kernel and follows the rank's changes (:mod:`gpugeek_jupyter.widgets.rank_widgets`);
each rank's is its own.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from IPython.display import display

from ..jobs.display_stream import DISPLAY_STREAM, WIDGET_MIME, WIDGET_UPDATE_MIME, read_bundles
from ..jobs.output import format_ranks
from ..widgets import rank_widgets


class RankDisplays:
    """Callable ``(rank, stream, text)``: display lines to the notebook, the rest to ``writer``."""

    def __init__(self, writer: Any, mode: str) -> None:
        self.writer = writer
        self.mode = mode
        self._partial: dict[int, str] = {}
        self._shown: dict[str, tuple[Any, list[int]]] = {}  # bundle digest -> (label's handle, ranks)

    def __call__(self, rank: int, stream: str, text: str) -> None:
        if stream != DISPLAY_STREAM:
            self.writer(rank, stream, text)
            return
        if self.mode == "rank0" and rank != 0:
            return
        *lines, rest = (self._partial.pop(rank, "") + text).split("\n")
        if rest:
            self._partial[rank] = rest
        for bundle in read_bundles("\n".join(lines)):
            self._show(rank, bundle)

    def _show(self, rank: int, bundle: dict[str, Any]) -> None:
        if WIDGET_UPDATE_MIME in bundle:  # a change of a widget shown before: the kernel's copy takes it
            rank_widgets.apply_update(bundle[WIDGET_UPDATE_MIME])
            return
        if WIDGET_MIME in bundle:
            widget = rank_widgets.show_state(bundle[WIDGET_MIME])
            if widget is not None:
                display({"text/plain": f"[rank {rank}]"}, raw=True)
                display(widget, metadata={"gpugeek": {"rank": rank}})
                return
        digest = hashlib.sha256(json.dumps(bundle, sort_keys=True, default=str).encode()).hexdigest()
        if self.mode == "grouped" and digest in self._shown:
            label, ranks = self._shown[digest]
            ranks.append(rank)
            label.update({"text/plain": f"[{format_ranks(ranks)}]"}, raw=True)
            return
        label = display({"text/plain": f"[rank {rank}]"}, raw=True, display_id=True)
        display(bundle, raw=True, metadata={"gpugeek": {"rank": rank}})
        self._shown[digest] = (label, [rank])

    def show_values(self, ranks: list[int], values: list[Any], format_value: Any) -> bool:
        """Show each rank's value of the cell by its rich display (a DataFrame's table, a figure),
        labelled as a rank's ``display(...)`` is; False when none has more than text (then the
        values are the cell's value, a list, as IPython shows it). ``format_value`` is IPython's
        ``shell.display_formatter.format``."""
        bundles = [format_value(value)[0] for value in values]
        if all(set(bundle) <= {"text/plain"} for bundle in bundles):
            return False
        for rank, bundle in zip(ranks, bundles, strict=True):
            if self.mode != "rank0" or rank == 0:
                self._show(rank, bundle)
        return True

    def close(self) -> None:
        for rank, rest in sorted(self._partial.items()):
            for bundle in read_bundles(rest):
                self._show(rank, bundle)
        self._partial.clear()
        self.writer.close()
