"""A cell on the ranks reads as IPython reads a cell: a last line ending in ``;`` shows nothing, and
its value is never sent back from the ranks."""

from __future__ import annotations

from typing import Any

import pytest

from gpugeek_jupyter.jobs.cell_source import ends_with_semicolon, shows_value


@pytest.mark.parametrize(
    ("source", "quiet"),
    [
        ("x", False),
        ("x;", True),
        ("x;  # a comment after it", True),
        ("x;\n\n", True),
        ("f(a=';')", False),
        ("for i in range(3):\n    i;", True),
        ("'a;'", False),
    ],
)
def test_a_trailing_semicolon_is_read_as_ipython_reads_it(source: str, quiet: bool) -> None:
    assert ends_with_semicolon(source) is quiet


def test_only_a_last_expression_without_semicolon_shows_a_value() -> None:
    assert shows_value("y = 2\ny * 3")
    assert not shows_value("y = 2\ny * 3;")
    assert not shows_value("y = 2")
    assert not shows_value("def f(:")  # not Python: nothing to show


def test_a_quiet_last_line_runs_but_its_value_stays_on_the_ranks(pool: Any) -> None:
    from gpugeek_jupyter.jobs import run_cell

    shown = run_cell(pool, "import torch\nbig = torch.ones(1000)\nbig.sum().item()", {})
    quiet = run_cell(pool, "big.add_(1);", {})
    after = run_cell(pool, "big.sum().item()", {})
    assert shown.values == [1000.0, 1000.0]
    assert quiet.ok and quiet.values == [None, None]  # the tensor add_ returns was not sent back
    assert after.values == [2000.0, 2000.0]  # and the line did run
