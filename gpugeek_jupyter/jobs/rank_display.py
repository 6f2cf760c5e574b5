"""Rich output from the ranks: ``display(...)`` and ``plt.show()`` on a rank reach the notebook as
display data (HTML tables, images, Markdown), as ipyparallel forwards them.

On a rank, ``display`` is a rank name (like ``rank``): it makes each object's MIME bundle the way
IPython does, from the object's ``_repr_mimebundle_`` or its ``_repr_html_``, ``_repr_png_``, ...
methods (pandas frames, ``IPython.display.HTML``/``Markdown``/``Image``, anything with them), and
sends it on the rank's output as one line of the :data:`DISPLAY_STREAM` stream. The notebook shows
it as display data under a ``[rank N]`` label; a terminal shows its ``text/plain``. An ipywidgets
widget goes as its state, and its changes follow (:mod:`.rank_widgets`). matplotlib on a
rank uses :mod:`.rank_mpl` as its backend (``MPLBACKEND``), so ``plt.show()`` sends each open figure as
a PNG and closes it, as the notebook's inline backend does.

This module never imports IPython (a rank is a plain Python process): it reads the repr methods.
"""

from __future__ import annotations

import base64
import importlib.abc
import json
import os
import sys
from typing import Any

from .display_stream import DISPLAY_STREAM
from .rank_widgets import is_widget, widget_bundle

BACKEND = "module://gpugeek_jupyter.jobs.rank_mpl"  # matplotlib's backend on the ranks

_REPRS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
)
_BINARY = {"image/png", "image/jpeg"}


def bundle_of(obj: Any) -> dict[str, Any]:
    """``obj``'s MIME bundle, as IPython's display formatter makes it (text/plain always)."""
    data: dict[str, Any] = {}
    if is_widget(obj):  # its state, for the notebook to make it there (its changes follow)
        return widget_bundle(obj)
    if _is_figure(obj):  # as the inline backend shows a figure
        return {"image/png": figure_png(obj), "text/plain": repr(obj)}
    mimebundle = getattr(obj, "_repr_mimebundle_", None)
    if callable(mimebundle) and not isinstance(obj, type):
        answer = mimebundle()
        if isinstance(answer, tuple):
            answer = answer[0]
        if isinstance(answer, dict):
            data.update(answer)
    for mime, method in _REPRS:
        if mime in data:
            continue
        render = getattr(obj, method, None)
        if not callable(render) or isinstance(obj, type):
            continue
        value = render()
        if isinstance(value, tuple):  # (data, metadata)
            value = value[0]
        if value is None:
            continue
        data[mime] = value
    for mime in _BINARY & data.keys():
        if isinstance(data[mime], bytes):
            data[mime] = base64.b64encode(data[mime]).decode("ascii")
    data.setdefault("text/plain", repr(obj))
    return data


def _is_figure(obj: Any) -> bool:
    figure = sys.modules.get("matplotlib.figure")
    return figure is not None and isinstance(obj, figure.Figure)


def figure_png(figure: Any) -> str:
    """A matplotlib figure as a base64 PNG."""
    import io

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def display(*objs: Any, raw: bool = False, **ignored: Any) -> None:
    """Show ``objs`` in the notebook, from this rank (``raw=True``: each is a MIME bundle already)."""
    for obj in objs:
        bundle = obj if raw and isinstance(obj, dict) else bundle_of(obj)
        send_bundle(bundle)


def send_bundle(bundle: dict[str, Any]) -> None:
    """One display line on the rank's output (outside a job: its text, printed)."""
    from .capture import current_forwarder

    forwarder = current_forwarder()
    if forwarder is None:
        print(bundle.get("text/plain", ""))
        return
    forwarder.write(DISPLAY_STREAM, json.dumps(bundle, default=str) + "\n")


_IPYTHON_DISPLAY = "IPython.core.display_functions"  # where IPython defines display (re-exported elsewhere)


class _IPythonDisplayHook(importlib.abc.MetaPathFinder):
    """When a rank imports IPython, its ``display`` (which, without a kernel, prints text) becomes
    this module's, before ``IPython.display`` re-exports it."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _IPYTHON_DISPLAY:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader.exec_module = _then_patch(spec.loader.exec_module)  # type: ignore[method-assign]
                return spec
        return None


def _then_patch(exec_module: Any) -> Any:
    def patched(module: Any) -> None:
        exec_module(module)
        module.display = display

    return patched


_hook = _IPythonDisplayHook()


def use_on_ranks(namespace: dict[str, Any]) -> None:
    """Give a rank's cells ``display``, and IPython's ``display`` the same behaviour (see
    :class:`_IPythonDisplayHook`; also when IPython was imported before); matplotlib this backend."""
    namespace["display"] = display
    # pyplot, when a cell imports it, takes this backend; the notebook's inline one (a kernel puts
    # it into the environment the workers inherit) needs a kernel, which a rank does not have
    if "matplotlib" not in sys.modules and "inline" in os.environ.get("MPLBACKEND", "inline"):
        os.environ["MPLBACKEND"] = BACKEND
    if _hook not in sys.meta_path:
        sys.meta_path.insert(0, _hook)
    for module_name in (_IPYTHON_DISPLAY, "IPython.display", "IPython.core.display"):
        module = sys.modules.get(module_name)
        if module is not None and getattr(module, "display", display) is not display:
            original = module.display
            setattr(module, "display", display)  # noqa: B010 (a module's attribute, typed as ModuleType)
            for name, value in list(namespace.items()):
                if value is original:
                    namespace[name] = display
