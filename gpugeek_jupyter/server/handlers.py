"""HTTP handlers: thin translations between Jupyter Server requests and :class:`GpugeekService`.

Every route is authenticated and authorized (resource ``gpugeek``); writes honour Jupyter's XSRF
check (cookie-authenticated requests need the ``_xsrf`` cookie echoed in ``X-XSRFToken``;
token-authenticated requests are exempt, as everywhere in Jupyter Server). Service calls block, so
they run on a thread. Errors answer ``{"message": ..., "field": ...}``; :func:`error_reply` is the
one place that maps them to HTTP codes.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable
from http.client import responses
from importlib import resources
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from ..errors import ConflictError, GpugeekError, Phrase, RegistryFolderOpenError, Surface, Value
from ..store import JobStatus, Registry
from . import schedule_request
from .job_request import parse_job_body
from .launch_request import launch_request_schema, parse_launch_body
from .queries import (
    parse_changes_query,
    parse_job_metrics_query,
    parse_jobs_query,
    parse_metrics_query,
    parse_output_query,
    parse_pools_query,
    parse_team_query,
)
from .service import GpugeekService
from .settings import AUTH_RESOURCE, WRITES_EXECUTOR_SETTING, service_of

log = logging.getLogger(__name__)

NAMESPACE = "gpugeek"


def error_reply(error: BaseException) -> tuple[int, dict[str, Any]]:
    """The HTTP status and JSON body that answer ``error``: the one mapping from errors to HTTP."""
    if isinstance(error, GpugeekError):
        return error.http_status, {"message": error.phrase(Surface.SERVER), "field": getattr(error, "field", None)}
    if isinstance(error, web.HTTPError):
        message = error.log_message % error.args if error.log_message else None
        if message is None and error.status_code == 403:
            message = "forbidden: send the Jupyter server's token (Authorization: token <token>) or log in first"
        return error.status_code, {
            "message": message or error.reason or responses.get(error.status_code, "HTTP error"),
            "field": None,
        }
    return 500, {
        "message": f"internal error in the gpugeek server extension: {type(error).__name__}: {error}",
        "field": None,
    }


class GpugeekHandler(APIHandler):
    """Base of every gpugeek route: JSON errors, blocking calls off the event loop."""

    auth_resource = AUTH_RESOURCE

    @property
    def service(self) -> GpugeekService:
        return service_of(self.settings)

    async def answer(
        self, call: Callable[..., dict[str, Any]], *args: Any, status: int = 200, slow: bool = False
    ) -> None:
        """Run ``call`` on a thread and answer its JSON; ``slow`` calls (launch, stop: seconds to a
        minute) get their own threads, so they never hold up the server's shared executor."""
        executor = self.settings[WRITES_EXECUTOR_SETTING] if slow else None
        body = await asyncio.get_running_loop().run_in_executor(executor, call, *args)
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        await self.finish(json.dumps(body))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc_info = kwargs.get("exc_info")
        error = exc_info[1] if exc_info else web.HTTPError(status_code)
        status, reply = error_reply(error)
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(reply))

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, GpugeekError) and (value.http_status < 500 or isinstance(value, RegistryFolderOpenError)):
            log.info("%s %s -> %s: %s", self.request.method, self.request.path, value.http_status, value)
            return
        super().log_exception(typ, value, tb)


class PoolsHandler(GpugeekHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        query = parse_pools_query({key: self.get_query_argument(key) for key in self.request.query_arguments})
        await self.answer(self.service.list_pools, query.namespace, query.state, query.before, query.limit)

    @web.authenticated
    @authorized
    async def post(self) -> None:
        options = parse_launch_body(self.request.body)
        await self.answer(self.service.launch, options, status=201, slow=True)


class PoolHandler(GpugeekHandler):
    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        await self.answer(self.service.pool, name)

    @web.authenticated
    @authorized
    async def delete(self, name: str) -> None:
        await self.answer(self.service.stop, name, slow=True)


class PoolMetricsHandler(GpugeekHandler):
    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        query = parse_metrics_query({key: self.get_query_argument(key) for key in self.request.query_arguments})
        await self.answer(self.service.metrics, name, query.since)


class JobsHandler(GpugeekHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        query = parse_jobs_query({key: self.get_query_argument(key) for key in self.request.query_arguments})
        await self.answer(self.service.list_jobs, query.pool, query.limit)

    @web.authenticated
    @authorized
    async def post(self) -> None:
        fields = parse_job_body(self.request.body)
        await self.answer(self.service.submit_job, fields, status=201, slow=True)


class JobHandler(GpugeekHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        await self.answer(self.service.job, job_id)

    @web.authenticated
    @authorized
    async def delete(self, job_id: str) -> None:
        await self.answer(self.service.cancel_job, job_id, slow=True)


class JobOutputHandler(GpugeekHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        arguments = {key: self.get_query_argument(key) for key in self.request.query_arguments}
        query = parse_output_query(arguments)
        if query.since is not None:  # a page of the job's event stream (a detached job's replay)
            await self.answer(self.service.job_events, job_id, query.since, query.limit)
            return
        await self.answer(self.service.job_output, job_id, query.lines)


class JobMetricsHandler(GpugeekHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        query = parse_job_metrics_query({key: self.get_query_argument(key) for key in self.request.query_arguments})
        await self.answer(self.service.job_metrics, job_id, query.name, query.points)


class JobLineageHandler(GpugeekHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        await self.answer(self.service.job_lineage, job_id)


class JobWhereHandler(GpugeekHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        # asks every worker, up to 5 s for a frozen one: on its own thread, not the shared executor
        await self.answer(job_where, self.service.registry, job_id, slow=True)


def job_where(registry: Registry, job_id: str) -> dict[str, Any]:
    """``GET /gpugeek/jobs/<id>/where``: where each rank of a running job is now, per rank and as the
    grouped text of ``%gpugeek_where`` (:func:`~gpugeek_jupyter.jobs.where.where_report`); a job
    that is not running is a conflict (409)."""
    from ..jobs.where import where_report

    job = registry.job(job_id)
    if job.status is not JobStatus.RUNNING:
        raise ConflictError(
            Phrase(
                "job {job} is not running (it is {status}): its ranks can be shown only while it runs",
                job=Value(job_id),
                status=job.status.value,
            )
        )
    pool = registry.pool_by_id(job.pool_id)
    if not pool.status.is_live:
        raise ConflictError(
            Phrase(
                "job {job} is not running: its pool {pool} is {status}",
                job=Value(job_id),
                pool=Value(pool.name),
                status=pool.status.value,
            )
        )
    report = where_report(pool, registry=registry)
    if report.job_id != job_id:
        now = f"job {report.job_id} is running there now" if report.job_id else "no rank of it answers as running"
        raise ConflictError(
            Phrase("job {job} is not running on pool {pool} ({now})", job=Value(job_id), pool=Value(pool.name), now=now)
        )
    return {"where": report.to_json()}


CHANGES_CHECK_SECONDS = 0.25  # how often a waiting request reads the status token


class SchedulesHandler(GpugeekHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        await self.answer(schedule_request.listing)

    @web.authenticated
    @authorized
    async def post(self) -> None:
        fields = schedule_request.parse_schedule_body(self.request.body)
        await self.answer(schedule_request.create, fields, status=201, slow=True)


class ScheduleHandler(GpugeekHandler):
    @web.authenticated
    @authorized
    async def get(self, schedule_id: str) -> None:
        await self.answer(schedule_request.one, schedule_id)

    @web.authenticated
    @authorized
    async def delete(self, schedule_id: str) -> None:
        await self.answer(schedule_request.act, schedule_id, "delete")


class SchedulePauseHandler(GpugeekHandler):
    action = "pause"

    @web.authenticated
    @authorized
    async def post(self, schedule_id: str) -> None:
        await self.answer(schedule_request.act, schedule_id, self.action, slow=self.action == "resume")


class ScheduleResumeHandler(SchedulePauseHandler):
    action = "resume"  # the agent starts if need be: slow


class ChangesHandler(GpugeekHandler):
    """A long poll: the panel learns of a stop, a launch or a job's end within a quarter second
    instead of at its next listing (every 2 s), and pays one tiny index read per check."""

    _gone = False

    def on_connection_close(self) -> None:
        self._gone = True

    @web.authenticated
    @authorized
    async def get(self) -> None:
        query = parse_changes_query({key: self.get_query_argument(key) for key in self.request.query_arguments})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + query.wait
        while True:
            token = await loop.run_in_executor(None, self.service.status_token)
            if token != query.since or loop.time() >= deadline or self._gone:
                break
            await asyncio.sleep(CHANGES_CHECK_SECONDS)
        if self._gone:
            return
        self.set_header("Content-Type", "application/json")
        await self.finish(json.dumps({"token": token}))


class CatalogHandler(GpugeekHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        await self.answer(self.service.catalog)


def team_viewer(user: Any, token: str | None = None) -> Any:
    """Who asks, for the team's spend: under JupyterHub the hub's identity of the caller (the single-user
    server's ``current_user.hub_user``, the hub's own model with its ``admin`` flag and the token's
    scopes); outside a hub, whoever holds this server's token runs code with its ledger URL anyway,
    so they see every row."""
    from ..cost.team import Viewer, current_user, viewer_from_hub_model

    hub_user = getattr(user, "hub_user", None)
    if isinstance(hub_user, dict) and hub_user.get("name"):
        viewer = viewer_from_hub_model(hub_user)
        return Viewer(viewer.name, viewer.admin, token=token)
    return Viewer(name=current_user(), admin=True)


class TeamHandler(GpugeekHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        query = parse_team_query({key: self.get_query_argument(key) for key in self.request.query_arguments})
        # the caller's own hub token (header or login cookie), for a team ledger service to check
        hub_auth = getattr(self.identity_provider, "hub_auth", None)
        token = hub_auth.get_token(self) if hub_auth is not None else None
        viewer = team_viewer(self.current_user, token or None)
        await self.answer(self.service.team, query.since, query.until, query.user, viewer, query.by)


class QuotaHandler(GpugeekHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        await self.answer(self.service.quota)


class OpenApiHandler(GpugeekHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        await self.finish(load_openapi_text())


@functools.cache  # the file and the declaration are fixed while the server runs
def load_openapi_text() -> str:
    """The OpenAPI description of these routes: ``openapi.json`` next to this module, with its
    ``LaunchRequest`` made from the launch fields' declaration (:func:`.launch_request_schema`)."""
    document = json.loads(resources.files(__package__).joinpath("openapi.json").read_text(encoding="utf-8"))
    document["components"]["schemas"]["LaunchRequest"] = launch_request_schema()
    return json.dumps(document, indent=2)


_NAME = r"(?P<name>[^/]+)"


def route_table(base_url: str) -> list[tuple[str, type[web.RequestHandler]]]:
    """The extension's routes under ``base_url``."""
    # lazy: jupyter-server-proxy's handlers, only once the routes are made
    from .dashboard_proxy import DashboardProxyHandler

    routes: list[tuple[str, type[web.RequestHandler]]] = [
        ("pools", PoolsHandler),
        (f"pools/{_NAME}", PoolHandler),
        (f"pools/{_NAME}/metrics", PoolMetricsHandler),
        (f"pools/{_NAME}/dashboard/(?P<path>.*)", DashboardProxyHandler),
        ("jobs", JobsHandler),
        (r"jobs/(?P<job_id>[^/]+)", JobHandler),
        (r"jobs/(?P<job_id>[^/]+)/where", JobWhereHandler),
        (r"jobs/(?P<job_id>[^/]+)/output", JobOutputHandler),
        (r"jobs/(?P<job_id>[^/]+)/metrics", JobMetricsHandler),
        (r"jobs/(?P<job_id>[^/]+)/lineage", JobLineageHandler),
        ("schedules", SchedulesHandler),
        (r"schedules/(?P<schedule_id>[^/]+)", ScheduleHandler),
        (r"schedules/(?P<schedule_id>[^/]+)/pause", SchedulePauseHandler),
        (r"schedules/(?P<schedule_id>[^/]+)/resume", ScheduleResumeHandler),
        ("changes", ChangesHandler),
        ("catalog", CatalogHandler),
        ("team", TeamHandler),
        ("quota", QuotaHandler),
        (r"openapi\.json", OpenApiHandler),
    ]
    return [(url_path_join(base_url, NAMESPACE, pattern) + "/?", handler) for pattern, handler in routes]
