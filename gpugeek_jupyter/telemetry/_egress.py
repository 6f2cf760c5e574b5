"""What a worker's host sends off the host: bytes sent over every interface but loopback.

dask's ``SystemMonitor`` reports ``host_net_io`` as psutil's total over every interface, loopback
included, so a one-host pool's all-reduce (gloo and NCCL over ``lo``, dask's own comms on
127.0.0.1) would read as traffic out of the machine. Same-host traffic addressed to the host's own
external address goes through ``lo`` too on Linux, so leaving ``lo`` out leaves out every byte
that stays on the host. :class:`EgressMeter` is added to the worker's heartbeat ``metrics``
(:data:`EGRESS_METRIC`) by the telemetry plugin's ``setup``, and the cost's network rows
(:mod:`gpugeek_jupyter.cost.usage`) read it instead of ``host_net_io``.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import psutil

EGRESS_METRIC = "gpugeek_egress"  # worker heartbeat metrics key: {"write_bps": float}

_ADDRESS_FAMILIES = (socket.AF_INET, socket.AF_INET6)


class _Sent(NamedTuple):
    at: float
    bytes_sent: int


def loopback_interfaces(addresses: Mapping[str, list[Any]]) -> set[str]:
    """The interfaces of ``psutil.net_if_addrs()`` that are loopback: named ``lo`` or with a
    loopback address (127.0.0.0/8, ::1) and no other IP address."""
    loopback = set()
    for nic, addrs in addresses.items():
        ips = [a.address.split("%")[0] for a in addrs if a.family in _ADDRESS_FAMILIES]
        if nic == "lo" or (ips and all(ipaddress.ip_address(ip).is_loopback for ip in ips)):
            loopback.add(nic)
    return loopback


def bytes_sent_off_host(counters: Mapping[str, Any], loopback: set[str]) -> int:
    """Bytes sent over the interfaces in ``counters`` (``psutil.net_io_counters(pernic=True)``)
    that are not in ``loopback``."""
    return sum(int(c.bytes_sent) for nic, c in counters.items() if nic not in loopback)


class EgressMeter:
    """Called by dask at each heartbeat (``Worker.metrics``): ``{"write_bps": rate}``, the bytes per
    second the host sent off the host since the previous call (0 on the first one)."""

    def __init__(
        self,
        counters: Callable[[], Mapping[str, Any]] = lambda: psutil.net_io_counters(pernic=True),
        addresses: Callable[[], Mapping[str, list[Any]]] = psutil.net_if_addrs,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._counters = counters
        self._addresses = addresses
        self._clock = clock
        self._last: _Sent | None = None

    def __call__(self, worker: Any = None) -> dict[str, float]:
        now = _Sent(self._clock(), bytes_sent_off_host(self._counters(), loopback_interfaces(self._addresses())))
        last, self._last = self._last, now
        if last is None or now.at <= last.at:
            return {"write_bps": 0.0}
        return {"write_bps": max(0, now.bytes_sent - last.bytes_sent) / (now.at - last.at)}
