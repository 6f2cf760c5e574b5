"""The ranks' tqdm bars drawn as widgets in a real IPython kernel (started with jupyter_client).

The kernel launches a 2-worker cpu pool with the magic and runs a cell on it through
``run_cell(..., on_progress=progress_display("all", 2))``; the test reads the kernel's iopub
messages: a FloatProgress widget per rank whose last value is its max, and no ``\\r`` text.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.kernel import KernelSession

pytestmark = pytest.mark.slow

JOB_CELL = """
import gpugeek_jupyter
import gpugeek_jupyter.jobs
import gpugeek_jupyter.widgets.progress
from gpugeek_jupyter.jobs.output import LabelledWriter

source = "import time\\nfrom tqdm import tqdm\\nfor _ in tqdm(range(50), desc='train'):\\n    time.sleep(0.02)\\n"
result = gpugeek_jupyter.jobs.run_cell(
    gpugeek_jupyter.current_pool(),
    source,
    {},
    on_output=LabelledWriter(),
    on_progress=gpugeek_jupyter.widgets.progress.progress_display("all", 2),
)
print("job ok:", result.ok)
"""


@pytest.fixture
def kernel(isolated_registry: Path) -> Iterator[KernelSession]:
    session = KernelSession(env={"GPUGEEK_REGISTRY": str(isolated_registry)})
    try:
        launched = session.run("%load_ext gpugeek_jupyter\n%gpugeek_launch --gpu-type cpu --count 2 --name bars")
        assert launched.error is None, launched.text
        yield session
    finally:
        session.run("%gpugeek_stop bars", timeout=60)
        session.shutdown()


def run_recording(kernel: KernelSession, code: str, timeout: float = 120.0) -> tuple[str, list[dict[str, Any]]]:
    """Run ``code``; its stream text (stdout and stderr) and every iopub message while it ran."""
    msg_id = kernel.execute(code)
    streams, seen = "", []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kernel.client.get_iopub_msg(timeout=1.0)
        except queue.Empty:
            continue
        seen.append(msg)
        kind, content = msg["msg_type"], msg["content"]
        mine = msg["parent_header"].get("msg_id") == msg_id
        if mine and kind == "stream":
            streams += content["text"]
        elif mine and kind == "error":
            raise AssertionError(f"{content['ename']}: {content['evalue']}\n{streams}")
        elif mine and kind == "status" and content["execution_state"] == "idle":
            return streams, seen
    raise TimeoutError(f"cell did not finish within {timeout} s; streams so far:\n{streams}")


def widget_states(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each widget's state as the frontend would hold it: comm_open's, then every update applied."""
    states: dict[str, dict[str, Any]] = {}
    for msg in messages:
        content = msg["content"]
        if msg["msg_type"] == "comm_open" and content.get("target_name") == "jupyter.widget":
            states[content["comm_id"]] = dict(content["data"]["state"])
        elif msg["msg_type"] == "comm_msg" and content["data"].get("method") == "update":
            states.setdefault(content["comm_id"], {}).update(content["data"]["state"])
    return states


def test_a_two_rank_tqdm_loop_draws_one_widget_bar_per_rank_ending_at_100_percent(kernel: KernelSession) -> None:
    streams, messages = run_recording(kernel, JOB_CELL)
    assert "job ok: True" in streams, streams
    assert "\r" not in streams and "train" not in streams  # no bar text reached the notebook
    shown = [m for m in messages if m["msg_type"] == "display_data"]
    assert any("application/vnd.jupyter.widget-view+json" in m["content"]["data"] for m in shown)
    states = widget_states(messages)
    bars = {cid: s for cid, s in states.items() if s.get("_model_name") == "FloatProgressModel"}
    assert len(bars) == 2, states
    for bar in bars.values():
        assert bar["value"] == bar["max"] == 50.0 and bar["bar_style"] == "success", bar
    updates = [
        m
        for m in messages
        if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] in bars and "value" in m["content"]["data"]["state"]
    ]
    assert len(updates) >= 4, f"{len(updates)} value updates: the bars did not move while the job ran"
    labels = sorted(
        s["value"] for s in states.values() if s.get("_model_name") == "HTMLModel" and "[rank" in s.get("value", "")
    )
    assert labels == ["<code>train [rank 0]</code>", "<code>train [rank 1]</code>"]
