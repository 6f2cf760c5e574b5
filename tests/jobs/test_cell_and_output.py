"""What travels with a cell, how rank output is labelled, and the timeout message: no processes."""

from __future__ import annotations

import ast
import io
import threading
import types

import pytest

from gpugeek_jupyter.errors import SpecError
from gpugeek_jupyter.jobs.cell import free_names, prepare_cell
from gpugeek_jupyter.jobs.diagnose import describe_stack
from gpugeek_jupyter.jobs.layout import WorkerInfo, plan_layout
from gpugeek_jupyter.jobs.output import LabelledWriter
from gpugeek_jupyter.jobs.rank import compile_cell
from gpugeek_jupyter.jobs.script import hyperparams_to_args
from gpugeek_jupyter.jobs.watch import timeout_message


def test_names_read_before_the_cell_binds_them_are_shipped() -> None:
    tree = ast.parse("y = x + 1\nz = y * k\nx = 3\ncount += 1\nfor i in items:\n    total = i\nprint(total)")
    assert free_names(tree) == ["x", "k", "count", "items", "print"]


def test_functions_classes_and_values_travel_modules_are_imported_again() -> None:
    def double(v: int) -> int:
        return v * 2

    class Box:
        pass

    namespace = {"double": double, "Box": Box, "data": [1, 2], "np": types, "unused": 5, "In": []}
    program = prepare_cell("double(len(data))\nBox()\nnp.ModuleType\nIn", namespace, hidden={"In"})
    assert sorted(program.shipped) == ["Box", "data", "double"]
    assert program.code.imports == (("np", "types"),)
    assert program.has_value


def test_rank_names_are_never_shipped() -> None:
    program = prepare_cell("print(rank, world_size, device, dist, gg)", {"rank": 99, "gg": object()})
    assert program.shipped == ()


def test_an_unpicklable_name_is_named_in_the_error() -> None:
    with pytest.raises(SpecError, match=r"cannot send 'lock' \(a lock\) to the workers"):
        prepare_cell("with lock:\n    pass", {"lock": threading.Lock()})


def test_a_function_using_an_unpicklable_global_names_both() -> None:
    namespace: dict[str, object] = {"guard": threading.Lock()}
    exec("def step():\n    return guard", namespace)
    with pytest.raises(SpecError, match=r"cannot send 'step' \(a function, which uses 'guard' \(a lock\)\)"):
        prepare_cell("step()", namespace)


def test_a_cell_that_does_not_parse_says_where() -> None:
    with pytest.raises(SpecError, match="the cell does not parse: .* at line 2"):
        prepare_cell("x = 1\n%time x", {})


def test_last_expression_is_compiled_apart() -> None:
    body, last = compile_cell("a = 2\na * 3", "<cell>")
    namespace: dict[str, object] = {}
    exec(body, namespace)
    assert eval(last, namespace) == 6  # type: ignore[arg-type]
    assert compile_cell("a = 2", "<cell>")[1] is None


def test_output_lines_are_labelled_by_rank_and_carriage_returns_keep_bars_in_place() -> None:
    out, err = io.StringIO(), io.StringIO()
    writer = LabelledWriter(stdout=out, stderr=err)
    writer(0, "stdout", "a\nb")
    writer(1, "stdout", "x\n")
    writer(0, "stdout", "c\n")
    writer(0, "stderr", "\r 10%|#  |\r 20%|## |")
    # rank 0's open line is ended before rank 1 writes; its rest is labelled on a line of its own
    assert out.getvalue() == "[rank 0] a\n[rank 0] b\n[rank 1] x\n[rank 0] c\n"
    assert err.getvalue() == "\r[rank 0]  10%|#  |\r[rank 0]  20%|## |"


def test_hyperparams_become_name_value_arguments() -> None:
    assert hyperparams_to_args({"batch_size": 256, "lr": 3e-5, "layers": [2, 4], "fast": None}) == [
        "--batch_size",
        "256",
        "--lr",
        "3e-05",
        "--layers",
        "2",
        "4",
        "--fast",
    ]
    with pytest.raises(SpecError, match="hyperparameter name 'bad name'"):
        hyperparams_to_args({"bad name": 1})


def test_timeout_message_names_the_ranks_that_had_not_arrived() -> None:
    layout = plan_layout([WorkerInfo(f"tcp://h:{i}", str(i), "h") for i in range(3)])
    where = {
        "tcp://h:0": {"running": True, "collective": "dist.barrier()", "at": "line 4: dist.barrier()"},
        "tcp://h:1": {"running": True, "collective": None, "at": "line 3: time.sleep(60)"},
        "tcp://h:2": {"running": True, "collective": "dist.barrier()", "at": "line 4: dist.barrier()"},
    }
    message = timeout_message("job-1", 5, layout, where)
    assert message == (
        "job job-1 timed out after 5 s: rank 1 had not arrived (rank 1 at line 3: time.sleep(60)); "
        "ranks 0,2 waiting in dist.barrier()"
    )


def test_stack_description_finds_the_collective_and_the_user_line() -> None:
    import sys

    source = "import sys\nframe = sys._getframe()\n"
    namespace: dict[str, object] = {}
    exec(compile(source, "<gpugeek_run cell>", "exec"), namespace)
    import linecache

    linecache.cache["<gpugeek_run cell>"] = (len(source), None, source.splitlines(True), "<gpugeek_run cell>")
    described = describe_stack(namespace["frame"], "<gpugeek_run cell>")  # type: ignore[arg-type]
    assert described == {"collective": None, "at": "line 2: frame = sys._getframe()"}
    assert sys.modules  # the frame walk touched nothing else


def test_names_local_to_functions_lambdas_and_comprehensions_are_not_shipped() -> None:
    source = (
        "def train(epochs=EPOCHS):\n"
        "    model = Net()\n"
        "    for step in range(epochs):\n"
        "        loss = step * lr\n"
        "    return model, loss\n"
        "scale = lambda v, factor=2: v * factor * base\n"
        "squares = [i * i for i in data if i > threshold]\n"
    )
    assert set(free_names(ast.parse(source))) == {"EPOCHS", "Net", "range", "lr", "base", "data", "threshold"}
