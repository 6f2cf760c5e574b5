"""Widgets displayed on ranks, made again in the notebook's kernel.

A rank sends a widget it displays as ipywidgets' embed state of it and of the widgets it holds
(:mod:`gpugeek_jupyter.jobs.rank_widgets`). Here each becomes a widget of this kernel with the same
model (module, name, version) and the same synced state, opened through ipywidgets' own comm
protocol, parts first, so the notebook's widget manager draws it with the real widget's view; the
rank's model ids in the state (``IPY_MODEL_...``) are this kernel's ids of the same parts. A change
the rank sends is set on the kernel's widget, which ipywidgets sends on to every view of it.

The kernel's widget mirrors: it has the state, not the rank's Python class, and a change made in
the notebook stays in the notebook.
"""

from __future__ import annotations

import base64
import threading
from typing import Any

from ipywidgets import Widget
from ipywidgets.widgets.widget import _put_buffers
from traitlets import Any as AnyTrait
from traitlets import Unicode

REFERENCE = "IPY_MODEL_"
_MODEL_TRAITS = ("_model_name", "_model_module", "_model_module_version")

_mirrors: dict[str, Widget] = {}  # a rank's model id -> this kernel's widget of it
_lock = threading.RLock()


def mirror_of(rank_model_id: str) -> Widget | None:
    """This kernel's widget of a rank's ``rank_model_id`` (None: not shown here)."""
    return _mirrors.get(rank_model_id)


def show_state(message: dict[str, Any]) -> Widget | None:
    """The kernel's widget of a displayed rank widget (``{"root", "state"}``), made (or updated) with
    the parts it holds; None when the message does not say one."""
    root = message.get("root")
    state = message.get("state")
    if not isinstance(root, str) or not isinstance(state, dict) or root not in state:
        return None
    with _lock:
        _make_all(state)
        return _mirrors.get(root)


def apply_update(update: dict[str, Any]) -> None:
    """Set a rank's change (``{"model_id", "state", "buffers", "new"}``) on the kernel's widget."""
    with _lock:
        new = update.get("new")
        if isinstance(new, dict) and new:
            _make_all(new)
        widget = _mirrors.get(str(update.get("model_id")))
        values = update.get("state")
        if widget is None or not isinstance(values, dict):
            return  # a widget this kernel never showed (another rank's, under --output rank0)
        values = _mapped(_with_buffers(values, update.get("buffers") or []))
        with widget.hold_sync():
            for name, value in values.items():
                if not widget.has_trait(name):
                    widget.add_traits(**{name: AnyTrait(None, allow_none=True).tag(sync=True)})
                setattr(widget, name, value)


def _make_all(state: dict[str, Any]) -> None:
    """Make (or bring up to date) a widget for each entry of an embed ``state``, the parts each
    holds before it."""
    making: set[str] = set()

    def make(model_id: str) -> None:
        if model_id in making or model_id not in state:
            return  # a cycle, or a part the kernel already has
        making.add(model_id)
        entry = state[model_id]
        values = _with_buffers(dict(entry.get("state") or {}), entry.get("buffers") or [])
        for held in _references(values):
            make(held)
        values = _mapped(values)
        existing = _mirrors.get(model_id)
        if existing is not None:  # shown before: its state now
            with existing.hold_sync():
                for name, value in values.items():
                    if existing.has_trait(name) and name not in _MODEL_TRAITS:
                        setattr(existing, name, value)
            return
        _mirrors[model_id] = _mirror_class(entry, values)(**_settable(values))

    for model_id in list(state):
        make(model_id)


def _mirror_class(entry: dict[str, Any], values: dict[str, Any]) -> type[Widget]:
    """A widget class of the entry's model whose synced traits are the state's names."""
    traits: dict[str, Any] = {
        "_model_name": Unicode(str(entry.get("model_name"))).tag(sync=True),
        "_model_module": Unicode(str(entry.get("model_module"))).tag(sync=True),
        "_model_module_version": Unicode(str(entry.get("model_module_version"))).tag(sync=True),
    }
    for name in values:
        if name in traits:
            continue
        if name.startswith("_view_") and name != "_view_count":
            traits[name] = Unicode(values[name], allow_none=True).tag(sync=True)
        else:
            traits[name] = AnyTrait(None, allow_none=True).tag(sync=True)
    return type(f"Rank{entry.get('model_name', 'Widget')}", (Widget,), traits)


def _settable(values: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in values.items() if name not in _MODEL_TRAITS}


def _with_buffers(values: dict[str, Any], buffers: list[dict[str, Any]]) -> dict[str, Any]:
    if buffers:
        paths = [b["path"] for b in buffers]
        data = [base64.b64decode(b["data"]) for b in buffers]
        _put_buffers(values, paths, data)
    return values


def _references(value: Any) -> list[str]:
    """The rank model ids a state value names (``IPY_MODEL_<id>``)."""
    if isinstance(value, str):
        return [value[len(REFERENCE) :]] if value.startswith(REFERENCE) else []
    if isinstance(value, (list, tuple)):
        return [ref for item in value for ref in _references(item)]
    if isinstance(value, dict):
        return [ref for item in value.values() for ref in _references(item)]
    return []


def _mapped(value: Any) -> Any:
    """``value`` with each rank model id it names replaced by this kernel's id of the same part."""
    if isinstance(value, str) and value.startswith(REFERENCE):
        mirror = _mirrors.get(value[len(REFERENCE) :])
        return REFERENCE + mirror.model_id if mirror is not None else value
    if isinstance(value, list):
        return [_mapped(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_mapped(item) for item in value)
    if isinstance(value, dict):
        return {key: _mapped(item) for key, item in value.items()}
    return value
