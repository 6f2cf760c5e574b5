"""What the server extension's routes do, as JSON-ready dicts; nothing here knows about HTTP.

Every call blocks (SQLite, dask), so handlers run them on a thread. Errors are
:class:`~gpugeek_jupyter.errors.GpugeekError` subclasses; the handlers map them to HTTP codes.

Listing (the panel polls every 2 s) is bounded whatever the history: live pools plus the pools that
ended in the last 24 h (at most :data:`RECENT_ENDED_LIMIT` of them), each read with indexed queries;
older pools are paged through with ``state="ended"``. A pool that ended a minute ago or more no
longer changes, so its cost and telemetry are computed once and kept (until its record or its data
volumes change); only live pools are priced on every poll. Reads never write: dead owners' pools are
marked lost by the registry's sweeper, which the service runs at most once per heartbeat period.

Launching: ``launch`` validates the request, starts the pool on a background thread owned by this
server process, and returns as soon as the pool is registered as ``starting`` (the panel polls
until it is ``ready`` or ``failed``). A bad value, a name clash or a backend that cannot provide
the pool (its preflight) is answered at once (400, 409, 422); a failure while the workers come up
shows as a ``failed`` pool with its reason. Stopping answers once the pool has stopped, whichever
process owns it (another process's pool is stopped by its own heartbeat, through the registry).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..catalog import load_catalog
from ..client import DEFAULT_JOBS_LIMIT
from ..config import BACKENDS, GpugeekConfig
from ..errors import GpugeekError, NotFoundError, SpecError, Surface, phrased_for
from ..polling import poll_until
from ..pools import PoolManager
from ..spec import SLURM_OPTIONS, PoolSpec
from ..store import (
    RECENT_WINDOW_SECONDS,
    JobRecord,
    JobStatus,
    PoolRecord,
    Registry,
    WorkerInterval,
)
from .launch_request import launch_request_schema
from .models import (
    PoolCost,
    TelemetryView,
    job_usd,
    make_job_model,
    make_pool_model,
    pool_cost,
    pool_telemetry,
)
from .queries import DEFAULT_OUTPUT_LINES, DEFAULT_PAGE, ENDED, LIVE, RECENT, STATES

log = logging.getLogger(__name__)

SERVER_OWNER = "server"
REGISTRATION_TIMEOUT_S = 60.0  # a new pool row needs one SQLite write; this only bounds a locked file
RECENT_ENDED_LIMIT = 30  # ended pools in the panel's default answer; older ones are on the history pages
SETTLED_AFTER_END_S = 60.0  # an owner's last writes (a heartbeat's sample) land within this after the end
SETTLED_KEPT = 1024  # ended pools whose cost and telemetry are kept (a poll plus a few history pages)
# the slurm options the panel's launch form offers (extra #SBATCH lines: the magic and the API only)
SLURM_FORM_DEFAULTS = tuple(option for option in SLURM_OPTIONS if option != "sbatch_directives")


class GpugeekService:
    """The server's view of every pool and job in the registry, and the pools it owns itself."""

    def __init__(self, manager: PoolManager, config: GpugeekConfig, clock: Callable[[], float] = time.time) -> None:
        self.manager = manager
        self.config = config
        self.clock = clock
        self._launches: dict[str, Future[None]] = {}
        self._launches_lock = threading.Lock()
        self._gpus: tuple[str, list[Any]] | None = None
        self._clients: dict[str, Any] = {}  # scheduler address -> dask Client, for other owners' pools
        self._sweep_lock = threading.Lock()
        self._settled: OrderedDict[int, tuple[tuple[PoolRecord, int], PoolCost, TelemetryView]] = OrderedDict()
        self._settled_lock = threading.Lock()
        self._next_sweep = 0.0  # time.monotonic() of the next lost-pool sweep

    @property
    def registry(self) -> Registry:
        return self.manager.registry

    # -- pools -----------------------------------------------------------------------------------
    def list_pools(
        self,
        namespace: str | None = None,
        state: str = RECENT,
        before: int | None = None,
        limit: int = DEFAULT_PAGE,
    ) -> dict[str, Any]:
        """Pools, whoever made them. ``recent`` (the panel's default): live pools plus the pools that
        ended in the last 24 h, the newest record of each name (names key the panel's rows), oldest
        first. ``live``: live pools only. ``ended``: one page of history, every record, newest first,
        with ``next``, the ``before`` of the following page (None on the last one).

        >>> service.list_pools(state="ended", before=120, limit=2)  # doctest: +SKIP
        {'pools': [{'name': 'sweep-7', ...}, {'name': 'dev', ...}], 'next': 117}
        """
        if state not in STATES:
            raise SpecError(
                f"state must be one of {', '.join(map(repr, STATES))}, got {state!r}; e.g. 'ended'", field="state"
            )
        self.sweep_lost_pools()
        now = self.clock()
        if state == ENDED:
            page = self.registry.ended_pools(before_id=before, limit=limit + 1, namespace=namespace)
            more = len(page) > limit
            page = page[:limit]
            return {"pools": self._pool_models(page, now), "next": page[-1].id if more else None}
        if state == LIVE:
            records = self.registry.list_pools(live_only=True, namespace=namespace)
        else:
            records = self.registry.recent_pools(
                ended_since=now - RECENT_WINDOW_SECONDS, namespace=namespace, ended_limit=RECENT_ENDED_LIMIT
            )
            newest = {r.name: r for r in records}  # ordered by id, so later records win
            records = sorted(newest.values(), key=lambda r: r.id)
        return {"pools": self._pool_models(records, now)}

    def status_token(self) -> str:
        """What changes whenever a pool or job is added, changes status or ends (lost pools are
        marked first): ``GET /gpugeek/changes`` waits for it to differ from the panel's."""
        self.sweep_lost_pools()
        return self.registry.status_token()

    def pool(self, name: str) -> dict[str, Any]:
        """The newest pool called ``name``, live or ended."""
        self.sweep_lost_pools()
        record = self.registry.latest_pool(name)
        return {"pool": self._pool_model(record)}

    def sweep_lost_pools(self) -> None:
        """Mark dead or silent owners' pools lost, at most once per heartbeat period: the sweeper
        reads the few live pools and writes only when one is lost, but the panel polls often."""
        with self._sweep_lock:
            if time.monotonic() < self._next_sweep:
                return
            self._next_sweep = time.monotonic() + self.config.heartbeat_seconds
        self.registry.mark_lost_pools(self.config.lost_after_seconds)

    def launch(self, options: dict[str, Any]) -> dict[str, Any]:
        """Validate ``options``, start the pool in this process (with ``"keep": true``, in the user's
        agent), return it once it is registered."""
        options = dict(options)
        keep = bool(options.pop("keep", False))
        spec = PoolSpec.create(**options)
        before = self.registry.newest_pool_id()
        done: Future[None] = Future()
        thread = threading.Thread(
            target=self._launch_in_background,
            args=(spec, done, keep),
            name=f"gpugeek-launch-{spec.name}",
            daemon=True,
        )
        with self._launches_lock:
            for finished in [n for n, f in self._launches.items() if f.done()]:
                del self._launches[finished]
            self._launches[spec.name] = done
        thread.start()

        def registered() -> PoolRecord | None:
            record = self._registered(spec.name, before, keep)
            error = done.exception() if record is None and done.done() else None
            if error is not None:
                raise error  # the launch failed before it registered the pool
            return record

        record = poll_until(
            registered,
            timeout=REGISTRATION_TIMEOUT_S,
            interval=0.02,
            what=f"pool '{spec.name}' to be registered",
            on_timeout=lambda: GpugeekError(
                f"pool '{spec.name}' was not registered within {REGISTRATION_TIMEOUT_S:.0f} s"
            ),
        )
        return {"pool": self._pool_model(record)}

    def _registered(self, name: str, after_id: int, kept: bool = False) -> PoolRecord | None:
        from ..detached.service import AGENT_OWNER

        for record in self.registry.pools_named(name, after_id):
            if kept and record.owner.startswith(AGENT_OWNER):
                return record
            if record.owner == self.manager.owner and record.owner_pid == os.getpid():
                return record
        return None

    def _launch_in_background(self, spec: PoolSpec, done: Future[None], keep: bool = False) -> None:
        try:
            if keep:
                from ..detached import launch_kept

                launch_kept(spec)
            else:
                self.manager.launch(spec)
        except BaseException as e:  # the registry records the failure; the panel shows its reason
            user_mistake = isinstance(e, GpugeekError) and e.http_status < 500
            log.log(logging.INFO if user_mistake else logging.WARNING, "pool %s failed to launch: %s", spec.name, e)
            done.set_exception(e)
        else:
            done.set_result(None)

    def stop(self, name: str) -> dict[str, Any]:
        """Stop pool ``name`` wherever it was launched; an ended pool is answered as it is."""
        with self._launches_lock:
            launching = self._launches.get(name)
        if launching is not None:  # ours and maybe still starting: let it come up, then close it directly
            try:
                launching.exception(timeout=self.config.worker_start_timeout + REGISTRATION_TIMEOUT_S)
            except TimeoutError:
                log.warning("pool %s is still starting; asking for a stop through the registry", name)
        self.registry.mark_lost_pools(self.config.lost_after_seconds)
        try:
            self.registry.live_pool(name)
        except NotFoundError:
            return self.pool(name)  # NotFoundError again when no pool ever had that name
        record = self.manager.stop(name, reason="stopped from the Jupyter server")
        self._forget_client(record.scheduler_address)
        return {"pool": self._pool_model(record)}

    def metrics(self, name: str, since: float | None = None) -> dict[str, Any]:
        """The newest sample of every GPU (or CPU worker), read from the pool's own workers; with
        ``since``, every sample they keep that is newer (a monitor filling its window). ``status``
        is the pool's, so that a monitor can say the pool ended rather than go quiet."""
        from ..telemetry import latest_from_workers, recent_from_workers

        record = self.registry.latest_pool(name)
        status = record.status.value
        if status != "ready" or not record.scheduler_address:
            return {"samples": [], "reason": f"pool '{name}' is {status}", "status": status}
        try:
            client = self._client_for(record)
        except (OSError, TimeoutError) as e:
            return {"samples": [], "reason": f"the pool's scheduler does not answer: {e}", "status": status}
        except GpugeekError as e:  # e.g. its TLS credentials are not this user's
            return {"samples": [], "reason": str(e), "status": status}
        samples, reason = latest_from_workers(client) if since is None else recent_from_workers(client, since)
        return {"samples": samples, "reason": reason, "status": status}

    def _client_for(self, record: PoolRecord) -> Any:
        """A dask client of ``record``'s scheduler: the server's own pool's, else one kept per address,
        connected with the pool's TLS credentials when it has them."""
        address = record.scheduler_address or ""
        owned = next((p for p in self.manager.pools() if p.scheduler_address == address), None)
        if owned is not None:
            return owned.client
        client = self._clients.get(address)
        if client is None or client.status not in ("running", "connecting", "newly-created"):
            from distributed import Client

            from ..pools.credentials import connection_security

            security = connection_security(record, self.registry)
            client = self._clients[address] = Client(address, set_as_default=False, timeout=3, security=security)
        return client

    def _forget_client(self, address: str | None) -> None:
        """Close the kept client of a stopped pool's scheduler (it would keep trying to reconnect)."""
        client = self._clients.pop(address or "", None)
        if client is not None:
            try:
                client.close(timeout=3)
            except Exception as e:  # the pool is gone either way; only this client's clean-up is lost
                log.info("the client of %s did not close cleanly: %s", address, e)

    def _pool_models(self, records: list[PoolRecord], now: float) -> list[dict[str, Any]]:
        """Models of ``records``: running workers read for the live ones in one query; an ended
        pool's cost and telemetry computed once and kept while its record and data volumes stay."""
        intervals = self.registry.open_worker_intervals([r.id for r in records if r.status.is_live])
        marks = self.registry.data_volume_marks([r.id for r in records if not r.status.is_live])
        return [self._pool_model(r, intervals, now, volumes_mark=marks.get(r.id, 0)) for r in records]

    def _pool_model(
        self,
        record: PoolRecord,
        intervals: list[WorkerInterval] | None = None,
        now: float | None = None,
        volumes_mark: int | None = None,
    ) -> dict[str, Any]:
        now = self.clock() if now is None else now
        if intervals is None:
            intervals = self.registry.worker_intervals(record.id)
        settled = (
            volumes_mark is not None
            and record.ended_at is not None
            and not record.status.is_live
            and now - record.ended_at > SETTLED_AFTER_END_S
        )
        if settled:
            cost, telemetry = self._settled_parts(record, now, volumes_mark or 0)
        else:
            cost = pool_cost(self.registry, record, now, self.config.lost_after_seconds)
            telemetry = pool_telemetry(self.registry, record)
        return make_pool_model(record, intervals, cost, telemetry)

    def _settled_parts(self, record: PoolRecord, now: float, volumes_mark: int) -> tuple[PoolCost, TelemetryView]:
        """Cost and telemetry of a pool that ended a while ago: they change only with its record or
        with a data volume stated later, so they are computed once per (record, newest volume)."""
        key = (record, volumes_mark)
        with self._settled_lock:
            kept = self._settled.get(record.id)
            if kept is not None and kept[0] == key:
                self._settled.move_to_end(record.id)
                return kept[1], kept[2]
        cost = pool_cost(self.registry, record, now, self.config.lost_after_seconds)
        telemetry = pool_telemetry(self.registry, record)
        with self._settled_lock:
            self._settled[record.id] = (key, cost, telemetry)
            while len(self._settled) > SETTLED_KEPT:
                self._settled.popitem(last=False)
        return cost, telemetry

    # -- jobs ------------------------------------------------------------------------------------
    def list_jobs(self, pool: str | None = None, limit: int = DEFAULT_JOBS_LIMIT) -> dict[str, Any]:
        """The newest ``limit`` jobs, of pool ``pool`` or of every pool."""
        pool_id = self.registry.latest_pool(pool).id if pool else None
        jobs = self.registry.list_jobs(pool_id=pool_id, limit=limit)
        positions = self.registry.queue_positions([j.pool_id for j in jobs if j.status is JobStatus.QUEUED])
        return {"jobs": [self._job_model(job, positions) for job in jobs]}

    def job(self, job_id: str) -> dict[str, Any]:
        job = self.registry.job(job_id)
        positions = self.registry.queue_positions([job.pool_id]) if job.status is JobStatus.QUEUED else {}
        return {"job": self._job_model(job, positions)}

    def job_output(self, job_id: str, lines: int = DEFAULT_OUTPUT_LINES) -> dict[str, Any]:
        """Each rank's state and the last ``lines`` lines of the ranks' output, lines alike across
        ranks shown once (``[ranks 0-7] ...``), read from the job's logs on disk: its driver writes
        them through while it runs, whichever process that is.

        A job that has ended while a rank is still recorded ``running`` lost its driver (the kernel
        died): that rank is ``lost``, not running.

        >>> service.job_output("job-3f2a9c7b8c19", lines=2)  # doctest: +SKIP
        {'job': 'job-3f2a9c7b8c19', 'status': 'running', 'ranks': [{'rank': 0, 'state': 'running'}, ...],
         'tail': '[ranks 0-1] step 41\n[ranks 0-1] step 42'}
        """
        from ..jobs.logs import JobLogs

        job = self.registry.job(job_id)
        states = JobLogs.states(job_id)
        if job.status.is_final:
            states = {rank: "lost" if state == "running" else state for rank, state in states.items()}
        try:
            tail = JobLogs.grouped_tail(job_id, lines)
        except OSError as e:  # its logs were removed (the oldest are pruned) or cannot be read
            log.info("job %s: its logs cannot be read: %s", job_id, e)
            tail = ""
        return {
            "job": job.id,
            "status": job.status.value,
            "ranks": [{"rank": rank, "state": state} for rank, state in sorted(states.items())],
            "tail": tail,
        }

    def job_lineage(self, job_id: str) -> dict[str, Any]:
        """Where job ``job_id`` came from (``GET /gpugeek/jobs/<id>/lineage``): the data it read, the
        checkpoints it resumed from with the jobs that wrote them (nested, back to the data) and the
        checkpoints it wrote; 404 for an unknown id."""
        from ..jobs.lineage import trace

        self.registry.job(job_id)  # 404 naming the id
        return {"lineage": trace(job_id, self.registry).to_dict()}

    def job_metrics(self, job_id: str, name: str | None = None, points: int | None = None) -> dict[str, Any]:
        """The values the job's ranks logged with ``gg.log`` (``name``: that metric's only), as kept
        with the job while it runs and after; a NaN or an infinity is ``null``. With ``points``, each
        line (attempt, rank, metric) thinned for a chart to at most that many rows, line by line
        (its first and last, each run's lowest and highest), read on from the previous such read.

        >>> service.job_metrics("job-3f2a9c7b8c19", name="loss")  # doctest: +SKIP
        {'job': 'job-3f2a9c7b8c19', 'status': 'running', 'names': ['loss'],
         'metrics': [{'attempt': 0, 'rank': 0, 'step': 0, 'time': 1764688000.1, 'name': 'loss', 'value': 2.3}, ...]}
        """
        from ..jobs.metrics import metrics_records
        from ..jobs.metrics_thinning import thinned_records

        job = self.registry.job(job_id)
        if points is None:
            rows = metrics_records(job_id)
            names = sorted({row["name"] for row in rows})
        else:
            names, rows = thinned_records(job_id, points)
        if name is not None:
            rows = [row for row in rows if row["name"] == name]
        return {"job": job.id, "status": job.status.value, "names": names, "metrics": rows}

    def submit_job(self, fields: dict[str, Any]) -> dict[str, Any]:
        """Run a script, detached, on pool ``fields["pool"]`` (``POST /gpugeek/jobs``), which is then
        kept (one the server launched is launched again by the agent); the job once it is recorded
        (queued or running)."""
        from ..detached import keep_pool, submit_request
        from ..jobs import script_request

        with phrased_for(Surface.SERVER):
            pool, _ = keep_pool(self.manager.get(fields["pool"]))
            request = script_request(
                fields["script_path"],
                fields.get("args") or (),
                fields.get("hyperparams"),
                timeout=fields.get("timeout"),
                max_restarts=int(fields.get("max_restarts") or 0),
                min_ranks=fields.get("min_ranks"),
                env=fields.get("env"),
                track=fields.get("track"),
            )
            request.submitted_by = "the Jupyter server"
            handle = submit_request(pool, request)
        return self.job(handle.id)

    def cancel_job(self, job_id: str) -> dict[str, Any]:
        """Stop a detached job (``DELETE /gpugeek/jobs/<id>``); the job as it is then."""
        from ..detached import job

        with phrased_for(Surface.SERVER):
            job(job_id).cancel("cancelled through the Jupyter server")
        return self.job(job_id)

    def job_events(self, job_id: str, since: int, limit: int) -> dict[str, Any]:
        """A page of a detached job's output stream from ``seq`` ``since`` (``?since=``): the events,
        the ``next`` seq to ask for, and whether the stream has ended."""
        from ..detached.stream import read_events

        self.registry.job(job_id)  # 404 for an unknown id
        events = read_events(job_id, since, limit)
        ended = bool(events) and events[-1]["kind"] == "end"
        return {"job": job_id, "events": events, "next": events[-1]["seq"] + 1 if events else since, "ended": ended}

    def _job_model(self, job: JobRecord, positions: dict[str, int]) -> dict[str, Any]:
        now = self.clock()
        usd = job_usd(self.registry, job, now, self.config.lost_after_seconds)
        return make_job_model(job, usd, now, positions.get(job.id))

    # -- the team's spend -------------------------------------------------------------------------
    def quota(self) -> dict[str, Any]:
        """This user's quota and what counts against it (``GET /gpugeek/quota``), for the panel."""
        from ..cost.team import quota_status

        with phrased_for(Surface.SERVER):
            return quota_status(self.registry, self.config)

    def team(
        self, since: str | None, until: str | None, user: str | None, viewer: Any, by: str = "user"
    ) -> dict[str, Any]:
        """The team ledger's spend per user, hub group or pool (``by``), as ``team_report`` gives it to
        ``viewer`` (a hub admin: every user; anyone else: their own rows)."""
        from ..cost.team import team_report

        with phrased_for(Surface.SERVER):
            rows = team_report(since=since, until=until, user=user, by=by, viewer=viewer)
        return {
            "viewer": viewer.name,
            "admin": viewer.admin,
            "by": by,
            "rows": rows,
            "total_usd": sum(float(r["usd"]) for r in rows),
        }

    # -- catalog ---------------------------------------------------------------------------------
    def catalog(self) -> dict[str, Any]:
        """GPU types with prices, backends, the launch form's defaults and the launch fields (as
        ``LaunchRequest`` describes them); each GPU type says how many
        of it this machine has for a local pool (``on_this_machine``, None for cpu: no limit) and
        ``gpus_here`` what NVML found, so the form marks what a local pool cannot get."""
        loaded = load_catalog(self.config.price_file or None)
        catalog = loaded.to_dict()
        found, usable = self._gpus_here()
        gpu_types = []
        for gpu in catalog["gpu_types"]:
            entry = {key: gpu[key] for key in ("name", "memory_gb", "interconnects", "prices")}
            kind = loaded.gpu(gpu["name"])
            entry["on_this_machine"] = None if kind.is_cpu else sum(kind.matches_nvml_name(d.name) for d in usable)
            gpu_types.append(entry)
        defaults = {
            "gpu_type": "cpu",
            "count": 1,
            "backend": self.config.default_backend,
            "spot_fraction": 0.0,
            "budget": None,
            "idle_timeout": self.config.idle_timeout_minutes,
            "framework": catalog["default_framework"],
            "namespace": self.config.kubernetes_namespace,
            # a slurm pool's site defaults (GpugeekConfig.slurm_*), which the form starts from
            **{option: getattr(self.config, f"slurm_{option}") or "" for option in SLURM_FORM_DEFAULTS},
        }
        return {
            "gpu_types": gpu_types,
            "backends": list(BACKENDS),
            "defaults": defaults,
            "frameworks": list(catalog["frameworks"]),
            "prices_as_of": catalog["prices_as_of"],
            "gpus_here": found,
            # the launch fields' declaration, as LaunchRequest describes them: the form's rules
            # (which backends a field is for, its bounds, its help) come from here
            "launch_fields": launch_request_schema()["properties"],
        }

    def _gpus_here(self) -> tuple[str, list[Any]]:
        """What NVML finds on this machine (described) and the GPUs this process may use, asked once
        (GPUs do not come and go while the server runs)."""
        if self._gpus is None:
            from ..devices import select_visible
            from ..nvml import discover_gpus

            discovery = discover_gpus()
            self._gpus = (discovery.describe(), list(select_visible(discovery.devices)))
        return self._gpus

    # -- lifetime --------------------------------------------------------------------------------
    def shutdown(self, timeout: float | None = None) -> None:
        """Let launches in flight finish, then stop every pool this server owns."""
        timeout = self.config.worker_start_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self._launches_lock:
            launches = list(self._launches.items())
            self._launches.clear()
        for name, done in launches:
            try:
                done.exception(timeout=max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                log.warning("pool %s was still starting when the server stopped", name)
        for client in self._clients.values():
            try:
                client.close(timeout=5)
            except Exception as e:
                log.info("closing a telemetry client failed: %s", e)
        self.manager.shutdown()
