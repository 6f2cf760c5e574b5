"""The namespace rule, in a real kernel: the ranks keep what they built and what they did to the
notebook's values until the notebook changes a name; an unchanged notebook value is not sent again
(the ranks' copy is the same object cell after cell); a change in the notebook, in place or by
assignment, reaches the ranks, with a notice when it replaces a name the ranks had assigned."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.kernel import KernelSession, pool_kernel

pytestmark = pytest.mark.slow

NOTICE = "replaced what the ranks had assigned"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    with pool_kernel(tmp_path_factory, "names") as session:
        ready = session.run("import torch, numpy as np")
        assert ready.error is None, ready.text
        yield session


def _ok(kernel: KernelSession, cell: str) -> str:
    result = kernel.run(cell, timeout=180)
    assert result.error is None, result.text
    return result.text


def test_a_model_the_ranks_wrapped_and_trained_stays_theirs(kernel: KernelSession) -> None:
    _ok(kernel, "model = torch.nn.Linear(4, 1)\nstart = model.weight.detach().clone()")
    _ok(
        kernel,
        "%%gpugeek_run\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nddp = DDP(model)\n"
        "opt = torch.optim.SGD(ddp.parameters(), lr=0.5)\nfor _ in range(3):\n"
        "    opt.zero_grad(); ddp(torch.ones(2, 4)).sum().backward(); opt.step()",
    )
    shown = _ok(kernel, "%%gpugeek_run -o after\nmodel is ddp.module, bool((model.weight - start).abs().sum() > 0)")
    assert NOTICE not in shown, shown
    assert _ok(kernel, "after").strip().endswith("[(True, True), (True, True)]")


def test_a_counter_the_ranks_keep_counts_on_until_the_notebook_sets_it(kernel: KernelSession) -> None:
    _ok(kernel, "counter = 0")
    for _ in range(3):
        _ok(kernel, "%%gpugeek_run\ncounter += 1")
    assert "[3, 3]" in _ok(kernel, "%%gpugeek_run\ncounter")
    _ok(kernel, "counter = 10")
    shown = _ok(kernel, "%%gpugeek_run\ncounter += 1\ncounter")
    assert "[11, 11]" in shown and f"the notebook's new value of 'counter' {NOTICE}" in shown, shown


def test_an_unchanged_notebook_tensor_is_sent_once_and_a_change_in_place_is_sent_again(kernel: KernelSession) -> None:
    _ok(kernel, "big = torch.zeros(4_000_000)")
    _ok(kernel, "%%gpugeek_run\nfirst = id(big)")
    assert "[True, True]" in _ok(kernel, "%%gpugeek_run\nid(big) == first")  # the same object: not sent again
    _ok(kernel, "big.add_(1)")
    assert "[(1.0, False), (1.0, False)]" in _ok(kernel, "%%gpugeek_run\nfloat(big[0]), id(big) == first")


def test_a_numpy_array_goes_by_content_a_changed_element_is_seen(kernel: KernelSession) -> None:
    _ok(kernel, "arr = np.zeros(1_000_000, dtype=np.float32)")
    _ok(kernel, "%%gpugeek_run\nfirst_arr = id(arr)")
    assert "[True, True]" in _ok(kernel, "%%gpugeek_run\nid(arr) == first_arr")
    _ok(kernel, "arr[123] = 5")
    assert "[5.0, 5.0]" in _ok(kernel, "%%gpugeek_run\nfloat(arr[123])")


def test_a_value_made_later_from_a_sent_tensor_refers_to_the_ranks_copy(kernel: KernelSession) -> None:
    _ok(kernel, "net = torch.nn.Linear(2, 2)")
    _ok(kernel, "%%gpugeek_run\nwith torch.no_grad():\n    net.weight.fill_(float(rank + 7))")
    _ok(kernel, "sgd = torch.optim.SGD(net.parameters(), lr=0.1)")
    shown = _ok(kernel, "%%gpugeek_run\nsgd.param_groups[0]['params'][0] is net.weight, net.weight[0, 0].item()")
    assert "[(True, 7.0), (True, 8.0)]" in shown, shown


def test_a_name_deleted_on_the_ranks_is_sent_again_when_a_cell_uses_it(kernel: KernelSession) -> None:
    _ok(kernel, "gone = 41")
    _ok(kernel, "%%gpugeek_run\nprint(gone)\ndel gone")
    assert "[42, 42]" in _ok(kernel, "%%gpugeek_run\ngone + 1")


def test_push_sends_the_notebooks_value_even_unchanged_and_pull_fetches_a_ranks(kernel: KernelSession) -> None:
    _ok(kernel, "pushed = 0\nweights = torch.zeros(2)")
    _ok(kernel, "%%gpugeek_run\npushed += 1\nweights += rank + 1")  # the ranks' own from here on
    assert "[2, 2]" in _ok(kernel, "%%gpugeek_run\npushed += 1\npushed")  # unchanged in the notebook: not sent
    _ok(kernel, "%gpugeek_push pushed weights")  # the notebook's values win now, the tensor's data too
    assert "[(0, [0.0, 0.0]), (0, [0.0, 0.0])]" in _ok(kernel, "%%gpugeek_run\npushed, weights.tolist()")
    _ok(kernel, "%%gpugeek_run\nmade_there = rank * 10 + 7")
    _ok(kernel, "%gpugeek_pull made_there --rank 1")
    assert _ok(kernel, "made_there") == "17"
    _ok(kernel, "%gpugeek_pull made_there -o from_zero")
    assert _ok(kernel, "from_zero") == "7"
    assert _ok(kernel, "import gpugeek_jupyter\ngpugeek_jupyter.pull('made_there', rank=1)") == "17"
    _ok(kernel, "gpugeek_jupyter.push({'only_there': 5})")  # a value the notebook has under no name
    assert "[5, 5]" in _ok(kernel, "%%gpugeek_run\nonly_there")


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("%gpugeek_push no_such_name", ["'no_such_name' is not a variable of this notebook", "e.g. %gpugeek_push"]),
        ("%gpugeek_push", ["name the variables", "e.g."]),
        ("rank = 3\n%gpugeek_push rank", ["'rank' is a name each rank sets itself", "e.g."]),
        ("%gpugeek_pull", ["needs the variable's name", "e.g. %gpugeek_pull"]),
        ("%gpugeek_pull made_there --rank x", ["--rank", "'x'"]),
        ("%gpugeek_pull nothing_on_the_ranks", ["NameError", "nothing_on_the_ranks"]),
    ],
)
def test_bad_push_and_pull_lines_say_what_is_wrong_in_one_line(
    kernel: KernelSession, line: str, words: list[str]
) -> None:
    result = kernel.run(line, timeout=120)
    # a magic's usage error is one line on stderr (IPython's UsageError); a rank's failure an error
    message = result.error["evalue"] if result.error is not None else result.stderr
    assert message.count("\n") <= 1 and message.strip(), result.text
    assert all(w in message for w in words), message
    assert "Traceback" not in message, message
