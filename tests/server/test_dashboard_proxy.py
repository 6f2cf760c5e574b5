"""A pool's dask dashboard through the Jupyter server's proxy, behind the user's Jupyter login."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from support.lab_server import start_lab

pytestmark = pytest.mark.slow


def test_the_dashboard_is_served_through_the_proxy_to_a_logged_in_user_only(tmp_path: Path) -> None:
    server = start_lab(tmp_path / "home", tmp_path / "gpugeek.sqlite")
    try:
        status, answer = server.call("POST", "gpugeek/pools", {"gpu_type": "cpu", "count": 1, "name": "dash"})
        assert status == 201, answer
        deadline = time.monotonic() + 120
        while True:
            _, answer = server.call("GET", "gpugeek/pools/dash")
            pool = answer["pool"]
            if pool["status"] == "ready":
                break
            assert time.monotonic() < deadline and pool["status"] == "starting", pool
            time.sleep(0.5)
        path = pool["dashboard_path"]
        port = pool["dashboard_link"].split(":")[-1].split("/")[0]
        assert path == f"proxy/{port}/status", pool
        page = server.api(path, timeout=30).decode(errors="replace")
        assert "Bokeh" in page or "bokeh" in page, page[:400]

        class NoRedirects(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: object, **kwargs: object) -> None:
                return None  # a redirect is the answer

        anonymous = urllib.request.build_opener(NoRedirects)
        with pytest.raises(urllib.error.HTTPError) as refused:  # no token: sent to the login page, not served
            anonymous.open(f"{server.url}/{path}", timeout=30)
        assert refused.value.code in (302, 401, 403), refused.value.code
        assert "login" in (refused.value.headers.get("Location") or "login"), refused.value.headers
        server.call("DELETE", "gpugeek/pools/dash")
    finally:
        server.stop()
