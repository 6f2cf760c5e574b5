"""A real IPython kernel, started with jupyter_client, for testing magics as a user meets them."""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager

REPO = Path(__file__).resolve().parents[2]


@dataclass
class CellResult:
    stdout: str = ""
    stderr: str = ""
    error: dict[str, Any] | None = None  # ename, evalue, traceback of an execute error
    displays: list[dict[str, Any]] = field(default_factory=list)  # display_data / execute_result bundles
    status: str = ""

    @property
    def text(self) -> str:
        """Everything a user would read: streams, plain-text displays and the error."""
        parts = [self.stdout, self.stderr]
        parts += [d.get("text/plain", "") for d in self.displays]
        if self.error:
            parts.append(f"{self.error['ename']}: {self.error['evalue']}")
        return "\n".join(p for p in parts if p)


class KernelSession:
    """Start a python3 kernel with the test's environment; run cells; shut it down."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        kernel_env = dict(os.environ)
        kernel_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), kernel_env.get("PYTHONPATH", "")]))
        kernel_env.update(env or {})
        self.manager = KernelManager(kernel_name="python3")
        # jupyter_client runs a kernelspec's "python" as sys.executable: the kernel uses this venv
        self.manager.start_kernel(env=kernel_env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)
        self.messages: list[dict[str, Any]] = []  # every iopub message seen (comm/widget state included)
        self.killed = False

    @property
    def pid(self) -> int:
        return self.manager.provisioner.process.pid  # type: ignore[union-attr]

    def execute(self, code: str, timeout: float = 120.0) -> str:
        """Send a cell without waiting; returns the message id (collect with ``collect``)."""
        return self.client.execute(code, allow_stdin=False)

    def collect(self, msg_id: str, timeout: float = 120.0) -> CellResult:
        result = CellResult()
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"cell did not finish within {timeout} s; output so far:\n{result.text}")
            try:
                msg = self.client.get_iopub_msg(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            self.messages.append(msg)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    result.stdout += content["text"]
                else:
                    result.stderr += content["text"]
            elif kind in ("display_data", "execute_result", "update_display_data"):
                result.displays.append(content["data"])
            elif kind == "error":
                result.error = {
                    "ename": content["ename"],
                    "evalue": content["evalue"],
                    "traceback": content["traceback"],
                }
            elif kind == "status" and content["execution_state"] == "idle":
                return result

    def run(self, code: str, timeout: float = 120.0) -> CellResult:
        return self.collect(self.execute(code), timeout)

    def shutdown(self) -> None:
        if self.killed:  # nothing left to shut down (kill() cleaned up)
            return
        try:
            self.client.stop_channels()
        finally:
            if self.manager.has_kernel:
                self.manager.shutdown_kernel(now=False)

    def kill(self) -> None:
        """SIGKILL the kernel process, as the OOM killer or `kill -9` would."""
        import os
        import signal

        os.kill(self.pid, signal.SIGKILL)
        self._gone()

    def wait_for_exit(self, timeout: float = 120.0) -> int:
        """Wait for the kernel process to end by itself (a cell that killed it); its exit status."""
        status = self.manager.provisioner.process.wait(timeout=timeout)  # type: ignore[union-attr]
        self._gone()
        return int(status)

    def _gone(self) -> None:
        self.killed = True
        self.client.stop_channels()
        self.manager.cleanup_resources()


@contextmanager
def magics_kernel(
    env: dict[str, str] | None = None, *, launch: str | None = None, stop: str | None = None, timeout: float = 240
) -> Iterator[KernelSession]:
    """A real kernel with ``%load_ext gpugeek_jupyter`` run; with ``launch`` (the options of a
    ``%gpugeek_launch`` line) a pool launched in it first, and with ``stop`` (a pool's name) that
    pool stopped at the end. Either failing fails the test with the cell's text."""
    session = KernelSession(env=env)
    try:
        loaded = session.run("%load_ext gpugeek_jupyter", timeout=60)
        assert loaded.error is None, loaded.text
        if launch is not None:
            launched = session.run(f"%gpugeek_launch {launch}", timeout=timeout)
            assert launched.error is None, launched.text
        yield session
        if stop is not None:
            session.run(f"%gpugeek_stop {stop}", timeout=60)
    finally:
        session.shutdown()


@contextmanager
def pool_kernel(
    tmp_path_factory: Any, name: str, count: int = 2, options: str = "", env: dict[str, str] | None = None
) -> Iterator[KernelSession]:
    """:func:`magics_kernel` with a registry of its own (a fresh temporary folder) and a cpu pool of
    ``count`` workers named ``name`` (more ``%gpugeek_launch`` options in ``options``), stopped at the end."""
    registry = tmp_path_factory.mktemp(name) / "registry.sqlite"
    launch = f"--gpu-type cpu --count {count} --name {name} --quiet {options}".rstrip()
    with magics_kernel({**(env or {}), "GPUGEEK_REGISTRY": str(registry)}, launch=launch, stop=name) as session:
        yield session
