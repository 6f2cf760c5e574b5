"""What several benchmarks share: a free loopback port, a torchrun launch like a user's, a timed median."""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_torchrun(script: Path, nproc: int = 2, timeout: float = 600) -> str:
    """``torchrun --nproc_per_node=N script`` on a free port, as a user runs it (OMP_NUM_THREADS left
    to torchrun); its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    torchrun = Path(sys.executable).with_name("torchrun")
    return subprocess.run(
        [str(torchrun), f"--nproc_per_node={nproc}", f"--master-port={free_port()}", str(script)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=timeout,
    ).stdout


def median_seconds(call: Callable[[], object], repeat: int, warmup: int = 3) -> float:
    """The median wall time of ``call()`` over ``repeat`` calls, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)
