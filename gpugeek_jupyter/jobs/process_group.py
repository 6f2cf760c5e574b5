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
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import JobFailedError, NotFoundError
from ..store import JobRecord as JobRow
from ..store import process_is_alive
from . import rank as rank_side
from .layout import Layout, cuda_visible_devices
from .roster import WorkerRoster
from .transport import PoolTransport, is_comm_error, lacks_package

if TYPE_CHECKING:
    from ..pools import Pool

log = logging.getLogger(__name__)

PREPARE_TIMEOUT_S = 60.0  # how long the workers may take to drop old groups and open the store
PREPARE_TRIES = 3  # busy or vanished workers are restarted and the generation tried again this often
LEFTOVER_GRACE_S = 10.0  # an ended job's ranks still running are ended after this (its process stops them first)
LEFTOVER_POLL_S = 0.25


@dataclass(frozen=True)
class ProcessGroup:
    """One generation: where its store listens and what each rank sees."""

    generation: str
    layout: Layout
    backend: str  # "gloo" or "cpu:gloo,cuda:nccl"
    master_port: int
    pids: dict[str, int]  # worker address -> its process id
    cuda_visible: dict[str, str]  # worker address -> CUDA_VISIBLE_DEVICES for its rank (GPU workers only)
    stderr_files: dict[str, str] = field(default_factory=dict)  # worker address -> descriptor 2's file in jobs


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
        """A new generation over ``layout`` (or over the healed layout, when workers were stuck).

        The job building it holds the pool's turn (:mod:`.pool_queue`), so a worker still busy runs
        what an ended job left: that job's own process is stopping it (given
        ``LEFTOVER_GRACE_S``), or is gone, and then nobody else will; either way it is ended here
        and the nanny starts a fresh process. A worker that does not answer is restarted.
        """
        grace_until: float | None = None
        tries = 0
        while tries < PREPARE_TRIES:
            generation = secrets.token_hex(8)
            facts = self._prepare(layout, generation)
            errors = {a: f for a, f in facts.items() if isinstance(f, Exception) and not is_comm_error(f)}
            if errors:
                address, error = next(iter(errors.items()))
                raise JobFailedError(f"pool '{self.pool.name}': worker {address} cannot run jobs: {error}")
            silent = [a for a in layout.addresses if not isinstance(facts.get(a), dict)]
            busy = {a: facts[a].get("busy_job") for a in layout.addresses if a not in silent and facts[a].get("busy")}
            if not silent and not busy:
                return self._group(layout, generation, facts)
            if busy and not silent:
                if grace_until is None:
                    grace_until = time.monotonic() + LEFTOVER_GRACE_S
                if self._leftovers_may_stop(set(busy.values())) and time.monotonic() < grace_until:
                    time.sleep(LEFTOVER_POLL_S)
                    continue
            if silent:
                log.warning("pool %s: workers %s do not answer; restarting them", self.pool.name, silent)
            if busy:
                log.warning(
                    "pool %s: workers %s still run %s, which %s; ending them",
                    self.pool.name,
                    sorted(busy),
                    ", ".join(sorted({str(j) for j in busy.values()})),
                    self._describe_leftovers(set(busy.values())),
                )
            bad = sorted(set(silent) | set(busy))
            tries += 1
            self.transport.fire(rank_side.kill_rank, bad, None)
            self.roster.mark_dead(set(bad))
            layout, _ = self.roster.ready_layout()
        raise JobFailedError(f"pool '{self.pool.name}': workers {bad} did not become ready for a job")

    def _leftovers_may_stop(self, job_ids: set[str | None]) -> bool:
        """Whether a process of this host that can stop these jobs' ranks still runs (so waiting helps)."""
        for job_id in job_ids:
            job = self._job_row(job_id)
            if (
                job is not None
                and job.submitter_pid is not None
                and process_is_alive(job.submitter_pid, job.submitter_started_at or 0.0)
            ):
                return True
        return False

    def _describe_leftovers(self, job_ids: set[str | None]) -> str:
        reasons = []
        for job_id in sorted(str(j) for j in job_ids):
            job = self._job_row(job_id)
            if job is None:
                reasons.append("this registry does not know")
            elif job.submitter_pid is not None and not process_is_alive(
                job.submitter_pid, job.submitter_started_at or 0.0
            ):
                reasons.append(f"was submitted by {job.submitter}, which is gone")
            else:
                reasons.append(f"has ended ({job.status.value}) and did not stop in {LEFTOVER_GRACE_S:.0f} s")
        return "; ".join(dict.fromkeys(reasons))

    def _job_row(self, job_id: str | None) -> JobRow | None:
        if job_id is None:
            return None
        try:
            return self.pool.registry.job(job_id)
        except NotFoundError:
            return None

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
            stderr_files={a: str(facts[a]["stderr_file"]) for a in layout.addresses if facts[a].get("stderr_file")},
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
