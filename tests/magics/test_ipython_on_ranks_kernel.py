"""IPython's habits on the ranks, in a real kernel: a top-level ``await`` runs (on one event loop
per rank that lasts from cell to cell); a cell's ``%magics``, ``!commands`` and ``x?`` run on every
rank in an IPython shell over the rank's namespace; ``get_ipython()`` answers a stand-in whose
``user_ns`` is the rank's namespace; what a rank cannot do says so in one line."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.kernel import KernelSession, pool_kernel

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    with pool_kernel(tmp_path_factory, "shell") as session:
        yield session


def _shown(kernel: KernelSession, cell: str) -> str:
    result = kernel.run(cell, timeout=120)
    assert result.error is None, result.text
    return result.text


def test_a_top_level_await_runs_in_a_cell_and_as_its_value(kernel: KernelSession) -> None:
    shown = _shown(
        kernel, "%%gpugeek_run\nimport asyncio\nawait asyncio.sleep(0.01)\nawait asyncio.sleep(0, result=rank * 2)"
    )
    assert "[0, 2]" in shown, shown


def test_a_task_started_in_one_cell_is_awaited_in_the_next(kernel: KernelSession) -> None:
    _shown(kernel, "%%gpugeek_run\nimport asyncio\ntask = asyncio.ensure_future(asyncio.sleep(0.05, result=rank + 5))")
    assert "[5, 6]" in _shown(kernel, "%%gpugeek_run\nawait task")


def test_get_ipython_on_a_rank_gives_its_namespace(kernel: KernelSession) -> None:
    _shown(kernel, "%%gpugeek_run\nmine = rank * 10")
    assert "[10, 11]" in _shown(kernel, "%%gpugeek_run\nget_ipython().user_ns['mine'] + 10 + rank - rank * 10")


def test_line_and_cell_magics_run_on_every_rank_over_its_namespace(kernel: KernelSession) -> None:
    shown = _shown(kernel, "%%gpugeek_run\nx = rank + 1\n%time y = x * 2\n%timeit -n 2 -r 1 sum(range(x))\ny")
    assert "[2, 4]" in shown, shown
    for rank in (0, 1):
        assert f"[rank {rank}] Wall time:" in shown, shown
        assert f"[rank {rank}] " in shown and "per loop" in shown, shown
    shown = _shown(kernel, "%%gpugeek_run\n%%time\nz = rank * 3\nz")
    assert "Wall time:" in shown, shown
    assert "[0, 3]" in _shown(kernel, "%%gpugeek_run\nz")  # the cell magic's names are the rank's
    assert "[0, 1]" in _shown(
        kernel, "%%gpugeek_run\nimport os\n%env GG_TEST_VAR={rank}\nint(os.environ['GG_TEST_VAR'])"
    )


def test_shell_commands_run_on_every_rank_and_their_output_is_a_list(kernel: KernelSession) -> None:
    shown = _shown(kernel, "%%gpugeek_run\nprint('before', rank)\n!echo from rank $rank")
    for rank in (0, 1):
        assert shown.index(f"[rank {rank}] before {rank}") < shown.index(f"[rank {rank}] from rank {rank}"), shown
    shown = _shown(kernel, "%%gpugeek_run\nlines = !printf 'a\\nb\\n'\n(type(lines).__name__, list(lines))")
    assert "[('SList', ['a', 'b']), ('SList', ['a', 'b'])]" in shown, shown


def test_help_shows_on_every_rank_and_ipythons_names_stay_out_of_the_ranks(kernel: KernelSession) -> None:
    shown = _shown(kernel, "%%gpugeek_run\nlen?")
    assert "[rank 0]" in shown and "[rank 1]" in shown and "Return the number of items" in shown, shown
    shown = _shown(
        kernel,
        "%%gpugeek_run --rank0\n(repr(get_ipython())[:10], [n for n in ('In', 'Out', '_ih', 'quit') if n in dir()])",
    )
    assert "('<RankShell', [])" in shown, shown
    import_free = _shown(kernel, "%%gpugeek_run --rank0\nimport builtins\nhasattr(builtins, '__IPYTHON__')")
    assert "False" in import_free, import_free


def test_what_a_rank_cannot_do_says_so_and_what_to_do_instead(kernel: KernelSession) -> None:
    result = kernel.run("%%gpugeek_run\n%pip install nothing-at-all", timeout=120)
    assert result.error is not None, result.text
    assert (
        "NoShellOnRankError: %pip does not run on the ranks (run %pip in the notebook: the workers share its "
        "environment, or install on the workers' hosts)" in result.error["evalue"]
    ), result.error["evalue"]
    assert "[None, None]" not in _shown(kernel, "%%gpugeek_run\n%matplotlib inline")  # figures show inline already


def test_exit_in_a_cell_fails_it_and_leaves_the_ranks_able_to_read_help(kernel: KernelSession) -> None:
    result = kernel.run("%%gpugeek_run\nexit()", timeout=120)
    assert result.error is not None and "SystemExit" in result.error["evalue"], result.text
    assert "Return the number of items" in _shown(kernel, "%%gpugeek_run --rank0\nhelp(len)")
