"""How a rank's process ended, in a real kernel, said as torchrun says it: ``os._exit(3)`` on a rank
reads ``exited with status 3 ... (exitcode: 3)``, a signal names itself, and the nanny's memory kill
names the memory in use, the worker's limit (the pool's --worker-memory) and the settings that move the kill."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from support.kernel import KernelSession, pool_kernel

pytestmark = pytest.mark.slow

WORKER_MEMORY = "1300MiB"  # each worker's limit (--worker-memory): the nanny's kill at 95% of it


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    with pool_kernel(tmp_path_factory, "exits", options=f"--worker-memory {WORKER_MEMORY}") as session:
        yield session


def _fails(kernel: KernelSession, cell: str) -> str:
    result = kernel.run(cell, timeout=180)
    assert result.error is not None, result.text
    return str(result.error["evalue"])


def test_os_exit_on_a_rank_names_its_exit_code(kernel: KernelSession) -> None:
    failure = _fails(kernel, "%%gpugeek_run\nimport os\nif rank == 1:\n    os._exit(3)\ndist.barrier()")
    assert "rank 1 (host" in failure and "exited with status 3 during the job (exitcode: 3)" in failure, failure
    jobs = kernel.run("%gpugeek_jobs --limit 1")
    # the record's exit codes by rank: rank 1's 3; rank 0 either failed in the barrier when its
    # peer went (1) or was stopped by the driver first (None), whichever came first
    assert re.search(r"\[(1|None), 3\]", jobs.text), jobs.text


def test_a_signal_that_kills_a_rank_is_named(kernel: KernelSession) -> None:
    failure = _fails(
        kernel,
        "%%gpugeek_run\nimport os, signal\nif rank == 0:\n    os.kill(os.getpid(), signal.SIGKILL)\ndist.barrier()",
    )
    assert "rank 0 (host" in failure and "killed by signal 9 (SIGKILL) during the job (exitcode: -9)" in failure


def test_the_nannys_memory_kill_names_the_memory_the_limit_and_the_setting(kernel: KernelSession) -> None:
    failure = _fails(
        kernel,
        "%%gpugeek_run\nimport time\nif rank == 1:\n    hog = bytearray(2 * 2**30)\n"
        "    hog[::4096] = b'x' * len(hog[::4096])\n    time.sleep(10)\ndist.barrier()",
    )
    assert "rank 1 (host" in failure and "was ended by its nanny for memory: " in failure, failure
    assert "GiB in use, over 95% of its 1.3 GiB memory limit (exitcode: -15)" in failure, failure
    assert "a larger worker_memory" in failure and "distributed.worker.memory.terminate" in failure, failure
    after = kernel.run("%%gpugeek_run\nrank")
    assert after.error is None and "[0, 1]" in after.text, after.text  # the pool restarted the worker


def test_a_cell_after_a_peers_worker_was_killed_mid_start_builds_its_group_and_runs(kernel: KernelSession) -> None:
    """A rank cancelled while its peers' worker dies may be inside torch's init_process_group: the
    cancel must not land there (it left torch's group counter moved on, and the next cell's ranks
    waited for each other under two store prefixes until the timeout: one round in six or so here)."""
    exits = "%%gpugeek_run\nimport os\nif rank == 1:\n    os._exit(3)\ndist.barrier()"
    kill = "%%gpugeek_run\nimport os, signal\nif rank == 0:\n    os.kill(os.getpid(), signal.SIGKILL)\ndist.barrier()"
    after = "%%gpugeek_run --timeout 20\nimport time\ntime.sleep(0.5)\ndist.barrier()\nrank"
    for round_ in range(8):
        _fails(kernel, exits)
        _fails(kernel, kill)
        result = kernel.run(after, timeout=60)
        assert result.error is None, f"round {round_}: {result.text}"
