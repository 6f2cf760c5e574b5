"""IPython's habits on the ranks, in a real kernel: a top-level ``await`` runs (on one event loop
per rank that lasts from cell to cell), and ``get_ipython()`` answers a small stand-in whose
``user_ns`` is the rank's namespace and whose magics say in one line that they need the notebook."""

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


def test_a_magic_asked_of_a_ranks_shell_says_it_needs_the_notebook(kernel: KernelSession) -> None:
    result = kernel.run("%%gpugeek_run\nget_ipython().run_line_magic('time', 'x = 1')", timeout=120)
    assert result.error is not None, result.text
    assert (
        "NoShellOnRankError: %time does not run on the ranks: a rank is a plain Python process"
        in (result.error["evalue"])
    ), result.error["evalue"]
    assert "get_ipython()" in _shown(
        kernel, "%%gpugeek_run --rank0\nrepr(get_ipython()).replace('<RankShell', 'get_ipython()')"
    )
