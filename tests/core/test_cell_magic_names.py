"""The notebook names a ``%%gpugeek_run`` cell's code magics read are sent along, as the cell's own
code's are: ``%time f(x)`` needs ``f`` and ``x`` on the ranks (the cell has come through IPython's
transformations, so the magic is a ``get_ipython().run_line_magic`` call with the code as a string)."""

from __future__ import annotations

import pytest
from IPython.core.inputtransformer2 import TransformerManager

from gpugeek_jupyter.errors import SpecError
from gpugeek_jupyter.jobs.cell import prepare_cell

NOTEBOOK = {"f": len, "x": [1, 2], "g": sum, "a": (1,), "h": abs, "b": -1, "k": str, "c": 3, "q": max, "d": 4}


def shipped(cell: str) -> list[str]:
    source = TransformerManager().transform_cell(cell)
    return sorted(prepare_cell(source, NOTEBOOK, ipython="any.module:shell").shipped)


@pytest.mark.parametrize(
    ("cell", "names"),
    [
        ("%time y = f(x)", ["f", "x"]),
        ("x = [3]\n%time y = f(x)", ["f"]),  # bound by the cell before: the rank's own
        ("%timeit -n 3 -r 1 g(a)", ["a", "g"]),
        ("%timeit -q -o g(a)", ["a", "g"]),
        ("r = %time h(b)", ["b", "h"]),
        ("%%time\nz = k(c)\nz", ["c", "k"]),
        ("%%timeit -n 2\nk(c)", ["c", "k"]),
        ("%prun -l 3 f(x)", ["f", "x"]),
        ("if True:\n    %time q(d)", ["d", "q"]),
        ("%who", []),
        ("!echo $x", []),  # expanded on each rank from its own names
        ("%time f(x", []),  # code that does not parse is the magic's to report, on the ranks
    ],
)
def test_the_code_a_magic_runs_sends_the_notebook_names_it_reads(cell: str, names: list[str]) -> None:
    assert shipped(cell) == names


def test_a_plain_python_cell_with_a_magic_is_refused_naming_where_magics_run() -> None:
    with pytest.raises(SpecError) as raised:
        prepare_cell("%time f(x)", NOTEBOOK)
    assert str(raised.value) == (
        "the cell does not parse: invalid syntax at line 1 ('%time f(x)'); run_cell() takes plain Python "
        "(%magics and !commands run in %%gpugeek_run cells)"
    )
