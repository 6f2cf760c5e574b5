"""Every route: authentication, XSRF, answers and error codes (pools here are registry rows)."""

from __future__ import annotations

import time
import urllib.parse
from http.cookies import SimpleCookie
from typing import Any

import pytest
from tornado import web

from gpugeek_jupyter import errors
from gpugeek_jupyter.catalog import load_catalog
from gpugeek_jupyter.pricing import prices_in_force
from gpugeek_jupyter.server.handlers import error_reply
from gpugeek_jupyter.spec import PoolSpec
from gpugeek_jupyter.store import PoolRecord, PoolStatus, Registry, get_registry

from .conftest import Fetch

ROUTES = [
    ("GET", ("pools",)),
    ("POST", ("pools",)),
    ("GET", ("pools", "dev")),
    ("DELETE", ("pools", "dev")),
    ("GET", ("pools", "dev", "metrics")),
    ("GET", ("jobs",)),
    ("GET", ("jobs", "job-1")),
    ("GET", ("jobs", "job-1", "output")),
    ("GET", ("jobs", "job-1", "metrics")),
    ("GET", ("changes",)),
    ("GET", ("catalog",)),
    ("GET", ("openapi.json",)),
]


def registered_pool(
    name: str, owner: str = "kernel 1234", namespace: str | None = None, registry: Registry | None = None
) -> PoolRecord:
    """A ready pool row as another process would write it (owned by this live process, so not lost)."""
    registry = registry or get_registry()
    spec = PoolSpec.create(gpu_type="cpu", count=2, backend="local", name=name)
    record = registry.add_pool(
        spec.name, spec.backend, spec.to_dict(), prices_in_force(spec), owner=owner, namespace=namespace
    )
    registry.set_pool_status(record.id, PoolStatus.READY, scheduler_address="tcp://127.0.0.1:9", dashboard_link=None)
    return registry.pool_by_id(record.id)


@pytest.mark.parametrize(("method", "parts"), ROUTES, ids=[f"{m} {'/'.join(p)}" for m, p in ROUTES])
async def test_every_route_refuses_a_request_without_credentials(
    api: Fetch, method: str, parts: tuple[str, ...]
) -> None:
    status, body = await api(method, *parts, body={} if method == "POST" else None, headers={"Authorization": ""})
    assert status == 403
    assert "token" in body["message"] or "_xsrf" in body["message"]  # a write without credentials fails XSRF first


@pytest.mark.parametrize(("method", "parts"), ROUTES, ids=[f"{m} {'/'.join(p)}" for m, p in ROUTES])
async def test_every_route_answers_json_with_the_token(api: Fetch, method: str, parts: tuple[str, ...]) -> None:
    status, body = await api(method, *parts, body={"count": 0} if method == "POST" else None)
    assert status in (200, 400, 404)  # no pool or job named here; the POST body is refused
    assert isinstance(body, dict)
    if status != 200:
        assert body["message"]


async def test_pools_lists_every_pool_whoever_made_it(api: Fetch) -> None:
    registered_pool("from-kernel", owner="kernel 5e1f")
    registered_pool("from-script", owner="pid 4242")
    status, body = await api("GET", "pools")
    assert status == 200
    by_name = {p["name"]: p for p in body["pools"]}
    assert set(by_name) == {"from-kernel", "from-script"}
    assert by_name["from-kernel"]["owner"] == "kernel 5e1f"
    assert by_name["from-script"]["status"] == "ready"


async def test_pools_marks_silent_owners_pools_lost(api: Fetch, isolated_registry: Any) -> None:
    an_hour_ago = time.time() - 3600.0
    long_ago = Registry(isolated_registry, clock=lambda: an_hour_ago)  # its heartbeats stopped an hour ago
    registered_pool("silent", registry=long_ago)
    status, body = await api("GET", "pools")
    (pool,) = body["pools"]
    assert (status, pool["status"]) == (200, "lost")
    assert "no heartbeat" in pool["reason"]


async def test_pools_shows_the_newest_pool_of_each_name(api: Fetch) -> None:
    old = registered_pool("dev")
    get_registry().set_pool_status(old.id, PoolStatus.STOPPED, reason="done")
    registered_pool("dev", owner="kernel new")
    _, body = await api("GET", "pools")
    assert [(p["name"], p["status"], p["owner"]) for p in body["pools"]] == [("dev", "ready", "kernel new")]


async def test_pools_filters_by_namespace(api: Fetch) -> None:
    registered_pool("team-a-pool", namespace="team-a")
    registered_pool("team-b-pool", namespace="team-b")
    _, body = await api("GET", "pools", params={"namespace": "team-b"})
    assert [p["name"] for p in body["pools"]] == ["team-b-pool"]


@pytest.mark.parametrize(
    ("method", "parts"),
    [
        ("GET", ("pools", "ghost")),
        ("DELETE", ("pools", "ghost")),
        ("GET", ("pools", "ghost", "metrics")),
        ("GET", ("jobs", "nope")),
    ],
)
async def test_unknown_names_answer_404_with_a_message(api: Fetch, method: str, parts: tuple[str, ...]) -> None:
    status, body = await api(method, *parts)
    assert status == 404
    assert parts[1] in body["message"]


async def test_delete_of_an_ended_pool_answers_it_as_it_is(api: Fetch) -> None:
    record = registered_pool("done")
    get_registry().set_pool_status(record.id, PoolStatus.FAILED, reason="scheduler died")
    status, body = await api("DELETE", "pools", "done")
    assert (status, body["pool"]["status"], body["pool"]["reason"]) == (200, "failed", "scheduler died")


async def test_metrics_say_why_there_are_no_samples(api: Fetch) -> None:
    registered_pool("quiet")  # registered with a scheduler address where nothing listens
    status, body = await api("GET", "pools", "quiet", "metrics")
    assert status == 200
    assert body["samples"] == [] and "scheduler does not answer" in body["reason"]


@pytest.mark.parametrize("since", ["yesterday", "-5", "inf", "nan", "1e12"])
async def test_metrics_since_must_be_a_time(api: Fetch, since: str) -> None:
    registered_pool("quiet")
    status, body = await api("GET", "pools", "quiet", "metrics", params={"since": since})
    assert status == 400, body
    assert body["message"] == (
        f'"since" must be a time in seconds since the epoch, got "{since}" (e.g. ?since=1796000000)'
    )


async def test_jobs_are_listed_and_fetched_by_id(api: Fetch) -> None:
    record = registered_pool("busy")
    get_registry().add_job("job-7", record.id, record.name, "torchrun", "ef" * 32, ranks=2, hyperparams={"lr": 0.01})
    status, listed = await api("GET", "jobs")
    assert status == 200
    assert [j["id"] for j in listed["jobs"]] == ["job-7"]
    status, one = await api("GET", "jobs", "job-7")
    assert status == 200
    assert (
        one["job"]["pool"] == "busy" and one["job"]["hyperparams"] == {"lr": 0.01} and one["job"]["status"] == "running"
    )
    assert one["job"]["usd"] == 0  # the pool has no worker running: nothing to pay for yet


async def test_a_running_jobs_usd_is_what_its_pools_workers_cost_since_it_started(api: Fetch) -> None:
    registry = get_registry()
    spec = PoolSpec.create(gpu_type="cpu", count=2, backend="local", name="priced", price=36.0)  # 0.01 USD/s a worker
    record = registry.add_pool(spec.name, spec.backend, spec.to_dict(), prices_in_force(spec), owner="kernel 1234")
    registry.set_pool_status(record.id, PoolStatus.READY, scheduler_address="tcp://127.0.0.1:9", dashboard_link=None)
    started = time.time() - 60
    for worker in ("0", "1"):
        registry.open_worker_interval(record.id, worker, "on_demand", started_at=started - 600)  # before the job
    registry.add_job("job-8", record.id, record.name, "cell", "ef" * 32, ranks=2)
    with registry._write() as db:  # the job started a minute ago
        db.execute("UPDATE jobs SET started_at = ? WHERE id = ?", (started, "job-8"))
    status, one = await api("GET", "jobs", "job-8")
    assert status == 200
    # 2 workers x 60 s x 0.01 USD/s, plus the seconds the request took; the 10 minutes before it are not the job's
    assert one["job"]["usd"] == pytest.approx(1.2, abs=0.1), one["job"]


async def test_queued_jobs_are_listed_with_their_place_in_the_queue_and_no_cost_yet(api: Fetch) -> None:
    import os
    import socket

    from gpugeek_jupyter.store import Submitter, process_started_at

    record = registered_pool("shared")
    me = Submitter("notebook a.ipynb", os.getpid(), socket.gethostname(), process_started_at(os.getpid()))
    for job_id in ("job-a", "job-b", "job-c"):
        get_registry().queue_job(job_id, record.id, record.name, "cell", "ef" * 32, 2, me)
    status, listed = await api("GET", "jobs")
    assert status == 200
    by_id = {j["id"]: j for j in listed["jobs"]}
    assert [(by_id[j]["status"], by_id[j]["position"]) for j in ("job-a", "job-b", "job-c")] == [
        ("running", None),
        ("queued", 1),
        ("queued", 2),
    ]
    assert by_id["job-c"]["usd"] == 0 and by_id["job-c"]["duration_s"] == 0
    assert by_id["job-c"]["submitter"] == "notebook a.ipynb" and by_id["job-c"]["waited_s"] >= 0
    status, one = await api("GET", "jobs", "job-c")
    assert status == 200 and one["job"]["position"] == 2


async def test_catalog_lists_gpu_types_with_prices_backends_and_defaults(api: Fetch) -> None:
    status, body = await api("GET", "catalog")
    assert status == 200
    by_name = {g["name"]: g for g in body["gpu_types"]}
    assert set(by_name["A100-80GB"]) == {"name", "memory_gb", "interconnects", "prices", "on_this_machine"}
    assert set(by_name["A100-80GB"]["prices"]) == {"on_demand", "spot", "reserved"}
    assert set(body["backends"]) == {"local", "kubernetes", "address", "slurm"}
    assert body["defaults"]["backend"] == "local"


async def test_the_catalog_says_how_many_of_each_gpu_type_this_machine_has_for_a_local_pool(api: Fetch) -> None:
    from gpugeek_jupyter.devices import select_visible
    from gpugeek_jupyter.nvml import discover_gpus

    _, body = await api("GET", "catalog")
    found = discover_gpus()
    usable = select_visible(found.devices)
    assert body["gpus_here"] == found.describe()
    catalog = load_catalog()
    for gpu in body["gpu_types"]:
        kind = catalog.gpu(gpu["name"])
        expected = None if kind.is_cpu else sum(kind.matches_nvml_name(d.name) for d in usable)
        assert gpu["on_this_machine"] == expected, gpu["name"]
    by_name = {g["name"]: g for g in body["gpu_types"]}
    assert by_name["cpu"]["on_this_machine"] is None  # a cpu pool has no device limit
    if not usable:  # this machine (no NVIDIA driver): every GPU type is marked as not here
        assert all(g["on_this_machine"] == 0 for g in body["gpu_types"] if g["name"] != "cpu")


class TestServerConfig:
    @pytest.fixture
    def jp_server_config(self) -> dict[str, Any]:
        return {
            "ServerApp": {"jpserver_extensions": {"gpugeek_jupyter": True}},
            "GpugeekConfig": {"idle_timeout_minutes": 45.0, "default_backend": "address"},
        }

    async def test_catalog_defaults_follow_the_servers_gpugeek_config(self, api: Fetch) -> None:
        _, body = await api("GET", "catalog")
        assert (body["defaults"]["idle_timeout"], body["defaults"]["backend"]) == (45.0, "address")


async def test_launch_with_a_bad_value_is_400_naming_the_field(api: Fetch) -> None:
    status, body = await api("POST", "pools", body={"gpu_type": "cpu", "count": 0, "backend": "local"})
    assert (status, body["field"]) == (400, "count")
    assert body["message"] == '"count" must be a whole number from 1 to 1024, got 0 (e.g. "count": 4)'
    status, body = await api("POST", "pools", body={"gpu_type": "Z80", "count": 1})
    assert (status, body["field"]) == (400, "gpu_type")


async def test_launch_with_a_live_pools_name_is_409(api: Fetch) -> None:
    registered_pool("taken")
    status, body = await api("POST", "pools", body={"gpu_type": "cpu", "count": 1, "backend": "local", "name": "taken"})
    assert status == 409
    assert 'a pool named "taken" is already running (stop it with DELETE /gpugeek/pools/taken' in body["message"]


# -- XSRF: Jupyter exempts token-authenticated requests; cookie-authenticated writes need it -------
async def login_cookies(jp_fetch: Any, token: str) -> dict[str, str]:
    """Log in through /login as a browser does; returns the cookies (login and _xsrf)."""
    page = await jp_fetch("login", headers={"Authorization": ""}, raise_error=False)
    cookies = _cookies(page.headers.get_list("Set-Cookie"))
    form = urllib.parse.urlencode({"password": token, "_xsrf": cookies["_xsrf"]})
    answer = await jp_fetch(
        "login",
        method="POST",
        body=form,
        headers={"Authorization": "", "Cookie": _cookie_header(cookies)},
        follow_redirects=False,
        raise_error=False,
    )
    assert answer.code == 302, answer.body
    cookies.update(_cookies(answer.headers.get_list("Set-Cookie")))
    assert any(name.startswith("username-") for name in cookies)
    return cookies


def _cookies(headers: list[str]) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    for header in headers:
        jar.load(header)
    return {name: morsel.value for name, morsel in jar.items()}


def _cookie_header(cookies: dict[str, str]) -> str:
    return "; ".join(f"{k}={v}" for k, v in cookies.items())


@pytest.mark.parametrize(("method", "parts"), [("POST", ("pools",)), ("DELETE", ("pools", "ghost"))])
async def test_cookie_authenticated_writes_need_the_xsrf_token(
    api: Fetch, jp_fetch: Any, jp_serverapp: Any, method: str, parts: tuple[str, ...]
) -> None:
    cookies = await login_cookies(jp_fetch, jp_serverapp.identity_provider.token)
    headers = {"Authorization": "", "Cookie": _cookie_header(cookies)}
    body = {"count": 0} if method == "POST" else None
    status, refused = await api(method, *parts, body=body, headers=dict(headers))
    assert status == 403
    assert "_xsrf" in refused["message"]
    status, _ = await api(method, *parts, body=body, headers={**headers, "X-XSRFToken": cookies["_xsrf"]})
    assert status == (400 if method == "POST" else 404)  # past authentication and XSRF, to the route itself


async def test_cookie_authenticated_reads_need_no_xsrf_token(api: Fetch, jp_fetch: Any, jp_serverapp: Any) -> None:
    cookies = await login_cookies(jp_fetch, jp_serverapp.identity_provider.token)
    status, body = await api("GET", "pools", headers={"Authorization": "", "Cookie": _cookie_header(cookies)})
    assert (status, body) == (200, {"pools": []})


def test_error_reply_answers_each_error_class_with_its_http_status() -> None:
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.GpugeekError)]
    assert len(classes) > 5
    for cls in classes:
        assert error_reply(cls("one line")) == (cls.http_status, {"message": "one line", "field": None})
    assert error_reply(errors.SpecError("bad count", field="count")) == (
        400,
        {"message": "bad count", "field": "count"},
    )
    assert error_reply(web.HTTPError(403, "%s", "'_xsrf' missing")) == (
        403,
        {"message": "'_xsrf' missing", "field": None},
    )
    status, reply = error_reply(KeyError("spec"))
    assert status == 500 and "KeyError" in reply["message"]
