"""Output below Python on a rank (``os.write``, ``sys.stdout.buffer``, C ``printf``, a child process)
is the rank's: labelled, streamed and kept in the job's logs like its prints; the worker's own
descriptors are its own again after the job."""

from __future__ import annotations

from typing import Any

from gpugeek_jupyter.jobs import run_cell

BELOW_PYTHON = """
import ctypes, os, subprocess, sys
print(f"print {rank}", flush=True)
os.write(1, f"fd one {rank}\\n".encode())
os.write(2, f"fd two {rank}\\n".encode())
sys.stdout.buffer.write(f"buffer {rank}\\n".encode())
subprocess.run(["echo", f"child {rank}"], check=True)
ctypes.CDLL(None).printf(b"printf %d\\n", ctypes.c_int(rank))  # left in C's buffer: flushed at the end
"""


def test_what_a_rank_writes_below_python_is_labelled_streamed_and_in_its_logs(pool: Any) -> None:
    heard: list[tuple[int, str, str]] = []
    result = run_cell(
        pool, BELOW_PYTHON, {}, on_output=lambda rank, stream, text: heard.append((rank, stream, text)), timeout=120
    )
    assert result.ok, result.report()
    for rank in (0, 1):
        said = "".join(text for r, _, text in heard if r == rank)
        for line in (
            f"print {rank}",
            f"fd one {rank}",
            f"fd two {rank}",
            f"buffer {rank}",
            f"child {rank}",
            f"printf {rank}",
        ):
            assert line in said, (rank, line, said)
        errors = "".join(text for r, stream, text in heard if r == rank and stream == "stderr")
        assert f"fd two {rank}" in errors and f"fd one {rank}" not in errors
        assert f"fd one {rank}" in result.logs(rank) and f"printf {rank}" in result.logs(rank)
    # the next job gets only its own: nothing of the first leaks into it, and its descriptors work again
    second = run_cell(pool, "import os\nos.write(1, b'again\\n')", {}, timeout=120)
    assert second.ok and "again" in second.logs(0) and "fd one" not in second.logs(0)


def test_no_stream_collects_output_below_python_too(pool: Any) -> None:
    result = run_cell(pool, "import os\nos.write(1, f'collected {rank}\\n'.encode())", {}, stream=False, timeout=120)
    assert result.ok and "collected 1" in result.logs(1)


CRASHES_ON_RANK_1 = """
import ctypes, os
if rank == 1:
    os.write(2, b"about to read address 0\\n")
    ctypes.string_at(0)  # a segfault: faulthandler dumps the stack to descriptor 2, the job's file
"""


def test_a_rank_that_crashes_leaves_its_last_words_in_the_failure(pool: Any) -> None:
    result = run_cell(pool, CRASHES_ON_RANK_1, {}, timeout=120)
    assert not result.ok and result.failed_rank == 1, result.report()
    assert "was killed by signal 11 (SIGSEGV)" in (result.failure or ""), result.failure
    words = result.traceback or ""
    assert words.startswith("the last words of rank 1 on stderr (pid "), words
    assert "about to read address 0" in words and "Fatal Python error: Segmentation fault" in words, words
    assert "in <module>" in words or "File " in words  # the stack faulthandler wrote


def test_a_dead_ranks_last_words_on_another_host_are_read_there_by_a_live_worker(pool: Any, monkeypatch: Any) -> None:
    """The workers here share the driver's host; the watch is told it is another one (the one
    change), so the words come the way they come from another machine: asked of a live worker of
    that host (the other rank's, or the one the nanny started in the dead one's place)."""
    from gpugeek_jupyter.jobs import watch

    asked: list[str] = []
    real_ask = watch.PoolTransport.ask

    def ask(self: Any, function: Any, addresses: list[str], *args: Any, **kwargs: Any) -> Any:
        asked.append(function.__name__)
        return real_ask(self, function, addresses, *args, **kwargs)

    monkeypatch.setattr(watch, "interface_of", lambda host: None)  # no host is this one
    monkeypatch.setattr(watch.PoolTransport, "ask", ask)
    result = run_cell(pool, CRASHES_ON_RANK_1, {}, timeout=120)
    assert not result.ok and result.failed_rank == 1, result.report()
    words = result.traceback or ""
    assert words.startswith("the last words of rank 1 on stderr (pid "), words
    assert "about to read address 0" in words and "Fatal Python error: Segmentation fault" in words, words
    assert "last_words" in asked, asked
