"""Schedules through REST: POST /gpugeek/schedules records one (the agent starts), GET lists it with
its next run, pause/resume/DELETE act on it; bad bodies are one line naming the field, in JSON."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.agent import agent_stopped_afterwards

from .conftest import Fetch

BAD_BODIES = [
    ({"every": "1d"}, 400, '"script_path" must be given: the script each run runs (e.g. "script_path": "train.py")'),
    (
        {"script_path": "SCRIPT", "every": "soon"},
        400,
        '"every" must be an interval such as 10s, 30m, 2h, 1d or 1w (units combine: 1h30m), got "soon" '
        '(e.g. "every": "1d")',
    ),
    (
        {"script_path": "SCRIPT", "cron": "0 2 * * *", "timezone": "Mars/Olympus"},
        400,
        '"timezone" must be an IANA time zone name, got "Mars/Olympus" (e.g. "timezone": "Europe/Berlin")',
    ),
    (
        {"script_path": "SCRIPT", "every": "1d", "pool": "gone"},
        404,
        'no running pool named "gone" for the schedule (launch it with POST /gpugeek/pools {"keep": true}, or '
        'give "gpu_type" and "count" for a pool made for each run)',
    ),
    ({"script_path": "SCRIPT", "every": "1d", "when": "daily"}, 400, 'unknown field "when" in the schedule'),
]


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('update')\n")
    return path


@pytest.mark.parametrize(("body", "code", "start"), BAD_BODIES, ids=[str(b) for b, _, _ in BAD_BODIES])
async def test_a_bad_schedule_body_is_one_line_naming_the_field(
    api: Fetch, script: Path, body: dict[str, Any], code: int, start: str
) -> None:
    body = {k: str(script) if v == "SCRIPT" else v for k, v in body.items()}
    status, reply = await api("POST", "schedules", body=body)
    assert status == code and reply["message"].startswith(start), reply
    assert "\n" not in reply["message"]


async def test_an_unknown_schedule_is_a_404_naming_it(api: Fetch) -> None:
    status, reply = await api("GET", "schedules", "sched-00000000")
    assert status == 404 and reply["message"] == 'no schedule "sched-00000000" (GET /gpugeek/schedules lists them)'


@pytest.fixture
def agent(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("GPUGEEK_AGENT_IDLE", "60")
    with agent_stopped_afterwards():
        yield


@pytest.mark.slow
async def test_a_schedule_made_through_rest_is_listed_with_its_next_run_paused_resumed_and_deleted(
    api: Fetch, script: Path, agent: None
) -> None:
    body = {"script_path": str(script), "cron": "0 2 * * *", "timezone": "Europe/Berlin", "name": "nightly"}
    body |= {"gpu_type": "cpu", "count": 2, "budget": 1}
    status, reply = await api("POST", "schedules", body=body)
    assert status == 201, reply
    made = reply["schedule"]
    assert (made["name"], made["status"], made["when"]) == ("nightly", "active", "cron '0 2 * * *' (Europe/Berlin)")
    assert made["pool_spec"]["count"] == 2 and made["pool_spec"]["budget"] == 1
    assert time.time() < made["next_run_at"] <= time.time() + 86400 and made["runs"] == []

    status, listing = await api("GET", "schedules")
    assert status == 200 and [s["id"] for s in listing["schedules"]] == [made["id"]]
    status, paused = await api("POST", "schedules", "nightly", "pause", body={})
    assert status == 200 and (paused["schedule"]["status"], paused["schedule"]["next_run_at"]) == ("paused", None)
    status, resumed = await api("POST", "schedules", made["id"], "resume", body={})
    assert status == 200 and resumed["schedule"]["status"] == "active"
    status, deleted = await api("DELETE", "schedules", made["id"])
    assert status == 200 and deleted["schedule"]["status"] == "deleted"
    status, listing = await api("GET", "schedules")
    assert listing["schedules"] == []
