"""Fixtures for the server extension: a Jupyter server with gpugeek_jupyter enabled, per test.

pytest-jupyter's server plugin is loaded by tests/conftest.py (pytest accepts ``pytest_plugins`` only there).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from gpugeek_jupyter.server.settings import SERVICE_SETTING, WRITES_EXECUTOR_SETTING


@pytest.fixture(autouse=True)
def fast_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pool workers skip the torch warm-up import: these tests run no torch jobs."""
    monkeypatch.setenv("GPUGEEK_PRELOAD_TORCH", "0")


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"gpugeek_jupyter": True}}}


@pytest.fixture
def jp_serverapp(jp_serverapp: Any) -> Iterator[Any]:
    """The server, and afterwards the pools it launched stopped (Jupyter gives module extensions no stop hook)."""
    yield jp_serverapp
    settings = jp_serverapp.web_app.settings
    if SERVICE_SETTING in settings:  # absent when the server refused its registry
        settings[SERVICE_SETTING].shutdown(timeout=60)
        settings[WRITES_EXECUTOR_SETTING].shutdown(wait=True)


Fetch = Callable[..., Awaitable[tuple[int, dict[str, Any]]]]


@pytest.fixture
def api(jp_fetch: Any) -> Fetch:
    """``await api("GET", "pools")`` -> (status, JSON body), without raising on HTTP errors."""

    async def call(
        method: str, *parts: str, body: Any = None, raw: bytes | None = None, **kwargs: Any
    ) -> tuple[int, dict[str, Any]]:
        if raw is None and body is not None:
            raw = json.dumps(body).encode()
        if method in ("POST", "PUT") and raw is None:
            raw = b""
        response = await jp_fetch("gpugeek", *parts, method=method, body=raw, raise_error=False, **kwargs)
        return response.code, json.loads(response.body or b"null")

    return call
