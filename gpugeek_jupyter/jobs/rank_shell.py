"""``get_ipython()`` inside a rank: a small, honest stand-in for the notebook's shell.

A rank is a plain Python process on a worker, not an IPython kernel: there is no shell to run
magics or ``!commands`` in and no front end to display to. Code written for notebooks still asks
for the shell (``get_ipython().user_ns``, ``if get_ipython() is not None``), so a rank's cells get
:func:`get_ipython`, which answers a :class:`RankShell`: its ``user_ns`` is the rank's namespace,
and what needs a real shell raises one line saying so and what to use instead.

>>> shell = RankShell({"x": 1}, rank=0)
>>> shell.user_ns["x"], shell.kernel
(1, None)
>>> shell.run_line_magic("time", "x")
Traceback (most recent call last):
...
gpugeek_jupyter.jobs.rank_shell.NoShellOnRankError: %time does not run on the ranks: a rank is a plain Python process, not an IPython kernel (run %time in the notebook, outside %%gpugeek_run, or use Python in the cell, e.g. time.perf_counter())
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any


class NoShellOnRankError(RuntimeError):
    """What a rank's cell asked of IPython needs a real shell, which a rank does not have."""


def _refuse(what: str, instead: str) -> NoShellOnRankError:
    return NoShellOnRankError(
        f"{what} does not run on the ranks: a rank is a plain Python process, not an IPython kernel ({instead})"
    )


class RankShell:
    """What ``get_ipython()`` answers on a rank (see the module's docstring)."""

    kernel = None  # no front end: nothing is displayed through it
    display_pub = None

    def __init__(self, user_ns: MutableMapping[str, Any], rank: int) -> None:
        self.user_ns = user_ns
        self.rank = rank

    def __repr__(self) -> str:
        return f"<RankShell of rank {self.rank}: no IPython here; user_ns is this rank's namespace>"

    def run_line_magic(self, magic_name: str, line: str, _stack_depth: int = 1) -> Any:
        raise _refuse(
            f"%{magic_name}",
            _MAGIC_INSTEAD.get(magic_name, f"run %{magic_name} in the notebook, outside %%gpugeek_run").format(
                magic=magic_name
            ),
        )

    def run_cell_magic(self, magic_name: str, line: str, cell: str) -> Any:
        raise _refuse(f"%%{magic_name}", f"run %%{magic_name} in the notebook, outside %%gpugeek_run")

    def system(self, cmd: str) -> Any:
        raise _refuse(f"!{cmd}", f"use subprocess in the cell, e.g. subprocess.run({cmd!r}, shell=True)")

    def getoutput(self, cmd: str, split: bool = True, depth: int = 0) -> Any:
        raise _refuse(
            f"!{cmd}", f"use subprocess in the cell, e.g. subprocess.run({cmd!r}, shell=True, capture_output=True)"
        )

    def run_cell(self, raw_cell: str, *args: Any, **kwargs: Any) -> Any:
        raise _refuse("get_ipython().run_cell", "use exec(code) in the cell")

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"get_ipython().{name} is not available on the ranks: a rank is a plain Python process, not an "
            "IPython kernel (what it offers: user_ns; magics, !commands and display need the notebook)"
        )


_MAGIC_INSTEAD = {
    "time": "run %{magic} in the notebook, outside %%gpugeek_run, or use Python in the cell, e.g. time.perf_counter()",
    "timeit": "use Python in the cell, e.g. timeit.timeit(...)",
    "pip": "run %pip in the notebook: the workers share its environment, or install on the workers' hosts",
    "matplotlib": "run %matplotlib in the notebook; on a rank, save figures with fig.savefig(...)",
}


def rank_get_ipython(user_ns: MutableMapping[str, Any], rank: int) -> Any:
    """The ``get_ipython`` function a rank's cells see."""
    shell = RankShell(user_ns, rank)

    def get_ipython() -> RankShell:
        """This rank's stand-in for the notebook's shell (a RankShell: user_ns, and clear errors)."""
        return shell

    return get_ipython
