"""The IPython shell a ``%%gpugeek_run`` cell's magics and ``!commands`` run in on a rank.

The magic sends its cell through the notebook's IPython transformations, so ``%timeit f(x)`` reaches
the ranks as ``get_ipython().run_line_magic('timeit', 'f(x)')``; the rank's ``get_ipython()``
(:class:`gpugeek_jupyter.jobs.rank_shell.RankShell`) hands such calls to the shell :func:`shell_for`
makes here, on the worker: IPython's own ``InteractiveShell`` over the rank's namespace, so that
magics read and assign the cell's names. It is not IPython's global instance, keeps no history,
and leaves ``sys.modules['__main__']`` (the rank's, where cells' classes live for pickling) alone.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import MutableMapping
from typing import Any

from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

SHELL_FOR = f"{__name__}:shell_for"  # what the magic names in its requests (CellCode.ipython)

_made: list[tuple[MutableMapping[str, Any], InteractiveShell]] = []  # the last one: one namespace per worker
_lock = threading.Lock()


class _RankIPython(InteractiveShell):
    def init_sys_modules(self) -> None:
        """IPython would make its namespace ``__main__``; the rank's own stays."""


def shell_for(user_ns: MutableMapping[str, Any]) -> InteractiveShell:
    """The IPython shell over ``user_ns`` (a rank's namespace), made at its first magic (~20 ms)."""
    with _lock:
        if _made and _made[0][0] is user_ns:
            return _made[0][1]
        config = Config()
        config.HistoryManager.enabled = False  # a rank's magics are not the user's input history
        kept = {name: user_ns[name] for name in _IPYTHONS_NAMES if name in user_ns}
        flags = {name: vars(builtins)[name] for name in _IPYTHONS_BUILTINS if name in vars(builtins)}
        try:
            shell = _RankIPython(config=config, user_ns=user_ns)  # type: ignore[arg-type]
        finally:
            # IPython puts its own names into the namespace (get_ipython, In, Out, exit, open, ...)
            # and flags into builtins (__IPYTHON__, display): the rank's are what its cells see
            for name in _IPYTHONS_NAMES:
                user_ns.pop(name, None)
            user_ns.update(kept)
            for name in _IPYTHONS_BUILTINS:
                vars(builtins).pop(name, None)
            vars(builtins).update(flags)
        _made[:] = [(user_ns, shell)]
        return shell


_IPYTHONS_NAMES = ("_ih", "_oh", "_dh", "In", "Out", "get_ipython", "exit", "quit", "open", "_", "__", "___")
_IPYTHONS_BUILTINS = ("__IPYTHON__", "display")
