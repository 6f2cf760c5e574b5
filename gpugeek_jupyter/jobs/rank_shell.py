"""``get_ipython()`` inside a rank: the shell a rank's cells see.

A rank is a plain Python process on a worker, not an IPython kernel, and has no front end to
display to. Code written for notebooks still asks for the shell (``get_ipython().user_ns``, ``if
get_ipython() is not None``), so a rank's cells get :func:`get_ipython`, which answers a
:class:`RankShell`: its ``user_ns`` is the rank's namespace. A cell sent by ``%%gpugeek_run`` came
through IPython's transformations, so its ``%time``, ``!nvidia-smi`` and ``files = !ls`` are calls
of ``get_ipython().run_line_magic``, ``.system``, ``.getoutput`` by then: the magic names
(:attr:`~.payload.CellCode.ipython`) what makes a real IPython shell over the rank's namespace, and
those calls run there, output to the rank's stream. What a rank cannot do (``%pip`` on ranks that
share one environment, ``%matplotlib``, the debugger), and everything in a cell sent as plain Python
(``run_cell()``), raises one line saying so and what to use instead.

>>> shell = RankShell({"x": 1}, rank=0)
>>> shell.user_ns["x"], shell.kernel
(1, None)
>>> shell.run_line_magic("time", "x")
Traceback (most recent call last):
...
gpugeek_jupyter.jobs.rank_shell.NoShellOnRankError: %time does not run on the ranks of a cell sent as plain Python (send the cell with %%gpugeek_run, or use Python in the cell, e.g. time.perf_counter())
>>> RankShell({}, rank=0, ipython="any:shell").run_line_magic("pip", "install x")
Traceback (most recent call last):
...
gpugeek_jupyter.jobs.rank_shell.NoShellOnRankError: %pip does not run on the ranks (run %pip in the notebook: the workers share its environment, or install on the workers' hosts)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import MutableMapping
from typing import Any


class NoShellOnRankError(RuntimeError):
    """What a rank's cell asked of IPython needs what a rank does not have."""


def _refuse(what: str, instead: str, plain: bool) -> NoShellOnRankError:
    where = "the ranks of a cell sent as plain Python" if plain else "the ranks"
    return NoShellOnRankError(f"{what} does not run on {where} ({instead})")


class RankShell:
    """What ``get_ipython()`` answers on a rank (see the module's docstring)."""

    kernel = None  # no front end: nothing is displayed through it
    display_pub = None

    def __init__(self, user_ns: MutableMapping[str, Any], rank: int, ipython: str = "") -> None:
        self.user_ns = user_ns
        self.rank = rank
        self._ipython_factory = ipython  # "module:function": the real shell over user_ns ("": none)

    def __repr__(self) -> str:
        runs = "magics run in IPython" if self._ipython_factory else "no IPython here"
        return f"<RankShell of rank {self.rank}: {runs}; user_ns is this rank's namespace>"

    def _ipython(self, what: str, instead: str) -> Any:
        """The IPython shell over this rank's namespace, or the error saying there is none."""
        if not self._ipython_factory:
            raise _refuse(what, instead, plain=True)
        module, _, function = self._ipython_factory.partition(":")
        return getattr(importlib.import_module(module), function)(self.user_ns)

    def _ipython_for(self, what: str, magic_name: str, instead: str) -> Any:
        """The IPython shell to run magic ``magic_name`` in; one a rank cannot run says so."""
        cannot = _MAGIC_INSTEAD.get(magic_name)
        if cannot is not None and self._ipython_factory:
            raise _refuse(what, cannot.format(magic=magic_name), plain=False)
        return self._ipython(what, instead)

    def run_line_magic(self, magic_name: str, line: str, _stack_depth: int = 1) -> Any:
        if magic_name == "matplotlib" and line.strip() in ("", "inline"):
            return None  # a rank's figures already show inline (plt.show(), display(fig))
        shell = self._ipython_for(f"%{magic_name}", magic_name, _PLAIN_INSTEAD.get(magic_name, _SEND_WITH_THE_MAGIC))
        # one frame more than IPython counts: the cell's locals are two frames up from its own call
        return shell.run_line_magic(magic_name, line, _stack_depth=_stack_depth + 1)

    def run_cell_magic(self, magic_name: str, line: str, cell: str) -> Any:
        return self._ipython_for(f"%%{magic_name}", magic_name, _SEND_WITH_THE_MAGIC).run_cell_magic(
            magic_name, line, cell
        )

    def system(self, cmd: str) -> Any:
        shell = self._ipython(f"!{cmd}", f"use subprocess in the cell, e.g. subprocess.run({cmd!r}, shell=True)")
        sys.stdout.flush()  # what the cell printed comes before the command's own output
        sys.stderr.flush()
        return shell.system(cmd)

    def getoutput(self, cmd: str, split: bool = True, depth: int = 0) -> Any:
        shell = self._ipython(
            f"!{cmd}", f"use subprocess in the cell, e.g. subprocess.run({cmd!r}, shell=True, capture_output=True)"
        )
        return shell.getoutput(cmd, split=split, depth=depth + 1)

    def run_cell(self, raw_cell: str, *args: Any, **kwargs: Any) -> Any:
        raise _refuse("get_ipython().run_cell", "use exec(code) in the cell", plain=False)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"get_ipython().{name} is not available on the ranks: a rank is a plain Python process, not an "
            "IPython kernel (what it offers: user_ns, run_line_magic, run_cell_magic, system, getoutput; "
            "display needs the notebook)"
        )


_SEND_WITH_THE_MAGIC = "send the cell with %%gpugeek_run, whose magics and !commands run on every rank"
_PLAIN_INSTEAD = {
    "time": "send the cell with %%gpugeek_run, or use Python in the cell, e.g. time.perf_counter()",
    "timeit": "send the cell with %%gpugeek_run, or use Python in the cell, e.g. timeit.timeit(...)",
}
# what a rank cannot do even with IPython: the ranks of a local pool share the notebook's environment
# (installing from every rank at once), and have no front end or terminal
_MAGIC_INSTEAD = {
    name: "run %{magic} in the notebook: the workers share its environment, or install on the workers' hosts"
    for name in ("pip", "conda", "mamba", "micromamba", "uv")
} | {
    "matplotlib": "a rank's figures show inline only (plt.show(), display(fig)): %matplotlib inline",
    "pylab": "run %pylab in the notebook; on a rank, import matplotlib.pyplot as plt",
    "gui": "a rank has no event loop of a GUI; run %gui in the notebook",
    "debug": "a rank has no terminal to debug in; run %debug in the notebook, or read the rank's traceback",
    "pdb": "a rank has no terminal to debug in; read the rank's traceback, or %gpugeek_where for a live stack",
    "qtconsole": "a rank has no front end",
    "connect_info": "a rank is not a kernel",
}


def rank_get_ipython(user_ns: MutableMapping[str, Any], rank: int, ipython: str = "") -> Any:
    """The ``get_ipython`` function a rank's cells see (``ipython``: :class:`RankShell`'s)."""
    shell = RankShell(user_ns, rank, ipython)

    def get_ipython() -> RankShell:
        """This rank's stand-in for the notebook's shell (a RankShell: user_ns, and clear errors)."""
        return shell

    return get_ipython
