"""``%gpugeek_where`` in a real kernel, a second process beside the one running the pool: one-line answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.kernel import KernelSession, magics_kernel

pytestmark = pytest.mark.slow


@pytest.fixture
def kernel(isolated_registry: Path) -> Iterator[KernelSession]:
    with magics_kernel({"GPUGEEK_REGISTRY": str(isolated_registry), "GPUGEEK_HEARTBEAT": "0.5"}) as session:
        yield session


def test_with_no_pool_running_it_says_so_in_one_line(kernel: KernelSession) -> None:
    result = kernel.run("%gpugeek_where")
    assert result.error is None and result.stderr == "", result.text
    assert result.stdout == "no job is running: no pool is running\n"


def test_a_pool_without_a_running_job_is_one_line(kernel: KernelSession, cpu_pool: Any) -> None:
    for line in ("%gpugeek_where test-pool", "%gpugeek_where --pool test-pool", "%gpugeek_where"):
        result = kernel.run(line)
        assert result.error is None and result.stderr == "", result.text
        assert result.stdout == "no job is running on pool 'test-pool'\n", line


BAD_POOLS = {
    "%gpugeek_where --pool nosuch": (
        "UsageError: --pool 'nosuch' names no running pool (running pools: test-pool; e.g. --pool test-pool)"
    ),
    "%gpugeek_where 'no such'": (
        "UsageError: --pool 'no such' names no running pool (running pools: test-pool; e.g. --pool test-pool)"
    ),
    "%gpugeek_where one --pool two": (
        "UsageError: two pools named, 'one' and --pool 'two': name one (e.g. %gpugeek_where dev)"
    ),
}


def test_a_bad_pool_is_a_one_line_usage_error_with_the_value_and_an_example(
    kernel: KernelSession, cpu_pool: Any
) -> None:
    for line, message in BAD_POOLS.items():
        result = kernel.run(line)
        assert result.error is None, f"{line}: a traceback reached the user: {result.error}"
        assert result.stderr.strip() == message, line
