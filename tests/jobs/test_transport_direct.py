"""A rank's job reaches its worker through dask's ``run`` handler once, then under an op of the
worker's own (``transport.answers_directly``): the same answers, less work around each call."""

from __future__ import annotations

import pickle
import queue
from typing import Any

from gpugeek_jupyter.jobs import rank, run_cell
from gpugeek_jupyter.jobs.agent import agent_for

OP = rank.run_rank.direct_op


def _served_by_workers(pool: Any) -> dict[str, bool]:
    return pool.client.run(lambda dask_worker, op=OP: op in dask_worker.handlers)  # type: ignore[no-any-return]


def _addresses(pool: Any) -> list[str]:
    return [slot.address for slot in agent_for(pool).group.layout.slots]


def test_after_its_first_job_each_worker_serves_the_rank_itself(pool: Any) -> None:
    assert run_cell(pool, "dist.barrier()", {}).ok
    assert all(_served_by_workers(pool).values())
    second = run_cell(pool, "dist.barrier()\nrank", {})
    assert second.ok and second.values == [0, 1]
    assert {(address, OP) for address in _addresses(pool)} <= agent_for(pool).transport._served


def test_a_worker_without_the_op_is_reached_through_run_again(pool: Any) -> None:
    assert run_cell(pool, "dist.barrier()", {}).ok
    # as a new worker process at the same address would be
    pool.client.run(lambda dask_worker, op=OP: bool(dask_worker.handlers.pop(op)))
    assert not any(_served_by_workers(pool).values())
    again = run_cell(pool, "dist.barrier()\nrank", {})
    assert again.ok and again.values == [0, 1], again.report()
    assert all(_served_by_workers(pool).values())


def test_an_error_of_a_directly_served_call_reaches_the_driver(pool: Any) -> None:
    assert run_cell(pool, "dist.barrier()", {}).ok
    transport, addresses = agent_for(pool).transport, _addresses(pool)
    assert {(address, OP) for address in addresses} <= transport._served
    events: queue.Queue[Any] = queue.Queue()
    transport.launch(events, addresses, rank.run_rank, b"not a pickled job")
    answers = [events.get(timeout=30).answer for _ in addresses]
    assert all(isinstance(answer, pickle.UnpicklingError) for answer in answers), answers
    assert run_cell(pool, "dist.barrier()\nrank", {}).values == [0, 1]  # the workers serve on


def test_a_worker_that_left_the_pool_is_no_longer_remembered_as_serving(pool: Any) -> None:
    assert run_cell(pool, "dist.barrier()", {}).ok
    roster, transport = agent_for(pool).roster, agent_for(pool).transport
    kept, gone = _addresses(pool)
    try:
        transport.follow_removals([kept], roster._removed)  # as a new layout without that worker
        assert {address for address, _ in transport._served} == {kept}
    finally:
        transport.follow_removals([kept, gone], roster._removed)
    assert run_cell(pool, "dist.barrier()\nrank", {}).values == [0, 1]
    assert (gone, OP) in transport._served  # served again once it ran there through run
