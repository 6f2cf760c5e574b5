"""Rank layout: which worker is which rank.

One rank per worker (a worker is one GPU, or one CPU slot of a ``cpu`` pool). Workers are grouped by
host, hosts ordered by their first worker (dask worker names ``0..n-1`` for our own pools), so the
ranks of one host are contiguous, exactly like ``torchrun`` started once per node:
``GROUP_RANK`` is the host's index, ``LOCAL_RANK`` the worker's index on its host.

>>> layout = plan_layout([WorkerInfo("tcp://b:1", "1", "b"), WorkerInfo("tcp://a:1", "0", "a"),
...                       WorkerInfo("tcp://a:2", "2", "a")])
>>> [(s.rank, s.host, s.local_rank, s.group_rank) for s in layout.slots]
[(0, 'a', 0, 0), (1, 'a', 1, 0), (2, 'b', 0, 1)]

Spot workers take the last ranks: the part of a job that a reclaim of spot capacity may take away is
its tail, and rank 0 (``MASTER_ADDR``, the rendezvous store, the rank-0 checkpoint writer) and the
ranks an elastic job keeps (``min_ranks``) sit on workers that stay. Hosts are ordered by how many
spot workers they hold (fewest first), then as above; within a host, reserved and on-demand workers
come before spot ones; and among those, GPUs joined by NVLink are neighbouring ranks, when their
workers report the wiring (:func:`gpugeek_jupyter.nvml.gpu_links`), so that a ``tp`` group of
neighbouring ranks (``gg.mesh``) talks over NVLink; behind an NVSwitch every GPU is one hop from every
other, and the order by name stays:

>>> layout = plan_layout([WorkerInfo("tcp://a:1", "0", "a", "spot"), WorkerInfo("tcp://a:2", "1", "a"),
...                       WorkerInfo("tcp://a:3", "2", "a")])
>>> [(s.rank, s.name) for s in layout.slots]
[(0, '1'), (1, '2'), (2, '0')]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..devices import cuda_visible_devices
from ..nvml import GpuLinks

__all__ = ["Layout", "RankSlot", "WorkerInfo", "cuda_visible_devices", "plan_layout", "workers_from_scheduler_info"]


@dataclass(frozen=True)
class WorkerInfo:
    """What the scheduler knows of one worker."""

    address: str
    name: str
    host: str
    pricing: str = "on_demand"  # spot, reserved or on_demand (see Pool.pricing_of)
    links: GpuLinks | None = None  # its GPU's NVLink wiring, when the worker has a GPU and NVML says

    @property
    def spot(self) -> bool:
        return self.pricing == "spot"


@dataclass(frozen=True)
class RankSlot:
    """The place of one rank in the job: its worker and every torchrun coordinate."""

    rank: int
    local_rank: int
    local_world_size: int
    group_rank: int
    group_world_size: int
    world_size: int
    address: str
    name: str
    host: str


@dataclass(frozen=True)
class Layout:
    slots: tuple[RankSlot, ...]

    @property
    def world_size(self) -> int:
        return len(self.slots)

    @property
    def master(self) -> RankSlot:
        """Rank 0: its host is MASTER_ADDR, its worker hosts the rendezvous store."""
        return self.slots[0]

    @property
    def addresses(self) -> list[str]:
        return [s.address for s in self.slots]

    def slot_of(self, address: str) -> RankSlot:
        for slot in self.slots:
            if slot.address == address:
                return slot
        raise KeyError(address)

    def hosts(self) -> list[str]:
        return list(dict.fromkeys(s.host for s in self.slots))


def _name_key(name: str) -> tuple[int, int, str]:
    return (0, int(name), name) if name.isdigit() else (1, 0, name)


def plan_layout(workers: Iterable[WorkerInfo]) -> Layout:
    """Assign ranks: hosts with fewer spot workers first, then in order of their first worker's
    name; within a host, workers that stay (reserved, on demand) before spot ones, then by name."""
    by_host: dict[str, list[WorkerInfo]] = {}  # hosts in order of their first worker's name
    for worker in sorted(workers, key=lambda w: (_name_key(w.name), w.address)):
        by_host.setdefault(worker.host, []).append(worker)
    hosts = sorted(  # stable: hosts with as many spot workers keep their order
        (
            _by_links([w for w in host_workers if not w.spot]) + _by_links([w for w in host_workers if w.spot])
            for host_workers in by_host.values()
        ),
        key=lambda host_workers: sum(w.spot for w in host_workers),
    )
    world_size = sum(len(host_workers) for host_workers in hosts)
    slots: list[RankSlot] = []
    for group_rank, host_workers in enumerate(hosts):
        for local_rank, worker in enumerate(host_workers):
            slots.append(
                RankSlot(
                    rank=len(slots),
                    local_rank=local_rank,
                    local_world_size=len(host_workers),
                    group_rank=group_rank,
                    group_world_size=len(by_host),
                    world_size=world_size,
                    address=worker.address,
                    name=worker.name,
                    host=worker.host,
                )
            )
    return Layout(tuple(slots))


def _by_links(workers: list[WorkerInfo]) -> list[WorkerInfo]:
    """One host's ``workers`` (in order by name) reordered so that each is followed, where it can
    be, by a GPU its NVLinks reach: a walk along the links from the first worker not yet placed.
    Unchanged unless every worker reports its wiring and some GPUs are linked and some not."""
    if len(workers) < 3 or any(w.links is None for w in workers):
        return workers  # two workers: one order is as good as the other
    by_bus = {w.links.bus_id: w.address for w in workers if w.links is not None}
    on_switch = {w.address for w in workers if w.links is not None and w.links.switch}
    linked: dict[str, set[str]] = {w.address: set() for w in workers}
    for worker in workers:
        assert worker.links is not None
        for bus_id in worker.links.peers:
            if bus_id in by_bus:  # links are both ways, whichever side reported them
                linked[worker.address].add(by_bus[bus_id])
                linked[by_bus[bus_id]].add(worker.address)
        if worker.address in on_switch:
            linked[worker.address] |= on_switch - {worker.address}
    pairs = sum(len(peers) for peers in linked.values()) // 2
    if pairs == 0 or pairs == len(workers) * (len(workers) - 1) // 2:
        return workers  # no NVLink, or every GPU linked to every other: the order by name stays
    order: list[WorkerInfo] = []
    left = list(workers)
    while left:
        current = left.pop(0)
        order.append(current)
        while (step := next((w for w in left if w.address in linked[current.address]), None)) is not None:
            left.remove(step)
            order.append(step)
            current = step
    return order


def workers_from_scheduler_info(
    workers: dict[str, dict[str, Any]],
    pricing_of: Callable[[str, str], str] | None = None,
    links: Mapping[str, GpuLinks | None] | None = None,
) -> list[WorkerInfo]:
    """``WorkerInfo`` for each entry of ``client.scheduler_info()["workers"]``; ``pricing_of(address,
    name)`` says how each is paid for (default: on demand), ``links`` each GPU's NVLink wiring by
    worker address."""
    infos = []
    for address, info in workers.items():
        host = info.get("host") or _host_of(address)
        name = str(info.get("name", address))
        pricing = pricing_of(address, name) if pricing_of else "on_demand"
        wiring = (links or {}).get(address)
        infos.append(WorkerInfo(address=address, name=name, host=str(host), pricing=pricing, links=wiring))
    return infos


def _host_of(address: str) -> str:
    hostport = address.split("://", 1)[-1]
    return hostport.rsplit(":", 1)[0].strip("[]")
