"""A pool over two Slurm nodes (:mod:`slurm.two_nodes`: the second a network namespace with its own
address and host name): ranks on two hosts, torchrun's per-node coordinates, gloo across the network."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpugeek_jupyter.pools.scheduler_workers import connected_workers
from slurm.one_host import SlurmUnavailable
from slurm.two_nodes import SECOND_NODE, TwoNodeSlurm

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_node_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoNodeSlurm]:
    if os.geteuid() != 0:
        pytest.skip("the second node's namespaces and the daemons need root")
    try:
        cluster = TwoNodeSlurm.start_two(tmp_path_factory.mktemp("two-nodes"))
    except SlurmUnavailable as e:
        pytest.skip(f"no two-node Slurm here: {e}")
    yield cluster
    cluster.stop()


@pytest.fixture
def two_nodes(
    two_node_cluster: TwoNodeSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TwoNodeSlurm]:
    for key, value in two_node_cluster.environ.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GPUGEEK_SLURM_SHARED_DIRECTORY", str(tmp_path / "shared"))
    monkeypatch.setenv("GPUGEEK_LOG_LEVEL", "ERROR")
    yield two_node_cluster
    two_node_cluster.fail_if_jobs_left()


CELL = """
import os, socket
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)  # gloo, between the two nodes
coordinates = {k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR")}
(socket.gethostname(), coordinates, os.environ.get("GLOO_SOCKET_IFNAME"), t.item())
"""


def test_a_pool_over_two_nodes_runs_one_job_with_a_rank_on_each(two_nodes: TwoNodeSlurm) -> None:
    import torch

    import gpugeek_jupyter
    from gpugeek_jupyter.jobs import run_cell

    pool = gpugeek_jupyter.launch(backend="slurm", count=2, name="two-nodes", walltime="00:20:00")
    try:
        hosts = {info["host"] for info in connected_workers(pool.client).values()}
        assert len(hosts) == 2 and two_nodes.node_address in hosts, hosts
        nodes = two_nodes.run("squeue", "-h", "-n", "gpugeek-two-nodes", "-o", "%N").stdout.split()
        assert sorted(nodes) == sorted([two_nodes.node, SECOND_NODE]), nodes

        result = run_cell(pool, CELL, {"torch": torch})
        assert result.ok, result.report()
        (host0, env0, ifname0, total0), (host1, env1, ifname1, total1) = result.values
        assert {host0, host1} == {two_nodes.node, SECOND_NODE}  # one rank on each node
        assert total0 == total1 == 3.0
        assert [env0["GROUP_RANK"], env1["GROUP_RANK"]] == ["0", "1"]
        assert env0["LOCAL_RANK"] == env1["LOCAL_RANK"] == "0" and env0["GROUP_WORLD_SIZE"] == "2"
        assert env0["MASTER_ADDR"] == env1["MASTER_ADDR"] != "127.0.0.1"  # rank 0's node, reached from the other
        assert ifname0 and ifname1 and "lo" not in (ifname0, ifname1)  # gloo on each worker's own interface
    finally:
        pool.stop()
    assert two_nodes.wait_for_no_jobs(30) == []
