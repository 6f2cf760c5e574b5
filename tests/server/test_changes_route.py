"""``GET /gpugeek/changes``: the long poll that tells the panel a pool or job changed, at once."""

from __future__ import annotations

import asyncio
import time

from gpugeek_jupyter.store import PoolStatus, get_registry

from .conftest import Fetch
from .test_routes import registered_pool


async def test_a_stop_ends_a_waiting_request_within_half_a_second(api: Fetch) -> None:
    record = registered_pool("watched")
    status, first = await api("GET", "changes")  # no token yet: answered at once
    assert status == 200 and first["token"]

    async def stop_soon() -> float:
        await asyncio.sleep(0.5)
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: get_registry().set_pool_status(record.id, PoolStatus.STOPPING)
        )
        return time.monotonic()

    stopping = asyncio.ensure_future(stop_soon())
    status, changed = await api("GET", "changes", params={"since": first["token"], "wait": "20"})
    answered = time.monotonic()
    assert status == 200 and changed["token"] != first["token"]
    assert answered - await stopping < 0.5  # a quarter-second check, not the 20 s wait


async def test_an_unchanged_registry_answers_the_same_token_after_the_wait(api: Fetch) -> None:
    registered_pool("quiet")
    _, first = await api("GET", "changes")
    get_registry().heartbeat([get_registry().latest_pool("quiet").id])  # liveness is not a change
    started = time.monotonic()
    status, same = await api("GET", "changes", params={"since": first["token"], "wait": "1"})
    assert status == 200 and same == first and time.monotonic() - started >= 1.0


async def test_a_job_that_starts_and_ends_between_two_checks_changes_the_token(api: Fetch) -> None:
    record = registered_pool("jobs")
    _, first = await api("GET", "changes")
    registry = get_registry()
    registry.add_job("job-quick", record.id, record.name, "cell", "0" * 64, 2)
    registry.set_job_status("job-quick", "succeeded", ended_at=time.time())
    _, after = await api("GET", "changes", params={"since": first["token"], "wait": "0"})
    assert after["token"] != first["token"]


async def test_a_bad_wait_is_a_400_naming_it_and_an_example(api: Fetch) -> None:
    status, body = await api("GET", "changes", params={"wait": "600"})
    assert status == 400 and body["field"] == "wait"
    assert body["message"] == '"wait" must be a whole number of seconds from 0 to 60, got "600" (e.g. ?wait=25)'
