"""Which of a pool's workers can take ranks now: the layout, the workers gone, their restarts.

A worker ended or lost is remembered as dead until the scheduler drops it; the next job waits for
the pool to heal (the nannies start a fresh process) up to ``worker_start_timeout``. Workers are
restarted through their nannies to end a frozen interpreter and to give the next job fresh
processes after a script, as torchrun starts fresh ones per run.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import JobFailedError
from ..nvml import GpuLinks
from ..polling import poll_until
from .layout import Layout, plan_layout, workers_from_scheduler_info
from .transport import PoolTransport

if TYPE_CHECKING:
    from ..pools import Pool

log = logging.getLogger(__name__)

LAYOUT_FRESH_S = 2.0  # the worker list is re-read when older than this, or after a failure
RESTART_TIMEOUT_S = 20.0  # a worker being restarted is ended outright if it has not stopped by then
LINKS_TIMEOUT_S = 3.0  # a GPU worker that does not say its NVLink wiring by then is placed by name
DEAD_FORGET_S = 15.0  # an ended worker still listed this long after is taken as alive after all


class WorkerRoster:
    """The ranks a job of ``pool`` can have, kept current as workers die and come back."""

    def __init__(self, pool: Pool, transport: PoolTransport, on_removed: Callable[[str], None]) -> None:
        self.pool = pool
        self.transport = transport
        self._on_removed = on_removed
        self.layout: Layout | None = None
        self._checked_at = 0.0
        # workers ended or lost (address -> when): the scheduler must drop them before the next job
        self.dead: dict[str, float] = {}
        self._restarting: concurrent.futures.Future[None] | None = None
        self._links: dict[str, GpuLinks | None] = {}  # worker address -> its GPU's NVLink wiring

    def ready_layout(self, min_ranks: int | None = None) -> tuple[Layout, bool]:
        """The pool's workers as ranks, and whether they changed since the last call; waits for lost
        workers to be replaced (the pool heals). With ``min_ranks``, after ``elastic_wait_seconds``
        the workers that remain, if there are at least that many (torchrun's ``--nnodes=MIN:MAX``)."""
        from ..config import get_config

        now = time.monotonic()
        if self.layout is not None and not self.dead and now - self._checked_at < LAYOUT_FRESH_S:
            return self.layout, False
        expected = max(1, int(self.pool.spec.count))
        heal_timeout = get_config().worker_start_timeout
        shrink_at = now + get_config().elastic_wait_seconds if min_ranks is not None else None
        live: dict[str, dict[str, Any]] = {}

        def enough() -> bool:
            workers = self.transport.live_workers()
            # forget addresses the scheduler dropped (gone for good) and ones that, long after, did not go
            self.dead = {a: t for a, t in self.dead.items() if a in workers and time.monotonic() - t < DEAD_FORGET_S}
            live.clear()
            live.update((a, w) for a, w in workers.items() if a not in self.dead)
            if len(live) >= expected:
                return True
            if shrink_at is None or min_ranks is None or time.monotonic() < shrink_at or len(live) < min_ranks:
                return False
            log.info(
                "pool %s: %d of its %d workers remain; the job goes on with %d ranks",
                self.pool.name,
                len(live),
                expected,
                len(live),
            )
            return True

        def unhealed() -> JobFailedError:
            return JobFailedError(
                f"pool '{self.pool.name}' has {len(live)} of its {expected} workers ready after "
                f"{heal_timeout:.0f} s; see its dashboard, or stop it and launch a new one"
            )

        poll_until(
            enough, timeout=heal_timeout, interval=0.05, what=f"pool '{self.pool.name}' workers", on_timeout=unhealed
        )
        layout = plan_layout(
            workers_from_scheduler_info(
                live, lambda _address, name: self.pool.pricing_of(name), links=self._gpu_links(list(live))
            )
        )
        changed = self.layout is None or layout.slots != self.layout.slots
        if changed:
            self.transport.follow_removals(layout.addresses, self._removed)
        self.layout, self._checked_at = layout, time.monotonic()
        return layout, changed

    def _gpu_links(self, addresses: list[str]) -> dict[str, GpuLinks | None]:
        """Each GPU worker's NVLink wiring (asked once per worker; a cpu pool has none)."""
        from ..catalog import CPU
        from .rank import gpu_links

        if self.pool.spec.gpu_type == CPU:
            return {}
        unknown = [a for a in addresses if a not in self._links]
        if unknown:
            answers = self.transport.ask(gpu_links, unknown, timeout=LINKS_TIMEOUT_S)
            for address in unknown:
                answer = answers.get(address)
                self._links[address] = answer if isinstance(answer, GpuLinks) else None
        self._links = {a: self._links[a] for a in addresses if a in self._links}  # forget workers gone
        return dict(self._links)

    def _removed(self, address: str) -> None:
        self.dead[address] = time.monotonic()
        self._checked_at = 0.0
        self._on_removed(address)

    def mark_dead(self, addresses: set[str]) -> None:
        now = time.monotonic()
        self.dead.update({a: now for a in addresses})
        self._checked_at = 0.0

    def restart(self, addresses: set[str], why: str) -> None:
        """Have the nannies restart these workers; the next job waits for the pool to heal.

        Workers without a nanny (``dask worker --no-nanny``) cannot be restarted: they stay in use.
        """
        if not addresses:
            return
        self.mark_dead(addresses)
        restarting = self.transport.restart_workers(sorted(addresses), RESTART_TIMEOUT_S)

        def done(future: concurrent.futures.Future[None]) -> None:
            error = future.exception()
            if error is None:
                return
            if not self.transport.usable:  # the pool stopped meanwhile: nothing to restart any more
                log.debug("pool %s: restart of %s ended with the pool: %s", self.pool.name, sorted(addresses), error)
                return
            log.warning("pool %s: could not restart workers %s (%s): %s", self.pool.name, sorted(addresses), why, error)
            for address in addresses:  # e.g. no nanny: the same processes go on serving jobs
                self.dead.pop(address, None)

        restarting.add_done_callback(done)
        self._restarting = restarting

    def end_workers(self, addresses: list[str]) -> None:
        """End worker processes from outside, through their nannies (for workers that cannot even
        answer: a frozen interpreter); the nannies start fresh ones and the pool heals."""
        if addresses:
            log.warning("pool %s: workers %s do not answer; ending them", self.pool.name, addresses)
            self.restart(set(addresses), "they did not answer")

    def wait_for_restarts(self) -> None:
        """Wait for a restart in progress (a stop cutting it short would leave errors in the logs)."""
        restarting = self._restarting
        if restarting is None:
            return
        try:
            restarting.result(timeout=RESTART_TIMEOUT_S + 5.0)
        except Exception as e:
            log.info("pool %s: the restart of its workers did not finish before the stop: %s", self.pool.name, e)
