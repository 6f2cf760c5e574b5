"""A job on a one-host pool offers nothing to the host's networks: torch's rendezvous store listens on
MASTER_ADDR only (it would listen on every interface by itself), and gloo, NCCL and tensorpipe are
kept on loopback."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from gpugeek_jupyter.jobs.env import LOOPBACK_INTERFACE, SOCKET_INTERFACE_VARIABLES, build_worker_env
from gpugeek_jupyter.jobs.layout import WorkerInfo, plan_layout

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def _slot(hosts: list[str], rank: int) -> Any:
    return plan_layout([WorkerInfo(f"tls://{h}:{9000 + i}", str(i), h) for i, h in enumerate(hosts)]).slots[rank]


def test_one_host_ranks_keep_gloo_nccl_and_tensorpipe_on_loopback() -> None:
    env = build_worker_env(_slot(["127.0.0.1"] * 2, 1), master_addr="127.0.0.1", master_port=4000, run_id="j")
    assert {name: env[name] for name in SOCKET_INTERFACE_VARIABLES} == dict.fromkeys(
        SOCKET_INTERFACE_VARIABLES, LOOPBACK_INTERFACE
    )


def test_the_workers_own_interface_choice_is_kept() -> None:
    env = build_worker_env(
        _slot(["127.0.0.1"] * 2, 0),
        master_addr="127.0.0.1",
        master_port=4000,
        run_id="j",
        parent_env={"NCCL_SOCKET_IFNAME": "ib0"},
    )
    assert "NCCL_SOCKET_IFNAME" not in env and env["GLOO_SOCKET_IFNAME"] == LOOPBACK_INTERFACE


def test_ranks_on_several_hosts_use_the_interface_of_their_worker_address_for_gloo_and_tensorpipe() -> None:
    slot = _slot(["10.0.0.1", "10.0.0.2"], 1)
    env = build_worker_env(slot, master_addr="10.0.0.1", master_port=4000, run_id="j", host_interface="eth1")
    assert (env["GLOO_SOCKET_IFNAME"], env["TP_SOCKET_IFNAME"]) == ("eth1", "eth1")
    assert "NCCL_SOCKET_IFNAME" not in env  # NCCL chooses its own (InfiniBand first)
    own = build_worker_env(
        slot,
        master_addr="10.0.0.1",
        master_port=4000,
        run_id="j",
        host_interface="eth1",
        parent_env={"GLOO_SOCKET_IFNAME": "ib0"},
    )
    assert "GLOO_SOCKET_IFNAME" not in own  # the worker's own value stays
    unknown = build_worker_env(slot, master_addr="10.0.0.1", master_port=4000, run_id="j")
    assert not set(SOCKET_INTERFACE_VARIABLES) & set(unknown)  # no interface holds the address: torch's choice


def test_the_interface_of_an_address_is_the_one_that_holds_it() -> None:
    from gpugeek_jupyter.jobs.env import interface_of

    assert interface_of("127.0.0.1") == LOOPBACK_INTERFACE
    assert interface_of("no-such-host.invalid") is None


def _sockets(pid: int, status: str) -> set[tuple[str, str]]:
    """(local ip, remote ip or '') of the process's inet sockets in ``status``."""
    found = set()
    for c in psutil.Process(pid).net_connections(kind="inet"):
        if c.status == status:
            found.add((c.laddr.ip, c.raddr.ip if c.raddr else ""))
    return found


def _listening_ports(pid: int) -> set[tuple[str, int]]:
    return {
        (c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="inet") if c.status == "LISTEN"
    }


@pytest.fixture
def pool() -> Iterator[Any]:
    import gpugeek_jupyter

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="job-sockets")
    yield pool
    pool.stop()


@pytest.mark.slow
def test_a_jobs_rendezvous_store_and_gloo_listen_and_connect_on_loopback_only(pool: Any) -> None:
    from gpugeek_jupyter.jobs import run_cell

    pids = list(pool.client.run(os.getpid).values())
    before = {pid: _listening_ports(pid) for pid in pids}
    result = run_cell(
        pool,
        "import os, torch, torch.distributed as dist\nt = torch.ones(1)\ndist.all_reduce(t)\n"
        "print(int(t.item()), os.environ['MASTER_ADDR'], os.environ['GLOO_SOCKET_IFNAME'])",
        {},
    )
    assert result.returncodes == [0, 0], result
    opened = {pid: _listening_ports(pid) - before[pid] for pid in pids}  # the warm group keeps them open
    assert sum(len(ports) for ports in opened.values()) >= 3, opened  # the store, and gloo's on each rank
    exposed = {pid: [p for p in ports if p[0] not in LOOPBACK] for pid, ports in opened.items()}
    assert exposed == {pid: [] for pid in pids}, f"a job listens beyond loopback: {exposed}"
    remote = {pid: [s for s in _sockets(pid, "ESTABLISHED") if s[1] not in LOOPBACK] for pid in pids}
    assert remote == {pid: [] for pid in pids}, remote
