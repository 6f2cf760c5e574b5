"""Hand-written progress lines of several ranks, each redrawn in place in the notebook.

A rank that redraws its line with a bare ``\\r`` (``print(f"\\rstep {i}", end="")``) gets a display
area of its own for that line, updated in place, so that two ranks' redraws never overwrite each
other on the cell's one output line (the notebook redraws only a stream's last line). The line's
end (``\\n``) leaves its last drawing there; the rank's next lines are text again. Only for
``--output all``: grouped output keeps a redrawn line's last drawing, rank0 shows one rank.
Progress bars (tqdm) travel as bars, not text (:mod:`gpugeek_jupyter.jobs.capture`).
"""

from __future__ import annotations

import re
import sys
from typing import Any

from IPython.display import display

from ..jobs.output import LabelledWriter

_PIECES = re.compile(r"(\r\n|\n|\r)")
_BARE_CR = re.compile(r"\r(?!\n)")


class RedrawnLines:
    """Callable ``(rank, stream, text)``: a rank's redrawn line to its own display area, the rest to
    ``writer`` (a :class:`LabelledWriter`)."""

    def __init__(self, writer: LabelledWriter) -> None:
        self.writer = writer
        self._areas: dict[tuple[int, str], Any] = {}  # (rank, stream) -> display handle, while redrawn
        self._drawing: dict[tuple[int, str], str] = {}  # what that line says now

    def __call__(self, rank: int, stream: str, text: str) -> None:
        key = (rank, stream)
        if key not in self._areas and not _BARE_CR.search(text):
            self.writer(rank, stream, text)
            return
        for piece in _PIECES.split(text):
            if not piece:
                continue
            if piece == "\r":
                if key not in self._areas:
                    self._open(key)
                self._drawing[key] = ""
            elif piece in ("\n", "\r\n"):
                if key in self._areas:
                    self._draw(key)
                    del self._areas[key], self._drawing[key]  # its last drawing stays where it is
                else:
                    self.writer(rank, stream, piece)
            elif key in self._areas:
                self._drawing[key] += piece
            else:
                self.writer(rank, stream, piece)
        if key in self._areas:
            self._draw(key)

    def _open(self, key: tuple[int, str]) -> None:
        rank, stream = key
        if self.writer.line_open(rank, stream):  # text before the first \r: its line ends where it is
            self.writer(rank, stream, "\n")
        for out in (sys.stdout, sys.stderr):  # what came before stays above the area
            out.flush()
        self._areas[key] = display(self._bundle(key, ""), raw=True, display_id=True)
        self._drawing[key] = ""

    def _draw(self, key: tuple[int, str]) -> None:
        self._areas[key].update(self._bundle(key, self._drawing[key]), raw=True)

    @staticmethod
    def _bundle(key: tuple[int, str], line: str) -> dict[str, str]:
        return {"text/plain": f"[rank {key[0]}] {line}"}

    def close(self) -> None:
        """The job ended: lines still being redrawn keep their last drawing."""
        self._areas.clear()
        self._drawing.clear()
        self.writer.close()


def redrawn_in_place(writer: Any) -> Any:
    """``writer`` with its ranks' redrawn lines in display areas of their own, when it labels every
    rank's lines (``--output all``); any other writer as it is."""
    return RedrawnLines(writer) if isinstance(writer, LabelledWriter) else writer
