"""Rank layout: which worker is which rank.

One rank per worker (a worker is one GPU, or one CPU slot of a ``cpu`` pool). Workers are grouped by
host, hosts ordered by their first worker (dask worker names ``0..n-1`` for our own pools), so the
ranks of one host are contiguous, exactly like ``torchrun`` started once per node:
``GROUP_RANK`` is the host's index, ``LOCAL_RANK`` the worker's index on its host.

>>> layout = plan_layout([WorkerInfo("tcp://b:1", "1", "b"), WorkerInfo("tcp://a:1", "0", "a"),
...                       WorkerInfo("tcp://a:2", "2", "a")])
>>> [(s.rank, s.host, s.local_rank, s.group_rank) for s in layout.slots]
[(0, 'a', 0, 0), (1, 'a', 1, 0), (2, 'b', 0, 1)]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..devices import cuda_visible_devices

__all__ = ["Layout", "RankSlot", "WorkerInfo", "cuda_visible_devices", "plan_layout", "workers_from_scheduler_info"]


@dataclass(frozen=True)
class WorkerInfo:
    """What the scheduler knows of one worker."""

    address: str
    name: str
    host: str


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
    """Assign ranks: hosts in order of their first worker's name, workers by name within a host."""
    ordered = sorted(workers, key=lambda w: (_name_key(w.name), w.address))
    by_host: dict[str, list[WorkerInfo]] = {}
    for worker in ordered:
        by_host.setdefault(worker.host, []).append(worker)
    world_size = len(ordered)
    slots: list[RankSlot] = []
    for group_rank, host_workers in enumerate(by_host.values()):
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


def workers_from_scheduler_info(workers: dict[str, dict[str, Any]]) -> list[WorkerInfo]:
    """``WorkerInfo`` for each entry of ``client.scheduler_info()["workers"]``."""
    infos = []
    for address, info in workers.items():
        host = info.get("host") or _host_of(address)
        infos.append(WorkerInfo(address=address, name=str(info.get("name", address)), host=str(host)))
    return infos


def _host_of(address: str) -> str:
    hostport = address.split("://", 1)[-1]
    return hostport.rsplit(":", 1)[0].strip("[]")
