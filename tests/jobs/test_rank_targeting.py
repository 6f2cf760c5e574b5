"""``--ranks``: a cell on some ranks only, in the same namespaces and warm process group."""

from __future__ import annotations

import time

import pytest

from gpugeek_jupyter.errors import SpecError
from gpugeek_jupyter.jobs import run_cell
from gpugeek_jupyter.jobs.request import parse_ranks
from gpugeek_jupyter.store import JobStatus

pytestmark = pytest.mark.slow


def test_rank_specs_parse_and_bad_ones_are_named() -> None:
    assert parse_ranks("0") == (0,) and parse_ranks("0,2-3") == (0, 2, 3) and parse_ranks([3, 1, 1]) == (1, 3)
    assert parse_ranks(None) is None
    for bad in ("x", "1-0", "", "0,,1", "-1"):
        with pytest.raises(SpecError) as error:
            parse_ranks(bad)
        message = str(error.value)
        assert repr(bad) in message and "0,2-3" in message and "\n" not in message, message


def test_a_cell_on_one_rank_sees_the_namespace_the_whole_world_built(pool) -> None:
    ns: dict[str, object] = {}
    built = run_cell(pool, "import torch\nweights = torch.full((2,), float(rank))\nrank", ns)
    assert built.ok and built.values == [0, 1]
    one = run_cell(pool, "print('inspecting', rank, world_size)\nweights.tolist()", ns, ranks="1")
    assert one.ok, one.failure
    assert one.values == [[1.0, 1.0]] and [r.rank for r in one.ranks] == [1]
    assert one.output == ["inspecting 1 2\n"]
    after = run_cell(pool, "t = torch.ones(1)\ndist.all_reduce(t)\nt.item()", ns)  # the group is still warm
    assert after.ok and after.values == [2.0, 2.0]


def test_a_collective_from_a_subset_ends_naming_the_ranks_that_did_not_take_part(pool) -> None:
    started = time.monotonic()
    result = run_cell(pool, "import torch\nt = torch.ones(1)\ndist.all_reduce(t)", {}, ranks="0")
    took = time.monotonic() - started
    assert result.status is JobStatus.FAILED
    failure = result.failure or ""
    assert "cannot complete" in failure and "rank 1, which did not take part" in failure, failure
    assert "dist.all_reduce()" in failure and "line 3" in failure, failure
    assert took < 30, took
    again = run_cell(pool, "import torch\nt = torch.ones(1)\ndist.all_reduce(t)\nt.item()", {})  # the pool heals
    assert again.ok and again.values == [2.0, 2.0], again.failure


def test_ranks_beyond_the_pool_are_refused_before_anything_runs(pool) -> None:
    with pytest.raises(SpecError) as error:
        run_cell(pool, "rank", {}, ranks="0,9")
    assert "'0,9'" in str(error.value) and "0 to 1" in str(error.value)


def test_a_collective_on_one_rank_of_a_full_cell_ends_within_seconds_naming_who_waits_and_who_finished(pool) -> None:
    started = time.monotonic()
    result = run_cell(pool, "import torch\nt = torch.ones(1)\nif rank == 0:\n    dist.all_reduce(t)\nt.item()", {})
    took = time.monotonic() - started
    assert result.status is JobStatus.FAILED
    failure = result.failure or ""
    assert "cannot complete: rank 0 in dist.all_reduce() at line 4" in failure, failure
    assert "waits for rank 1, which finished the job" in failure and "`if rank == 0:`" in failure, failure
    assert took < 30, took
    again = run_cell(pool, "import torch\nt = torch.ones(1)\ndist.all_reduce(t)\nt.item()", {})  # the pool heals
    assert again.ok and again.values == [2.0, 2.0], again.failure


def test_a_collective_one_rank_left_unmatched_in_a_cell_is_named_when_the_next_cell_cannot_complete(pool) -> None:
    # the first cell succeeds: rank 0's async all_reduce waits in its group for a rank 1 call...
    cell = "import torch\nif rank == 0:\n    pending = dist.all_reduce(torch.ones(1), async_op=True)\nrank"
    assert run_cell(pool, cell, {}).values == [0, 1]
    # ...which rank 1 makes next, in a cell with no condition: rank 0's own call there is left alone
    result = run_cell(pool, "import torch\nt = torch.ones(1)\ndist.all_reduce(t)\nt.item()", {}, timeout=120)
    failure = result.failure or ""
    assert result.status is JobStatus.FAILED and "cannot complete: rank 0 in dist.all_reduce() at line 3" in failure
    assert "rank 0 had made 1 call more on its process group than rank 1 by the end of the previous cell" in failure
    assert "async_op=True" in failure and "not under a condition" not in failure, failure
    again = run_cell(pool, "import torch\nt = torch.ones(1)\ndist.all_reduce(t)\nt.item()", {}, timeout=120)
    assert again.ok and again.values == [2.0, 2.0], again.failure


def test_a_rank_computing_long_after_the_others_finished_is_left_to_finish(pool) -> None:
    code = "import time\nif rank == 0:\n    time.sleep(7)\nrank"  # past PEER_WAIT_S, outside any collective
    result = run_cell(pool, code, {})
    assert result.ok and result.values == [0, 1], result.failure
