"""A distributed REPL that reads well at many ranks, in a real kernel: grouped output, rank 0 only,
cells on some ranks with names kept on each rank, grouped failures, and every rank's log on disk."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.kernel import KernelSession, pool_kernel

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    with pool_kernel(tmp_path_factory, "repl", count=4) as session:
        yield session


def _ok(kernel: KernelSession, cell: str) -> str:
    result = kernel.run(cell, timeout=120)
    assert result.error is None, result.text
    return result.stdout


def test_lines_every_rank_prints_alike_are_one_grouped_line_past_two_ranks(kernel: KernelSession) -> None:
    out = _ok(
        kernel, '%%gpugeek_run\nfor step in range(3):\n    print(f"epoch {step}: loss 0.5")\nprint("hi from", rank)'
    )
    assert out.splitlines() == [
        "[ranks 0-3] epoch 0: loss 0.5",
        "[ranks 0-3] epoch 1: loss 0.5",
        "[ranks 0-3] epoch 2: loss 0.5",
        "[ranks 0-3] hi from 0..3",
    ]


def test_output_all_labels_every_rank_and_rank0_shows_rank_zero_only(kernel: KernelSession) -> None:
    every = _ok(kernel, "%%gpugeek_run --output all\nprint('x')")
    assert sorted(every.splitlines()) == [f"[rank {r}] x" for r in range(4)]
    zero = _ok(kernel, "%%gpugeek_run --output rank0\nprint('y', rank)")
    assert zero.splitlines() == ["[rank 0] y 0"]


def test_a_cell_on_rank_0_inspects_what_the_distributed_cell_built(kernel: KernelSession) -> None:
    _ok(kernel, "%%gpugeek_run\nimport torch\nmodel = torch.nn.Linear(3, 2)\nbatch = torch.full((2, 3), float(rank))")
    out = _ok(kernel, "%%gpugeek_run --ranks 0\nprint(model)\nprint(batch.sum().item())")
    assert out.splitlines() == ["[rank 0] Linear(in_features=3, out_features=2, bias=True)", "[rank 0] 0.0"]
    values = kernel.run("%%gpugeek_run --ranks 2-3\nbatch.sum().item()")
    assert values.error is None and "[12.0, 18.0]" in values.text, values.text


def test_a_failure_on_every_rank_shows_one_traceback_and_groups_the_rest(kernel: KernelSession) -> None:
    result = kernel.run("%%gpugeek_run\nraise ValueError('boom')", timeout=120)
    assert result.error is not None and result.error["ename"] == "JobFailed", result.text
    assert "ranks 1-3 failed with the same error" in result.error["evalue"], result.error["evalue"]
    traceback = "\n".join(result.error["traceback"])
    assert traceback.count("ValueError: boom") == 2  # the rank's traceback once, then the one-line reason


def test_every_ranks_full_log_is_one_magic_away(kernel: KernelSession) -> None:
    _ok(kernel, "%%gpugeek_run --output rank0\nprint('only in the log' if rank == 2 else 'elsewhere')")
    _ok(kernel, "from gpugeek_jupyter.store import get_registry\n_job = get_registry().list_jobs(limit=1)[0].id")
    assert _ok(kernel, "%gpugeek_logs $_job --rank 2") == "only in the log\n"
    every = _ok(kernel, "%gpugeek_logs $_job")
    assert every.splitlines()[:2] == ["--- rank 0 ---", "elsewhere"] and "only in the log" in every


def test_what_a_ranks_thread_prints_after_the_cell_ended_goes_to_the_jobs_log_not_a_later_cell(
    kernel: KernelSession,
) -> None:
    _ok(
        kernel,
        "%%gpugeek_run\nimport threading, time\ndef later():\n    time.sleep(1.0)\n"
        "    print('late line from', rank, 'of a thread')\nthreading.Thread(target=later, daemon=True).start()",
    )
    _ok(kernel, "from gpugeek_jupyter.store import get_registry\n_late = get_registry().list_jobs(limit=1)[0].id")
    plain = kernel.run("import time\ntime.sleep(3)\nprint('a plain cell')", timeout=60)
    assert plain.error is None and plain.stdout == "a plain cell\n", plain.text  # nothing of the ranks here
    assert "late line" not in plain.stderr, plain.stderr
    log = _ok(kernel, "%gpugeek_logs $_late --rank 1")
    assert log == "[gpugeek] written after the job ended:\nlate line from 1 of a thread\n", log


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("%%gpugeek_run --ranks 9\nrank", ["'9'", "0 to 3", "e.g."]),
        ("%%gpugeek_run --ranks x\nrank", ["'x'", "0,2-3"]),
        ("%%gpugeek_run --ranks 1-0\nrank", ["'1-0'", "low to high"]),
        ("%%gpugeek_run --output losses\nrank", ["'losses'", "-o losses"]),
        ("%%gpugeek_run --output loud-ish\nrank", ["'loud-ish'", "grouped"]),
        ("%gpugeek_logs job-nosuch", ["'job-nosuch'"]),
    ],
)
def test_bad_options_are_one_line_usage_errors_naming_the_value(
    kernel: KernelSession, line: str, words: list[str]
) -> None:
    result = kernel.run(line)
    # IPython shows a magic's UsageError as one line on stderr, without a traceback
    assert result.error is None and result.stderr.startswith("UsageError: "), result.text
    message = result.stderr.removeprefix("UsageError: ").removesuffix("\n")
    assert "\n" not in message and all(w in message for w in words), message
