"""The environment of a rank: torchrun's contract, built by one pure function.

Every rank of a job, cell or script, runs with exactly the variables that
``torchrun --nproc_per_node=N`` gives its worker processes
(``torch/distributed/elastic/agent/server/local_elastic_agent.py``):

=============================  ===============================================================
``RANK``                       global rank, ``0 .. WORLD_SIZE-1``; ranks of a host are contiguous
``LOCAL_RANK``                 index of the rank on its host; the CUDA device is ``cuda:LOCAL_RANK``
``WORLD_SIZE``                 number of ranks (= workers of the pool)
``LOCAL_WORLD_SIZE``           ranks on this rank's host
``GROUP_RANK``                 index of the host (torchrun's node rank)
``GROUP_WORLD_SIZE``           number of hosts
``ROLE_RANK``                  = ``RANK`` (one role, ``default``)
``ROLE_NAME``                  ``default``
``ROLE_WORLD_SIZE``            = ``WORLD_SIZE``
``MASTER_ADDR``                host of rank 0
``MASTER_PORT``                port of the rendezvous store on rank 0's worker, a free port
                               chosen by that host's OS when the process group is (re)built
``TORCHELASTIC_RESTART_COUNT`` how many times this job was restarted (``--max-restarts``)
``TORCHELASTIC_MAX_RESTARTS``  the job's ``--max-restarts``
``TORCHELASTIC_RUN_ID``        the job id
``TORCHELASTIC_USE_AGENT_STORE`` ``True``: the store is hosted outside the rank, as torchrun's
                               agent does, so ``init_process_group("env://")`` connects to it
``TORCHELASTIC_ERROR_FILE``    where ``@record`` writes a rank's error (per job, attempt, rank)
``TORCHELASTIC_SIGNALS_TO_HANDLE`` as torchrun sets it
``TORCH_NCCL_ASYNC_ERROR_HANDLING`` the worker's value, else ``1``
``OMP_NUM_THREADS``            the worker's value; else ``1`` when several ranks share a host
=============================  ===============================================================

On a pool whose ranks all run on one host, the sockets of gloo, NCCL's bootstrap and tensorpipe stay
on the loopback interface (``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``, ``TP_SOCKET_IFNAME`` =
``lo``; the worker's own values, or a job's ``--env``, win), as the rendezvous store does (it
listens on ``MASTER_ADDR`` only, see :func:`~.rank.prepare_generation`): nothing of a job's traffic
is offered to the host's other networks. Across hosts, gloo and tensorpipe get the interface that
carries the rank's own worker address (the one the pool's traffic already takes between hosts),
not the address of the host's name, which Debian and Ubuntu map to ``127.0.1.1`` in ``/etc/hosts``
(a peer on another host then cannot connect). NCCL is left to its own choice of interfaces (it
skips loopback and prefers InfiniBand). The worker's own values, or ``--env``, win.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from .layout import RankSlot

ROLE_NAME = "default"
DEFAULT_SIGNALS_TO_HANDLE = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"

# Every variable build_worker_env sets (OMP_NUM_THREADS only when torchrun would).
TORCHRUN_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_NAME",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_SIGNALS_TO_HANDLE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "OMP_NUM_THREADS",
)

# The interface variables torch's transports read, set to loopback when every rank is on one host.
SOCKET_INTERFACE_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
LOOPBACK_INTERFACE = "lo0" if sys.platform == "darwin" else "lo"
CROSS_HOST_INTERFACE_VARIABLES = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")  # NCCL picks its own

# Every variable build_worker_env may set: torchrun's, then those that keep a one-host job on loopback.
RANK_VARIABLES = TORCHRUN_VARIABLES + SOCKET_INTERFACE_VARIABLES


def build_worker_env(
    slot: RankSlot,
    *,
    master_addr: str,
    master_port: int,
    run_id: str,
    restart_count: int = 0,
    max_restarts: int = 0,
    error_file: str = "",
    parent_env: Mapping[str, str] | None = None,
    loopback_interface: str = LOOPBACK_INTERFACE,
    host_interface: str | None = None,
) -> dict[str, str]:
    """The torchrun variables of the rank in ``slot``; ``parent_env`` is the worker's own environment.

    With every rank on one host, also the socket-interface variables of gloo, NCCL and tensorpipe
    (:data:`SOCKET_INTERFACE_VARIABLES`) as ``loopback_interface``, unless the worker has its own.

    Pure: the same arguments give the same dict, and nothing is read from the process.

    >>> from gpugeek_jupyter.jobs.layout import WorkerInfo, plan_layout
    >>> slot = plan_layout([WorkerInfo("tcp://h:1", "0", "h"), WorkerInfo("tcp://h:2", "1", "h")]).slots[1]
    >>> env = build_worker_env(slot, master_addr="h", master_port=41000, run_id="job-1", parent_env={})
    >>> env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["MASTER_PORT"], env["OMP_NUM_THREADS"]
    ('1', '1', '2', '41000', '1')
    """
    parent = parent_env or {}
    if not 0 < int(master_port) < 65536:
        raise ValueError(f"master_port must be a TCP port from 1 to 65535, got {master_port!r} (e.g. 41000)")
    env = {
        "RANK": str(slot.rank),
        "LOCAL_RANK": str(slot.local_rank),
        "WORLD_SIZE": str(slot.world_size),
        "LOCAL_WORLD_SIZE": str(slot.local_world_size),
        "GROUP_RANK": str(slot.group_rank),
        "GROUP_WORLD_SIZE": str(slot.group_world_size),
        "ROLE_RANK": str(slot.rank),
        "ROLE_NAME": ROLE_NAME,
        "ROLE_WORLD_SIZE": str(slot.world_size),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(int(master_port)),
        "TORCHELASTIC_RESTART_COUNT": str(restart_count),
        "TORCHELASTIC_MAX_RESTARTS": str(max_restarts),
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_USE_AGENT_STORE": str(True),
        "TORCHELASTIC_ERROR_FILE": error_file,
        "TORCHELASTIC_SIGNALS_TO_HANDLE": parent.get("TORCHELASTIC_SIGNALS_TO_HANDLE", DEFAULT_SIGNALS_TO_HANDLE),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": parent.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    }
    # torchrun: keep the caller's OMP_NUM_THREADS, else 1 when several processes share the node
    if "OMP_NUM_THREADS" in parent:
        env["OMP_NUM_THREADS"] = parent["OMP_NUM_THREADS"]
    elif slot.local_world_size > 1:
        env["OMP_NUM_THREADS"] = "1"
    if slot.group_world_size == 1:  # one host: no job socket needs more than loopback
        env.update({name: loopback_interface for name in SOCKET_INTERFACE_VARIABLES if name not in parent})
    elif host_interface:  # across hosts: where this worker's own address is, for gloo and tensorpipe
        env.update({name: host_interface for name in CROSS_HOST_INTERFACE_VARIABLES if name not in parent})
    return env


def interface_of(address: str) -> str | None:
    """The network interface of this machine that holds ``address`` (an IP, or a name that resolves
    to one of its addresses); None when none does."""
    import socket

    import psutil

    try:
        ips = {info[4][0] for info in socket.getaddrinfo(address, None)}
    except OSError:
        return None
    for interface, addresses in psutil.net_if_addrs().items():
        if any(a.address.split("%", 1)[0] in ips for a in addresses):
            return str(interface)
    return None


def error_file_path(base_dir: str, run_id: str, restart_count: int, rank: int) -> str:
    """torchrun's layout for ``TORCHELASTIC_ERROR_FILE``: ``<base>/<run_id>/attempt_<n>/<rank>/error.json``."""
    return f"{base_dir.rstrip('/')}/{run_id}/attempt_{restart_count}/{rank}/error.json"


COMPILE_CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def compile_cache_env(pool_name: str, parent_env: Mapping[str, str], home: str) -> dict[str, str]:
    """A persistent ``torch.compile`` cache per pool: inductor's and triton's directories.

    ``$XDG_CACHE_HOME/gpugeek-jupyter/compile/<pool>/{inductor,triton}`` (``~/.cache`` without it), so
    a cell compiled once is served from the cache when it runs again, after its worker was recycled,
    and in a pool launched again under the same name. Variables the worker already has are kept.

    >>> compile_cache_env("dev", {}, "/home/ada")["TORCHINDUCTOR_CACHE_DIR"]
    '/home/ada/.cache/gpugeek-jupyter/compile/dev/inductor'
    """
    root = parent_env.get("XDG_CACHE_HOME") or f"{home.rstrip('/')}/.cache"
    base = f"{root}/gpugeek-jupyter/compile/{pool_name or 'default'}"
    wanted = {"TORCHINDUCTOR_CACHE_DIR": f"{base}/inductor", "TRITON_CACHE_DIR": f"{base}/triton"}
    return {key: value for key, value in wanted.items() if key not in parent_env}
