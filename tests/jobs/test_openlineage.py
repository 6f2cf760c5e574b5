"""OpenLineage run events of jobs, through the OpenLineage client: to a file of JSON lines, to a real
HTTP endpoint on this host (the client's HTTP transport, as it posts to Marquez), and to one that
refuses (the job is unchanged, one notice)."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpugeek_jupyter.jobs import run_cell

pytest.importorskip("openlineage.client", reason="the OpenLineage client: pip install 'gpugeek-jupyter[openlineage]'")

TRAINS = """
import torch
frame = open(gg.dataset(data)).read()
ckpt = gg.checkpoint(folder, model=torch.nn.Linear(2, 1))
ckpt.save(1)
"""


@pytest.fixture
def target(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from gpugeek_jupyter import config

    def use(value: str) -> None:
        monkeypatch.setenv("GPUGEEK_OPENLINEAGE", value)
        config.set_config(None)

    yield use
    monkeypatch.delenv("GPUGEEK_OPENLINEAGE", raising=False)
    config.set_config(None)


def test_a_job_is_a_start_and_a_complete_event_with_its_data_and_checkpoints(
    pool: Any, target: Any, tmp_path: Path
) -> None:
    events_file = tmp_path / "lineage" / "events.jsonl"
    target(str(events_file))
    data = tmp_path / "train.csv"
    data.write_text("x,y\n1,2\n")
    folder = tmp_path / "ckpt"
    ok = run_cell(pool, TRAINS, {"data": str(data), "folder": str(folder)}, timeout=120)
    failed = run_cell(pool, "raise ValueError('bad batch')", {}, timeout=120)
    assert ok.ok and not failed.ok, ok.report()
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    assert [e["eventType"] for e in events] == ["START", "COMPLETE", "START", "FAIL"]
    start, complete = events[0], events[1]
    assert start["run"]["runId"] == complete["run"]["runId"] != events[2]["run"]["runId"]
    assert (complete["job"]["namespace"], complete["job"]["name"]) == ("gpugeek-jupyter", "jobs.cell")
    assert complete["run"]["facets"]["processing_engine"]["name"] == f"gpugeek {ok.job_id}"
    [read] = complete["inputs"]
    assert (read["namespace"], read["name"]) == ("file", str(data))
    assert read["facets"]["version"]["datasetVersion"] == hashlib.sha256(data.read_bytes()).hexdigest()
    [wrote] = complete["outputs"]
    assert (wrote["namespace"], wrote["name"]) == ("file", str(folder / "step-000000001.pt"))
    assert "ValueError: bad batch" in events[3]["run"]["facets"]["errorMessage"]["message"]


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, dict[str, Any]]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, json.loads(body)))
        self.send_response(201)
        self.end_headers()

    def log_message(self, *args: Any) -> None:  # quiet
        pass


def test_events_go_to_a_lineage_server_and_one_that_refuses_leaves_the_job_unchanged(
    pool: Any, target: Any, tmp_path: Path
) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        target(f"http://127.0.0.1:{server.server_address[1]}")
        script = tmp_path / "train.py"
        script.write_text("print('step')\n")
        from gpugeek_jupyter.jobs import run_script

        result = run_script(pool, str(script), timeout=120)
        assert result.ok, result.report()
    finally:
        server.shutdown()
        server.server_close()
    assert [(path, event["eventType"], event["job"]["name"]) for path, event in _Collector.received] == [
        ("/api/v1/lineage", "START", "jobs.train.py"),
        ("/api/v1/lineage", "COMPLETE", "jobs.train.py"),
    ]
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    target(f"http://127.0.0.1:{closed}")
    notices: list[str] = []
    refused = run_cell(pool, "7", {}, on_notice=notices.append, timeout=120)
    assert refused.ok and refused.values == [7, 7]
    said = [n for n in notices if n.startswith("OpenLineage:")]
    assert len(said) == 1 and refused.job_id in said[0] and "were not sent" in said[0], notices
