"""The display stream: how a rank's display bundles travel on its output (:mod:`.rank_display`),
one JSON line each, and how a terminal shows them (their ``text/plain``)."""

from __future__ import annotations

import json
from typing import Any

DISPLAY_STREAM = "display"
# a widget a rank displays: {"root": model id, "state": ipywidgets' embed state of it and its parts}
WIDGET_MIME = "application/vnd.gpugeek.rank-widget+json"
# a change of such a widget: {"model_id", "state", "buffers", "new": embed state of parts it now holds}
WIDGET_UPDATE_MIME = "application/vnd.gpugeek.rank-widget-update+json"


def read_bundles(text: str) -> list[dict[str, Any]]:
    """The bundles in a chunk of the display stream (whole lines; anything else as text/plain)."""
    bundles = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            bundle = json.loads(line)
        except ValueError:
            bundle = {"text/plain": line}
        bundles.append(bundle if isinstance(bundle, dict) else {"text/plain": str(bundle)})
    return bundles


def plain_text(text: str) -> str:
    """A chunk of the display stream as a terminal shows it: each bundle's text/plain, a line each
    (a widget's change has none: nothing)."""
    return "".join(f"{b['text/plain']}\n" for b in read_bundles(text) if "text/plain" in b)
