"""Rank output in the notebook: every line labelled ``[rank N]``, carriage returns kept.

A rank's tqdm bar redraws its line with ``\\r``; the label is written again after each ``\\r`` so
the frontend keeps drawing one labelled bar in place.

>>> import io
>>> out = io.StringIO()
>>> writer = LabelledWriter(stdout=out, stderr=out)
>>> writer(1, "stdout", "loss 0.5\\nloss ")
>>> writer(1, "stdout", "0.4\\n")
>>> out.getvalue()
'[rank 1] loss 0.5\\n[rank 1] loss 0.4\\n'
"""

from __future__ import annotations

import re
from typing import TextIO

_BREAKS = re.compile(r"(\r\n|\r|\n)")


class LabelledWriter:
    """Callable ``(rank, stream, text)`` that writes to ``stdout``/``stderr`` with rank labels."""

    def __init__(self, stdout: TextIO | None = None, stderr: TextIO | None = None) -> None:
        self._stdout = stdout
        self._stderr = stderr
        self._at_line_start: dict[tuple[int, str], bool] = {}

    def __call__(self, rank: int, stream: str, text: str) -> None:
        target = self._target(stream)
        target.write(self.label(rank, stream, text))
        target.flush()

    def label(self, rank: int, stream: str, text: str) -> str:
        key = (rank, stream)
        at_start = self._at_line_start.get(key, True)
        parts = []
        for piece in _BREAKS.split(text):
            if not piece:
                continue
            if _BREAKS.fullmatch(piece):
                parts.append(piece)
                at_start = True
            else:
                if at_start:
                    parts.append(f"[rank {rank}] ")
                parts.append(piece)
                at_start = False
        self._at_line_start[key] = at_start
        return "".join(parts)

    def _target(self, stream: str) -> TextIO:
        import sys

        if stream == "stderr":
            return self._stderr or sys.stderr
        return self._stdout or sys.stdout
