"""The notebook's interrupt button, through a real ipykernel, stops a job on every worker."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Any]:
    from jupyter_client import KernelManager

    env = dict(os.environ, GPUGEEK_REGISTRY=str(tmp_path / "registry.sqlite"), PYTHONPATH=str(REPO))
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(env=env, cwd=str(tmp_path))
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    yield manager, client
    client.stop_channels()
    manager.shutdown_kernel(now=False)


def execute(
    client: Any, code: str, timeout: float = 120.0, until: str | None = None
) -> tuple[str, dict[str, Any], str]:
    """Run ``code``; returns (msg_id, reply, text shown). With ``until``, returns as soon as that text is shown.

    ``stop_on_error=False``: a cell that fails must not make the kernel drop the next one.
    """
    msg_id = client.execute(code, stop_on_error=False)
    shown = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            message = client.get_iopub_msg(timeout=0.5)
        except Exception:
            continue
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        content = message["content"]
        if message["msg_type"] == "stream":
            shown += content["text"]
        elif message["msg_type"] in ("execute_result", "error"):
            shown += str(content.get("data", {}).get("text/plain", "")) + content.get("ename", "")
        if until is not None and until in shown:
            return msg_id, {}, shown
        if message["msg_type"] == "status" and content["execution_state"] == "idle":
            return msg_id, client.get_shell_msg(timeout=10)["content"], shown
    raise AssertionError(f"no answer to {code!r} within {timeout} s; shown: {shown!r}")


def wait_reply(client: Any, msg_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            reply = client.get_shell_msg(timeout=0.2)
        except Exception:
            continue
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply["content"]
    raise AssertionError(f"no reply within {timeout} s")


def launch_pool(client: Any) -> None:
    """The extension loaded and a 2-worker cpu pool launched in the kernel, as ``pool``."""
    _, reply, _ = execute(
        client,
        "%load_ext gpugeek_jupyter\nimport gpugeek_jupyter\n"
        "pool = gpugeek_jupyter.launch(gpu_type='cpu', count=2, name='kernel-pool')",
    )
    assert reply["status"] == "ok", reply


@pytest.mark.timeout(240)
def test_kernel_interrupt_stops_the_job_within_5s_and_the_next_cell_runs(kernel: Any) -> None:
    manager, client = kernel
    launch_pool(client)
    spin = "%%gpugeek_run\nimport torch\nt = torch.ones(1)\nprint('spinning', flush=True)\nwhile True:\n    dist.all_reduce(t)\n"
    msg_id, _, _ = execute(client, spin, until="[rank 1] spinning")

    interrupted_at = time.monotonic()
    manager.interrupt_kernel()
    reply = wait_reply(client, msg_id, timeout=30)
    stopped_after = time.monotonic() - interrupted_at
    assert reply["status"] == "error" and reply["ename"] == "JobInterrupted", reply
    assert stopped_after < 5.0, f"the job took {stopped_after:.1f} s to stop"

    _, reply, shown = execute(client, "%%gpugeek_run\nrank")
    assert reply["status"] == "ok" and "[0, 1]" in shown
    _, reply, shown = execute(client, "[j.status.value for j in gpugeek_jupyter.ClusterClient().jobs()]")
    assert "['succeeded', 'cancelled']" in shown
    execute(client, "pool.stop()")


@pytest.mark.timeout(240)
def test_an_interrupt_between_collectives_keeps_the_ranks_names(kernel: Any) -> None:
    """As IPython keeps a notebook's names across an interrupt: ranks stopped in step (past the same
    all_reduce, both in ``time.sleep``) keep their warm group, and what their cells assigned."""
    manager, client = kernel
    launch_pool(client)
    _, reply, _ = execute(client, "%%gpugeek_run\nimport torch\nweights = torch.full((1,), float(rank))")
    assert reply["status"] == "ok", reply
    waiting = "%%gpugeek_run\nimport time\ndist.all_reduce(weights)\nprint('reduced', flush=True)\nwhile True:\n    time.sleep(0.1)\n"
    msg_id, _, _ = execute(client, waiting, until="[rank 1] reduced")
    manager.interrupt_kernel()
    reply = wait_reply(client, msg_id, timeout=30)
    assert reply["status"] == "error" and reply["ename"] == "JobInterrupted", reply
    _, reply, shown = execute(client, "%%gpugeek_run\nweights.item()")
    assert reply["status"] == "ok" and "[1.0, 1.0]" in shown, shown
    execute(client, "pool.stop()")
