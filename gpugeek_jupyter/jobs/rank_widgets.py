"""Widgets a rank displays: their state travels to the notebook, and so do their changes.

A rank has no kernel, so an ipywidgets widget made there has no front end to talk to (its comm is
the ``comm`` package's stand-in). ``display(widget)`` on a rank sends, as one display bundle, the
widget's state and that of every widget it holds (its layout, style, children), in ipywidgets'
embed format (as :func:`ipywidgets.embed.dependency_state` writes it, binary parts base64), under
:data:`~.display_stream.WIDGET_MIME`; the notebook makes the same widgets in its kernel
(:mod:`gpugeek_jupyter.widgets.rank_widgets`) and shows them. Each later change of a synced trait
(a progress bar's ``value``, a label's text, a child added) is sent as an update bundle
(:data:`~.display_stream.WIDGET_UPDATE_MIME`), with the state of any widget it now holds that the
notebook has not seen, so a hand-made progress bar or status label moves live. (``tqdm`` on a
rank never makes a widget: its bars go to the grouped progress view, :mod:`.progress_text`.)

Input flows one way: a slider moved in the notebook does not move the rank's (a rank runs its cell
to the end; it does not wait on the notebook). Outside a job a widget's text is printed.

Never imports ipywidgets itself (a rank's core does not depend on it): an object is a widget only
if ipywidgets is already loaded, and its own methods do the rest.
"""

from __future__ import annotations

import base64
import json
import sys
import threading
from typing import Any

from .display_stream import WIDGET_MIME, WIDGET_UPDATE_MIME

_sent: set[str] = set()  # model ids whose state the notebook has (this worker process)
_lock = threading.Lock()


def is_widget(obj: Any) -> bool:
    widgets = sys.modules.get("ipywidgets")
    return widgets is not None and isinstance(obj, widgets.Widget)


def widget_bundle(widget: Any) -> dict[str, Any]:
    """The display bundle of ``widget``: its text and its embed state; from now on its changes and
    those of the widgets it holds are sent as updates."""
    state = _state_of([widget], only_new=False)  # all of it: a notebook may show it again, in a new cell
    return {"text/plain": repr(widget), WIDGET_MIME: {"root": widget.model_id, "state": state}}


def _state_of(widgets: list[Any], only_new: bool) -> dict[str, Any]:
    """The embed state (ipywidgets' format: model name, module and version, state, base64 buffers)
    of ``widgets`` and the widgets they hold (``only_new``: less what the notebook has already);
    each widget sent is watched (once: traitlets keeps a handler once)."""
    state: dict[str, Any] = {}

    def add(widget: Any) -> None:
        model_id = widget.model_id
        if model_id in state or (only_new and model_id in _sent):
            return
        values, paths, buffers = _remove_buffers(widget.get_state())
        state[model_id] = {
            "model_name": widget._model_name,
            "model_module": widget._model_module,
            "model_module_version": widget._model_module_version,
            "state": values,
            "buffers": _encoded(paths, buffers),
        }
        widget.observe(_changed)
        for name in widget.keys:
            for held in _widgets_in(getattr(widget, name)):
                add(held)

    for widget in widgets:
        add(widget)
    with _lock:
        _sent.update(state)
    return state


def _remove_buffers(state: dict[str, Any]) -> tuple[dict[str, Any], list[Any], list[Any]]:
    """ipywidgets' own split of a state into JSON and binary parts (the module is loaded: a widget
    exists)."""
    split = sys.modules["ipywidgets.widgets.widget"]._remove_buffers
    return split(state)  # type: ignore[no-any-return]


def _encoded(paths: list[Any], buffers: list[Any]) -> list[dict[str, Any]]:
    return [
        {"encoding": "base64", "path": path, "data": base64.b64encode(bytes(data)).decode("ascii")}
        for path, data in zip(paths, buffers, strict=True)
    ]


def _changed(change: dict[str, Any]) -> None:
    widget, name = change["owner"], change["name"]
    if name not in widget.keys or name == "_view_count":
        return
    state, paths, buffers = _remove_buffers(widget.get_state(key=name))
    held = [w for w in _widgets_in(getattr(widget, name)) if w.model_id not in _sent]
    update = {
        "model_id": widget.model_id,
        "state": state,
        "buffers": _encoded(paths, buffers),
        "new": _state_of(held, only_new=True) if held else {},
    }
    _send({WIDGET_UPDATE_MIME: update})


def _widgets_in(value: Any) -> list[Any]:
    """The widgets a trait's value holds (a Box's children, a layout)."""
    if is_widget(value):
        return [value]
    if isinstance(value, (list, tuple)):
        return [w for item in value for w in _widgets_in(item)]
    if isinstance(value, dict):
        return [w for item in value.values() for w in _widgets_in(item)]
    return []


def _send(bundle: dict[str, Any]) -> None:
    from .capture import current_forwarder
    from .display_stream import DISPLAY_STREAM

    forwarder = current_forwarder()
    if forwarder is not None:  # after its job, a widget's change goes nowhere
        forwarder.write(DISPLAY_STREAM, json.dumps(bundle, default=str) + "\n")
