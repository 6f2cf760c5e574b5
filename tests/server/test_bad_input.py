"""Generated bad input on every write route: always a 4xx with a message, never a 500 or a launch.

Hypothesis drives a real server over HTTP from a worker thread while the test's event loop serves
the requests.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpugeek_jupyter.catalog import load_catalog
from gpugeek_jupyter.server.launch_request import LAUNCH_FIELDS
from gpugeek_jupyter.spec import NAME_PATTERN
from gpugeek_jupyter.store import get_registry

EXAMPLES = 60
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "container"


@st.composite
def wrongly_typed_field(draw: st.DrawFn) -> tuple[str, Any]:
    """One known field with a value of a JSON type it does not take."""
    key = draw(st.sampled_from(sorted(LAUNCH_FIELDS)))
    kind, nullable, _ = LAUNCH_FIELDS[key]
    value = draw(json_values.filter(lambda v: not (_kind(v) == kind or (v is None and nullable))))
    return key, value


catalog_names = {name.lower() for name in load_catalog().names()}
out_of_range_values: dict[str, st.SearchStrategy[Any]] = {
    "count": st.integers(max_value=0)
    | st.integers(min_value=1025)
    | st.floats(0.01, 1000).filter(lambda f: not f.is_integer()),
    "spot_fraction": st.floats(max_value=-1e-9, allow_nan=False) | st.floats(min_value=1.000001, allow_infinity=False),
    "budget": st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False),
    "idle_timeout": st.integers(max_value=-1),
    "price": st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False),
    "gpu_type": st.text(min_size=1, max_size=12).filter(lambda t: t.strip().lower() not in catalog_names | {""}),
    "backend": st.text(min_size=1, max_size=12).filter(
        lambda t: t.strip().lower() not in ("local", "kubernetes", "address", "")
    ),
    "name": st.text(min_size=1, max_size=70).filter(lambda t: t.strip() != "" and not NAME_PATTERN.match(t.strip())),
    "interconnect": st.text(min_size=1, max_size=12).filter(lambda t: t.strip().lower() not in ("pcie", "ethernet")),
    "framework": st.text(min_size=1, max_size=12).filter(lambda t: not t.startswith("PyTorch")),
    "address": st.text(min_size=1, max_size=20),  # any address with the local backend is refused
    "base_pricing": st.text(min_size=1, max_size=12).filter(
        lambda t: t.strip().lower().replace("-", "_") not in ("on_demand", "reserved", "")
    ),
}


@st.composite
def out_of_range_field(draw: st.DrawFn) -> tuple[str, Any]:
    """One field of the right JSON type whose value breaks a rule (gpu_type cpu, backend local)."""
    key = draw(st.sampled_from(sorted(out_of_range_values)))
    return key, draw(out_of_range_values[key])


def _not_a_json_object(raw: bytes) -> bool:
    try:
        return not isinstance(json.loads(raw.decode("utf-8")), dict)
    except (UnicodeDecodeError, ValueError):
        return True


malformed_bodies = (
    st.binary(max_size=40)
    | st.text(max_size=40).map(str.encode)
    | json_values.map(lambda v: json.dumps(v).encode())
    | st.sampled_from([b"{", b'{"count": 1', b"[]", b"null", b'"cpu"', b"{'count': 1}", b'{"count": 1,}'])
).filter(_not_a_json_object)


class Server:
    """Blocking HTTP calls to the test server (for use off its event loop)."""

    def __init__(self, port: int, base_url: str, token: str) -> None:
        self.root = f"http://127.0.0.1:{port}{base_url}gpugeek/"
        self.token = token

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(self.root + path, data=body, method=method)
        request.add_header("Authorization", f"token {self.token}")
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())


@pytest.fixture
def server(jp_fetch: Any, jp_serverapp: Any, jp_http_port: int, jp_base_url: str) -> Server:
    """The test server, listening (``jp_fetch`` starts its HTTP server)."""
    return Server(jp_http_port, jp_base_url, jp_serverapp.identity_provider.token)


async def run_off_loop(check: Callable[[], None]) -> None:
    await asyncio.to_thread(check)


def launch(server: Server, body: Any) -> tuple[int, dict[str, Any]]:
    return server.call("POST", "pools", json.dumps(body).encode())


def assert_refused(status: int, reply: dict[str, Any], field: str | None) -> None:
    assert status == 400, (status, reply)
    assert isinstance(reply["message"], str) and reply["message"] and "\n" not in reply["message"]
    assert reply["field"] == field


def no_pool_was_registered() -> None:
    assert get_registry().list_pools() == []


async def test_wrongly_typed_launch_fields_are_400_naming_the_field(server: Server) -> None:
    @SETTINGS
    @given(wrongly_typed_field())
    def check(field_and_value: tuple[str, Any]) -> None:
        key, value = field_and_value
        status, reply = launch(server, {"gpu_type": "cpu", key: value} if key != "gpu_type" else {key: value})
        assert_refused(status, reply, key)
        assert key in reply["message"]

    await run_off_loop(check)
    no_pool_was_registered()


async def test_launch_values_that_break_a_rule_are_400_naming_the_field(server: Server) -> None:
    @SETTINGS
    @given(out_of_range_field())
    def check(field_and_value: tuple[str, Any]) -> None:
        key, value = field_and_value
        status, reply = launch(server, {"backend": "local", key: value} if key != "backend" else {key: value})
        assert_refused(status, reply, key)

    await run_off_loop(check)
    no_pool_was_registered()


async def test_unknown_launch_fields_are_400_naming_the_field(server: Server) -> None:
    @SETTINGS
    @given(st.text(min_size=1, max_size=20).filter(lambda k: k not in LAUNCH_FIELDS), json_values)
    def check(key: str, value: Any) -> None:
        status, reply = launch(server, {key: value})
        assert_refused(status, reply, key)

    await run_off_loop(check)
    no_pool_was_registered()


async def test_malformed_launch_bodies_are_400_with_a_message(server: Server) -> None:
    @SETTINGS
    @given(malformed_bodies)
    def check(raw: bytes) -> None:
        status, reply = server.call("POST", "pools", raw)
        assert_refused(status, reply, None)

    await run_off_loop(check)
    no_pool_was_registered()


async def test_stopping_names_that_were_never_pools_is_404_with_a_message(server: Server) -> None:
    @SETTINGS
    @given(st.text(min_size=1, max_size=40), st.one_of(st.none(), malformed_bodies))
    def check(name: str, raw: bytes | None) -> None:
        quoted = urllib.request.quote(name, safe="")
        status, reply = server.call("DELETE", f"pools/{quoted}", raw)
        assert status == 404, (status, reply)
        assert reply["message"]

    await run_off_loop(check)
