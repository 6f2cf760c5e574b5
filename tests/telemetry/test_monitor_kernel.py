"""``%gpugeek_monitor`` in a real IPython kernel started with jupyter_client.

The panel must move while a cell is still running: its update thread streams into the bokeh data
sources and the kernel sends those patches to the frontend before the busy cell finishes. The busy
cell runs a long blocking computation on the pool through ``pool.client`` (``%%gpugeek_run`` is
tested with ``--monitor`` where it is defined).
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.kernel import KernelSession

pytestmark = pytest.mark.slow


@pytest.fixture
def kernel(isolated_registry: Path) -> Iterator[KernelSession]:
    session = KernelSession(
        env={
            "GPUGEEK_REGISTRY": str(isolated_registry),
            "GPUGEEK_TELEMETRY_PERIOD": "0.2",
            "GPUGEEK_PRELOAD_TORCH": "0",
        }
    )
    try:
        loaded = session.run("%load_ext gpugeek_jupyter")
        assert loaded.error is None, loaded.text
        launched = session.run(
            "import gpugeek_jupyter\npool = gpugeek_jupyter.launch(gpu_type='cpu', count=2, name='mon')"
        )
        assert launched.error is None, launched.text
        yield session
    finally:
        session.run("pool.stop()", timeout=60)
        session.shutdown()


def _run_recording_comm_traffic(
    kernel: KernelSession, code: str, timeout: float = 60.0
) -> tuple[str, list[dict[str, Any]], str]:
    """Run ``code``; return its stdout, the comm messages seen while it ran, and its error text."""
    msg_id = kernel.execute(code)
    stdout, error, comms, running = "", "", [], False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kernel.client.get_iopub_msg(timeout=1.0)
        except queue.Empty:
            continue
        kind, content = msg["msg_type"], msg["content"]
        mine = msg["parent_header"].get("msg_id") == msg_id
        if mine and kind == "execute_input":
            running = True
        elif running and kind == "comm_msg":
            comms.append(content)
        elif mine and kind == "stream" and content["name"] == "stdout":
            stdout += content["text"]
        elif mine and kind == "error":
            error = f"{content['ename']}: {content['evalue']}"
        elif mine and kind == "status" and content["execution_state"] == "idle":
            return stdout, comms, error
    raise TimeoutError(f"cell did not finish within {timeout} s")


def test_the_panel_streams_while_a_long_cell_is_still_running(kernel: KernelSession) -> None:
    shown = kernel.run("%gpugeek_monitor")
    assert shown.error is None, shown.text
    kinds = [next(iter(d)) if len(d) == 1 else sorted(d) for d in shown.displays]
    # BokehJS is put into the page first (the widget draws with it), then the panel
    loader = [i for i, d in enumerate(shown.displays) if "application/vnd.bokehjs_load.v0+json" in d]
    panel = [i for i, d in enumerate(shown.displays) if "application/vnd.jupyter.widget-view+json" in d]
    assert loader and panel and loader[0] < panel[0], kinds
    again = kernel.run("%gpugeek_monitor")  # once per kernel
    assert not any("application/vnd.bokehjs_load.v0+json" in d for d in again.displays), again.displays

    stdout, comms, error = _run_recording_comm_traffic(
        kernel,
        "import time, json\n"
        "from gpugeek_jupyter.widgets.monitor import open_monitors\n"
        "panel = open_monitors()[-1]\n"
        "before = sum(panel.source_lengths().values())\n"
        "pool.client.submit(time.sleep, 3, pure=False).result()  # blocks this cell for 3 s\n"
        "after = sum(panel.source_lengths().values())\n"
        "print(json.dumps({'before': before, 'after': after}))\n",
    )
    assert not error, error
    counts = json.loads(stdout.strip().splitlines()[-1])
    assert counts["after"] >= counts["before"] + 2 * 5  # 2 workers, ~15 samples each were due
    patches = [c for c in comms if c.get("data", {}).get("content", {}).get("msg") == "patch"]
    streamed = [c for c in patches if "ColumnsStreamed" in str(c["data"]["content"].get("payload", ""))]
    print(f"during the busy cell: {counts}, {len(comms)} comm messages, {len(streamed)} streamed patches")
    assert len(streamed) >= 5, f"{len(comms)} comm messages, {len(patches)} patches, {len(streamed)} streams"


def test_the_panel_under_a_running_gpugeek_run_cell_grows_while_the_job_runs(kernel: KernelSession) -> None:
    stdout, comms, error = _run_recording_comm_traffic(
        kernel,
        "%%gpugeek_run --monitor --rank0 -o grew\nimport time\ntime.sleep(3)\nrank\n",
    )
    assert not error, error
    patches = [c for c in comms if "ColumnsStreamed" in str(c.get("data", {}).get("content", {}).get("payload", ""))]
    assert len(patches) >= 3, f"{len(comms)} comm messages, {len(patches)} streamed patches while the job ran"
    assert kernel.run("print(grew)").stdout.strip() == "0"


def test_table_mode_shows_the_latest_numbers_and_the_no_gpu_reason(kernel: KernelSession) -> None:
    from gpugeek_jupyter.nvml import discover_gpus

    table = kernel.run("%gpugeek_monitor --table")
    assert table.error is None, table.text
    text = table.text
    assert "worker_name" in text and "cpu_pct" in text and "rss_bytes" in text
    if not discover_gpus().devices:
        assert "NVML library not found" in text


def test_an_unknown_bokehjs_source_is_a_one_line_usage_error() -> None:
    session = KernelSession(env={"GPUGEEK_BOKEHJS": "from-the-moon", "GPUGEEK_PRELOAD_TORCH": "0"})
    try:
        session.run("%load_ext gpugeek_jupyter\n%gpugeek_launch --gpu-type cpu --count 1 --name bokehjs")
        shown = session.run("%gpugeek_monitor")
        assert shown.stderr.strip() == (
            "UsageError: GPUGEEK_BOKEHJS must be inline or cdn, got 'from-the-moon' (e.g. GPUGEEK_BOKEHJS=cdn)"
        ), shown.text
    finally:
        session.shutdown()


def test_bad_options_are_one_line_usage_errors(kernel: KernelSession) -> None:
    # IPython shows a magic's UsageError as one line on stderr, without a traceback
    bad_period = kernel.run("%gpugeek_monitor --period 0")
    assert bad_period.stderr.strip() == (
        "UsageError: --period must be a number of seconds from 0.05 to 3600, got '0' (e.g. --period 0.5)"
    )
    no_pool = kernel.run("%gpugeek_monitor --pool nosuchpool")
    lines = no_pool.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("UsageError: ") and "nosuchpool" in lines[0], no_pool.text
