"""``%%gpugeek_run``, ``%gpugeek_run --script`` and ``%gpugeek_jobs`` in a real IPython shell."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def shell(pool: Any) -> Iterator[Any]:
    from IPython.core.interactiveshell import InteractiveShell

    ipython = InteractiveShell.instance()
    ipython.run_cell("%load_ext gpugeek_jupyter", store_history=False)
    ipython.run_cell("import torch", store_history=False)
    yield ipython
    ipython.run_cell("%unload_ext gpugeek_jupyter", store_history=False)


def run(shell: Any, source: str) -> Any:
    return shell.run_cell(source, store_history=False)


def test_cell_magic_stores_one_value_per_rank_with_o(shell: Any, capsys: pytest.CaptureFixture[str]) -> None:
    run(shell, "def loss_of(r):\n    return 0.5 / (r + 1)")
    result = run(shell, "%%gpugeek_run -o losses\nlosses = [loss_of(rank)]\nprint('loss', losses[-1])\nlosses[-1]")
    assert result.success and shell.user_ns["losses"] == [0.5, 0.25]
    out = capsys.readouterr().out
    assert "[rank 0] loss 0.5\n" in out and "[rank 1] loss 0.25\n" in out


def test_cell_value_is_shown_and_rank0_gives_one_value(shell: Any) -> None:
    assert run(shell, "%%gpugeek_run\nrank * 2").result == [0, 2]
    assert run(shell, "%%gpugeek_run --rank0 -o first\nrank + 7").success and shell.user_ns["first"] == 7
    assert run(shell, "%%gpugeek_run\nx = rank").result is None


def test_failing_rank_raises_with_its_traceback(shell: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from gpugeek_jupyter.jobs.result import JobFailed

    result = run(shell, "%%gpugeek_run\nif rank == 1:\n    1 / 0\ndist.barrier()")
    assert isinstance(result.error_in_exec, JobFailed)
    shown = capsys.readouterr()
    assert "[rank 1]     1 / 0\n" in shown.out + shown.err
    assert "ZeroDivisionError: division by zero" in shown.out + shown.err
    assert run(shell, "%%gpugeek_run\nrank").result == [0, 1]


def test_a_cell_ended_by_system_exit_fails_once_in_words(shell: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """As IPython takes it (an error, not an exit); the worker's log line about it stays out of the cell."""
    from gpugeek_jupyter.jobs.result import JobFailed

    result = run(shell, "%%gpugeek_run\nraise SystemExit(3)")
    assert isinstance(result.error_in_exec, JobFailed) and "SystemExit: 3" in str(result.error_in_exec)
    shown = capsys.readouterr()
    assert "ended by SystemExit" not in shown.out + shown.err, shown
    assert run(shell, "%%gpugeek_run\nrank").result == [0, 1]


def test_a_name_dropped_with_the_group_says_where_it_went(shell: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The ranks' names go with the process group a failure out of step rebuilds (rank 0 waits in a
    barrier rank 1 never reaches), and a cell reading one is told so (only for a name a cell had
    assigned)."""
    from gpugeek_jupyter.jobs.rank import DROPPED_NAME_NOTE
    from gpugeek_jupyter.jobs.result import JobFailed

    assert run(shell, "%%gpugeek_run\nassigned_here = rank").success
    out_of_step = "%%gpugeek_run\ndist.barrier()\nif rank == 1:\n    1 / 0\ndist.barrier()"
    assert isinstance(run(shell, out_of_step).error_in_exec, JobFailed)
    capsys.readouterr()
    gone = run(shell, "%%gpugeek_run\nassigned_here").error_in_exec
    assert isinstance(gone, JobFailed) and DROPPED_NAME_NOTE in str(gone), gone
    shown = capsys.readouterr()
    assert f"[rank 0] {DROPPED_NAME_NOTE}" in shown.out + shown.err, shown  # the traceback ends with it
    assert DROPPED_NAME_NOTE in str(run(shell, "%%gpugeek_run\nassigned_here").error_in_exec)  # a second rebuild
    assert run(shell, "%%gpugeek_run\nassigned_here = 1").success
    assert run(shell, "%%gpugeek_run\ndel assigned_here").success
    deleted = run(shell, "%%gpugeek_run\nassigned_here").error_in_exec  # by a cell, since: no note
    assert isinstance(deleted, JobFailed) and DROPPED_NAME_NOTE not in str(deleted), deleted
    never = run(shell, "%%gpugeek_run\nnever_assigned").error_in_exec
    assert isinstance(never, JobFailed) and "name 'never_assigned' is not defined" in str(never)
    assert DROPPED_NAME_NOTE not in str(never)


def test_names_outlive_a_failure_that_made_no_distributed_call(shell: Any) -> None:
    """As IPython keeps them across a failed cell: no rank called torch.distributed, so the group,
    and the names with it, stay. A rank failing before a collective its peer waits in still ends the
    job at once (its kept group is let go after a short grace), and that group is rebuilt."""
    import time

    from gpugeek_jupyter.jobs.result import JobFailed

    assert run(shell, "%%gpugeek_run\nkept_here = rank + 10").success
    for failing in ["1 / 0", "if rank == 0:\n    raise ValueError('only rank 0')", "undefined_name"]:
        assert isinstance(run(shell, f"%%gpugeek_run\n{failing}").error_in_exec, JobFailed), failing
        assert run(shell, "%%gpugeek_run\nkept_here").result == [10, 11], failing
    # a notebook tensor the ranks changed in place stays theirs: not sent again after such a failure
    assert run(shell, "import torch\ntrained = torch.zeros(2)").success
    assert run(shell, "%%gpugeek_run\ntrained += 1").success
    assert isinstance(run(shell, "%%gpugeek_run\ntrained.no_such_method()").error_in_exec, JobFailed)
    assert run(shell, "%%gpugeek_run\ntrained.sum().item()").result == [2.0, 2.0]
    started = time.monotonic()
    mismatched = "t = torch.ones(1)\nif rank == 1:\n    1 / 0\ndist.all_reduce(t)"
    failed = run(shell, f"%%gpugeek_run\nimport torch\n{mismatched}").error_in_exec
    assert isinstance(failed, JobFailed) and "ZeroDivisionError" in str(failed), failed
    assert time.monotonic() - started < 5.0  # not the stranded-collective look (~6 s) nor a killed worker
    assert isinstance(run(shell, "%%gpugeek_run\nkept_here").error_in_exec, JobFailed)  # rebuilt: gone
    assert run(shell, "%%gpugeek_run\nimport torch\nt = torch.ones(1)\ndist.all_reduce(t)\nt.item()").result == [
        2.0,
        2.0,
    ]


def test_names_outlive_a_failure_every_rank_reached_in_step(shell: Any) -> None:
    """A cell that fails past collectives, but where every rank stopped at the same call (the same
    error on every rank, or one rank failing after the last collective), keeps the warm group and
    the names, as IPython keeps them; so does an interrupt-like stop of ranks that were in step."""
    from gpugeek_jupyter.jobs.result import JobFailed

    assert run(shell, "%%gpugeek_run\nimport torch\nweights = torch.full((2,), float(rank))").success
    in_step = [
        "dist.all_reduce(weights)\nweights.no_such_method()",  # every rank, the same typo, after a collective
        "dist.barrier()\nif rank == 1:\n    raise ValueError('rank 1 only, after the last collective')",
    ]
    for failing in in_step:
        assert isinstance(run(shell, f"%%gpugeek_run\n{failing}").error_in_exec, JobFailed), failing
        assert run(shell, "%%gpugeek_run\nweights.tolist()").result == [[1.0, 1.0], [1.0, 1.0]], failing
    assert run(shell, "%%gpugeek_run\nt = torch.ones(1)\ndist.all_reduce(t)\nt.item()").result == [2.0, 2.0]


def test_line_magic_runs_a_script_with_its_arguments(
    shell: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("import os, sys\nprint(os.environ['RANK'], sys.argv[1:])\n")
    assert run(shell, "%gpugeek_run --script train.py -- --lr 3e-5").success
    out = capsys.readouterr().out
    assert "[rank 0] 0 ['--lr', '3e-5']\n" in out and "[rank 1] 1 ['--lr', '3e-5']\n" in out


@pytest.mark.parametrize(
    "line, message",
    [
        ("%gpugeek_run", "as a line magic runs a script"),
        ("%%gpugeek_run --timeout soon\nrank", "--timeout must be a number, got 'soon' (e.g. --timeout 600)"),
        ("%%gpugeek_run --timeout -3\nrank", "--timeout must be a number of seconds > 0, got -3 (e.g. --timeout 600)"),
        ("%%gpugeek_run --max-restarts -1\nrank", "--max-restarts must be a whole number >= 0"),
        ("%%gpugeek_run --max-restarts 1.5\nrank", "--max-restarts must be a whole number, got '1.5'"),
        ("%%gpugeek_run --amp fp8\nrank", "--amp must be bf16 or fp16, got 'fp8'"),
        ("%%gpugeek_run --pool nowhere\nrank", "no running pool named 'nowhere'"),
        ("%%gpugeek_run -o 2x\nrank", "-o needs a variable name, got '2x'"),
        ("%%gpugeek_run --script a.py\nrank", "--script is for the line magic"),
        ("%%gpugeek_run --env =x\nrank", "--env '=x': the name before '=' is missing (e.g. --env NCCL_DEBUG=INFO)"),
        ("%%gpugeek_run --env NOEQUALS\nrank", "--env 'NOEQUALS': give it as NAME=VALUE (e.g. --env NCCL_DEBUG=INFO)"),
        ("%%gpugeek_run --env 1A=x\nrank", "--env '1A': a name must be letters, digits and '_'"),
        ("%%gpugeek_run --env RANK=3\nrank", "--env 'RANK': torchrun's own variables are set by the launcher"),
        ("%%gpugeek_run --env 'A=x\x00y'\nrank", "--env 'A': a value cannot contain a NUL character"),
        ("import threading\nlock = threading.Lock()\n", None),
        ("%%gpugeek_run\nwith lock:\n    pass", "cannot send 'lock' (a lock) to the workers"),
    ],
)
def test_mistakes_are_one_line_usage_errors(
    shell: Any, line: str, message: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(shell, line)
    if message is None:
        return
    assert not result.success
    error = capsys.readouterr().err
    assert error.startswith("UsageError: ") and message in error and "Traceback" not in error


def test_env_option_sets_variables_for_that_cell_only(
    shell: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    probe = "import os\n(os.environ.get('NCCL_DEBUG'), os.environ.get('HF_HOME'))"
    with_env = run(shell, f"%%gpugeek_run --env NCCL_DEBUG=INFO --env HF_HOME=/data/hf\n{probe}")
    assert with_env.result == [("INFO", "/data/hf")] * 2
    assert run(shell, f"%%gpugeek_run\n{probe}").result == [(None, None)] * 2  # put back after the cell
    monkeypatch.chdir(tmp_path)
    (tmp_path / "show.py").write_text("import os, sys\nprint(os.environ['WANDB_MODE'], sys.argv[1:])\n")
    assert run(shell, "%gpugeek_run --script show.py --env WANDB_MODE=offline -- --lr 1").success
    out = capsys.readouterr().out
    assert "[rank 0] offline ['--lr', '1']\n" in out and "[rank 1] offline ['--lr', '1']\n" in out


def test_jobs_magic_lists_the_registry(shell: Any) -> None:
    run(shell, "%%gpugeek_run\nrank")
    run(shell, "%%gpugeek_run\nraise ValueError('nope')")
    table = run(shell, "%gpugeek_jobs --pool jobs --limit 5").result
    assert list(table["status"])[:2] == ["failed", "succeeded"]
    assert "ValueError: nope" in table["failure"].iloc[0]
    assert set(table["pool"]) == {"jobs"}
