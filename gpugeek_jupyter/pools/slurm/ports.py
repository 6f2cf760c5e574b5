"""The TCP ports a Slurm pool's scheduler, workers and nannies listen on: ``GpugeekConfig.slurm_ports``
(a range a site's firewall lets through), or ports the OS picks."""

from __future__ import annotations

import re

from ...config import get_config
from ...errors import BackendUnavailableError

_PORT_RANGE = re.compile(r"^(\d{1,5}):(\d{1,5})$")
MIN_PORTS = 3  # the scheduler, and a worker and its nanny on a node (the dashboard is on a Unix socket)


def port_range() -> tuple[int, int] | None:
    """``GpugeekConfig.slurm_ports`` as (first, last); None when unset (ports the OS picks)."""
    text = get_config().slurm_ports.strip()
    if not text:
        return None
    match = _PORT_RANGE.match(text)
    first, last = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    if not match or not 1024 <= first <= last <= 65535 or last - first + 1 < MIN_PORTS:
        raise BackendUnavailableError(
            f"GpugeekConfig.slurm_ports (GPUGEEK_SLURM_PORTS) must be FIRST:LAST, ports from 1024 to 65535, "
            f"at least {MIN_PORTS} of them, got {text!r} (e.g. '40000:40100')"
        )
    return first, last


def worker_port_args() -> list[str]:
    """``dask worker`` takes a range: each worker and nanny listens on the first free port in it."""
    ports = port_range()
    if ports is None:
        return []
    span = f"{ports[0]}:{ports[1]}"
    return ["--worker-port", span, "--nanny-port", span]


def free_port_in(ports: tuple[int, int], host: str) -> int:
    """The first port of the range that nothing on this host listens on now, for the scheduler (its
    dashboard takes no port: it is served on a Unix socket, :mod:`.private_http`)."""
    import socket

    for port in range(ports[0], ports[1] + 1):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host or "0.0.0.0", port))
            except OSError:
                continue
        return port
    raise BackendUnavailableError(
        f"GpugeekConfig.slurm_ports {ports[0]}:{ports[1]} has no free port on this host for the "
        f"scheduler (other pools or programs hold them); widen the range "
        f"(e.g. GPUGEEK_SLURM_PORTS={ports[0]}:{ports[1] + 100})"
    )
