"""Building a generation of the pool's process group: one rendezvous, kept warm between jobs.

Every worker drops its old groups and learns its rank; rank 0's worker opens a fresh rendezvous
store and says on which port. The backend is NCCL for CUDA tensors when every rank owns a GPU,
gloo otherwise. A generation lasts until the workers change, a job fails, or a script runs (a
script builds its own group).
"""

from __future__ import annotations

import logging
import secrets
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import JobFailedError
from . import rank as rank_side
from .layout import Layout, cuda_visible_devices
from .roster import WorkerRoster
from .transport import PoolTransport, is_comm_error, lacks_package

if TYPE_CHECKING:
    from ..pools import Pool

log = logging.getLogger(__name__)

PREPARE_TIMEOUT_S = 60.0  # how long the workers may take to drop old groups and open the store
PREPARE_TRIES = 3  # busy or vanished workers are restarted and the generation tried again this often


@dataclass(frozen=True)
class ProcessGroup:
    """One generation: where its store listens and what each rank sees."""

    generation: str
    layout: Layout
    backend: str  # "gloo" or "cpu:gloo,cuda:nccl"
    master_port: int
    pids: dict[str, int]  # worker address -> its process id
    cuda_visible: dict[str, str]  # worker address -> CUDA_VISIBLE_DEVICES for its rank (GPU workers only)


def package_archive() -> Path:
    """This package as a zip for workers that lack it (a pool attached by address)."""
    from .._version import __version__

    root = Path(__file__).resolve().parents[1]  # the gpugeek_jupyter package
    archive = Path(tempfile.mkdtemp(prefix="gpugeek-")) / f"gpugeek_jupyter-{__version__}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
        for path in sorted(root.rglob("*")):
            relative = path.relative_to(root.parent)
            if path.is_file() and "__pycache__" not in relative.parts and "labextension" not in relative.parts:
                bundle.write(path, relative.as_posix())
    return archive


class ProcessGroupBuilder:
    """Makes generations of ``pool``'s process group; sends this package first to workers without it."""

    def __init__(self, pool: Pool, transport: PoolTransport, roster: WorkerRoster) -> None:
        self.pool = pool
        self.transport = transport
        self.roster = roster
        self._shipped = False

    def build(self, layout: Layout) -> ProcessGroup:
        """A new generation over ``layout`` (or over the healed layout, when workers were stuck)."""
        for _ in range(PREPARE_TRIES):
            generation = secrets.token_hex(8)
            facts = self._prepare(layout, generation)
            errors = {a: f for a, f in facts.items() if isinstance(f, Exception) and not is_comm_error(f)}
            if errors:
                address, error = next(iter(errors.items()))
                raise JobFailedError(f"pool '{self.pool.name}': worker {address} cannot run jobs: {error}")
            bad = [a for a in layout.addresses if not isinstance(facts.get(a), dict) or facts[a].get("busy")]
            if not bad:
                return self._group(layout, generation, facts)
            log.warning("pool %s: workers %s are stuck or gone; restarting them", self.pool.name, bad)
            self.transport.fire(rank_side.kill_rank, bad, None)
            self.roster.mark_dead(set(bad))
            layout, _ = self.roster.ready_layout()
        raise JobFailedError(f"pool '{self.pool.name}': workers {bad} did not become ready for a job")

    def _prepare(self, layout: Layout, generation: str) -> dict[str, Any]:
        slots = {slot.address: slot for slot in layout.slots}
        ask = self.transport.ask
        facts = ask(rank_side.prepare_generation, layout.addresses, generation, slots, timeout=PREPARE_TIMEOUT_S)
        if any(lacks_package(answer) for answer in facts.values()) and not self._shipped:
            self._ship_package()
            facts = ask(rank_side.prepare_generation, layout.addresses, generation, slots, timeout=PREPARE_TIMEOUT_S)
        return facts

    def _ship_package(self) -> None:
        from ..telemetry import withdraw

        archive = package_archive()
        log.info("pool %s: its workers lack gpugeek_jupyter; sending %s", self.pool.name, archive.name)
        self.transport.upload_package(str(archive))
        self._shipped = True
        withdraw(self.pool, "its workers lack gpugeek_jupyter")  # else a restarted worker could not start

    def _group(self, layout: Layout, generation: str, facts: dict[str, Any]) -> ProcessGroup:
        own = {a: facts[a].get("own_gpu") for a in layout.addresses}
        cuda_visible: dict[str, str] = {}
        for host in layout.hosts():
            on_host = [s for s in layout.slots if s.host == host]
            visible = cuda_visible_devices([own[s.address] for s in on_host])
            if visible is not None:
                cuda_visible.update({s.address: visible for s in on_host})
        group = ProcessGroup(
            generation=generation,
            layout=layout,
            backend="cpu:gloo,cuda:nccl" if all(own.values()) else "gloo",
            master_port=int(facts[layout.master.address]["port"]),
            pids={a: int(facts[a]["pid"]) for a in layout.addresses},
            cuda_visible=cuda_visible,
        )
        log.info(
            "pool %s: process group generation %s, %d ranks, store port %d, %s",
            self.pool.name,
            generation,
            layout.world_size,
            group.master_port,
            group.backend,
        )
        return group
