"""A pool's dask dashboard through the Jupyter server's own route, behind the user's Jupyter login.

The pool's scheduler runs in another process of the same user (here the test, as a kernel would) and
serves its dashboard on a Unix socket only; the server relays ``gpugeek/pools/<name>/dashboard/``
to it, pages and bokeh websockets alike.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

from support.lab_server import LabServer, start_lab

from .conftest import Fetch
from .test_routes import registered_pool

POOL = "dash"
ROUTE = f"gpugeek/pools/{POOL}/dashboard"


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # a redirect is the answer


@pytest.fixture
def kernels_pool_and_server(isolated_registry: Path, tmp_path: Path) -> Iterator[tuple[Any, LabServer]]:
    """A 2-worker pool launched by this process (as a kernel would), and the same user's Jupyter
    server on its registry."""
    import gpugeek_jupyter

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name=POOL)
    server = start_lab(tmp_path / "home", isolated_registry)
    try:
        yield pool, server
    finally:
        server.stop()
        pool.stop()


def _get(server: LabServer, path: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"token {token}"} if token else {}
    request = urllib.request.Request(f"{server.url}/{path}", headers=headers)
    try:
        with urllib.request.build_opener(NoRedirects).open(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, (e.headers.get("Location") or "").encode()


async def _bokeh_first_message(server: LabServer, session_token: str, token: str | None) -> str:
    """What the dashboard's status page's websocket receives first, opened as the page would."""
    headers = {"Authorization": f"token {token}"} if token else {}
    request = HTTPRequest(f"ws://127.0.0.1:{server.port}/{ROUTE}/status/ws", headers=headers)
    connection = await websocket_connect(request, subprotocols=["bokeh", session_token])
    try:
        return str(await asyncio.wait_for(connection.read_message(), 30))
    finally:
        connection.close()


@pytest.mark.slow
def test_the_dashboard_its_pages_and_its_websocket_answer_through_the_owners_server_route(
    kernels_pool_and_server: tuple[Any, LabServer],
) -> None:
    pool, server = kernels_pool_and_server
    assert pool.dashboard_link == f"/{ROUTE}/status"
    _, answer = server.call("GET", f"gpugeek/pools/{POOL}")
    assert (answer["pool"]["dashboard_link"], answer["pool"]["dashboard_path"]) == (f"{ROUTE}/status",) * 2

    status, page = _get(server, f"{ROUTE}/status", server.token)
    assert status == 200 and b"bokeh" in page.lower(), page[:400]
    status, identity = _get(server, f"{ROUTE}/json/identity.json", server.token)
    assert status == 200 and json.loads(identity)["id"] == pool.client.scheduler_info()["id"]
    status, workers = _get(server, f"{ROUTE}/info/main/workers.html", server.token)
    assert status == 200 and workers.count(b"tls://127.0.0.1:") >= 2, workers[:400]
    assert _get(server, f"{ROUTE}/", server.token) == (
        301,
        f"/{ROUTE}/status".encode(),
    )  # the redirect stays under the route

    session = re.search(rb'"token":\s*"([^"]+)"', page)
    assert session, "the status page carries no bokeh session token"
    first = asyncio.run(_bokeh_first_message(server, session.group(1).decode(), server.token))
    assert json.loads(first)["msgtype"] == "ACK", first


async def test_a_visitor_without_a_login_gets_the_login_page_not_the_dashboard(api: Fetch, jp_fetch: Any) -> None:
    registered_pool(POOL)
    response = await jp_fetch(
        *ROUTE.split("/"), "status", headers={"Authorization": ""}, follow_redirects=False, raise_error=False
    )
    assert response.code == 302 and "login" in response.headers["Location"], (response.code, response.headers)


async def test_a_websocket_without_a_login_is_refused(jp_ws_fetch: Any) -> None:
    registered_pool(POOL)
    with pytest.raises(HTTPClientError) as refused:
        await jp_ws_fetch(*ROUTE.split("/"), "status", "ws", headers={"Authorization": ""})
    assert refused.value.code == 403


async def test_the_route_of_a_pool_that_serves_no_dashboard_here_is_not_found(jp_fetch: Any) -> None:
    registered_pool(POOL)  # a live row, as a Kubernetes pool or an attached scheduler has: no socket
    response = await jp_fetch(*ROUTE.split("/"), "status", raise_error=False)
    assert response.code == 404
    assert b"serves no dashboard here" in response.body, response.body[:400]


async def test_the_route_of_no_live_pool_is_not_found(jp_fetch: Any) -> None:
    response = await jp_fetch(*ROUTE.split("/"), "status", raise_error=False)
    assert response.code == 404
    assert b"no running pool named" in response.body, response.body[:400]


async def test_the_route_relays_no_method_but_get_and_head(jp_fetch: Any) -> None:
    registered_pool(POOL)
    response = await jp_fetch(*ROUTE.split("/"), "status", method="POST", body=b"", raise_error=False)
    assert response.code == 405
