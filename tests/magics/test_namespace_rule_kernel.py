"""The namespace rule, in a real kernel: the ranks keep what they built and what they did to the
notebook's values until the notebook changes a name; an unchanged notebook value is not sent again
(the ranks' copy is the same object cell after cell); a change in the notebook, in place or by
assignment, reaches the ranks, with a notice when it replaces a name the ranks had assigned."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.kernel import KernelSession, magics_kernel

pytestmark = pytest.mark.slow

NOTICE = "replaced what the ranks had assigned"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    registry = tmp_path_factory.mktemp("names") / "registry.sqlite"
    launch = "--gpu-type cpu --count 2 --name names --quiet"
    with magics_kernel({"GPUGEEK_REGISTRY": str(registry)}, launch=launch, stop="names") as session:
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
