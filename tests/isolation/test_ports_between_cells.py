"""What a local pool has listening between two cells is what the README's table says: the launching
process's scheduler and nannies, each worker's dask port, and, from the first job on, the warm
process group's ports, which torch cannot authenticate: its rendezvous store on rank 0
(``MASTER_PORT``) and one gloo listener per rank, all on loopback. They close with the pool.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from gpugeek_jupyter.pools.scheduler_workers import connected_workers
from support.processes import wait_until_gone

pytestmark = pytest.mark.slow

LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
CELL = "import os, torch.distributed as dist\n(dist.get_rank(), int(os.environ['MASTER_PORT']), os.getpid())"


def _listening(pid: int) -> set[tuple[str, int]]:
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


@pytest.fixture
def pool_after_a_cell(
    registry_in_the_open: Any,
) -> Iterator[tuple[Any, list[tuple[int, int, int]], set[tuple[str, int]]]]:
    """A 2-worker pool that ran one cell: the pool, each rank's (rank, MASTER_PORT, pid), and what this
    process listened on before the launch."""
    import gpugeek_jupyter
    from gpugeek_jupyter.jobs import run_cell

    before = _listening(os.getpid())
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="between-cells")
    try:
        result = run_cell(pool, CELL, {})
        yield pool, sorted(result.values), before
    finally:
        if pool.status.is_live:
            pool.stop()


def test_between_cells_a_pool_listens_on_its_dask_comms_the_store_and_one_gloo_port_per_rank_only(
    pool_after_a_cell: tuple[Any, list[tuple[int, int, int]], set[tuple[str, int]]],
) -> None:
    pool, ranks, before = pool_after_a_cell
    workers = connected_workers(pool.client)
    pid_of = {pid: address for address, pid in pool.client.run(os.getpid).items()}
    master_port = ranks[0][1]
    kernel = _listening(os.getpid()) - before
    assert {port for _, port in kernel} == {
        _port(pool.scheduler_address),
        *(_port(w["nanny"]) for w in workers.values()),
    }
    for rank, _, pid in ranks:
        ports = _listening(pid)
        assert {ip for ip, _ in ports} <= LOOPBACK, ports
        dask_port = _port(pid_of[pid])
        torch_ports = {port for _, port in ports} - {dask_port}
        expected = 2 if rank == 0 else 1  # rank 0: the store and its gloo listener
        assert len(torch_ports) == expected, (rank, ports)
        assert (master_port in torch_ports) == (rank == 0)

    again = run_second_cell(pool)
    assert again == ranks  # the same warm group: the same store, the same processes


def run_second_cell(pool: Any) -> list[tuple[int, int, int]]:
    from gpugeek_jupyter.jobs import run_cell

    return sorted(run_cell(pool, CELL, {}).values)


def test_the_process_groups_ports_close_with_the_pool(
    pool_after_a_cell: tuple[Any, list[tuple[int, int, int]], set[tuple[str, int]]],
) -> None:
    pool, ranks, before = pool_after_a_cell
    master_port = ranks[0][1]
    pool.stop()
    assert _listening(os.getpid()) - before == set()
    still = [
        c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.laddr.port == master_port
    ]
    assert still == []
    assert wait_until_gone([pid for _, _, pid in ranks], 10) == []  # their gloo listeners with them
