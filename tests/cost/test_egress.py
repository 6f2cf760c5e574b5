"""Loopback and same-host traffic is never priced as egress: the meter counts every interface but lo."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from gpugeek_jupyter.telemetry._egress import EGRESS_METRIC, EgressMeter, loopback_interfaces
from gpugeek_jupyter.telemetry._worker import TelemetryPlugin

MB = 1_000_000


def _nic(sent: int) -> Any:
    return SimpleNamespace(bytes_sent=sent)


def _addr(family: socket.AddressFamily, address: str) -> Any:
    return SimpleNamespace(family=family, address=address)


ADDRESSES = {
    "lo": [_addr(socket.AF_INET, "127.0.0.1"), _addr(socket.AF_INET6, "::1")],
    "eth0": [_addr(socket.AF_INET, "10.0.0.5"), _addr(socket.AF_INET6, "fe80::1%eth0")],
    "lo2": [_addr(socket.AF_INET, "127.0.0.2")],  # a second loopback, by its address
}


class FakeCounters:
    """psutil.net_io_counters(pernic=True) as a test sets it."""

    def __init__(self) -> None:
        self.sent = {"lo": 0, "eth0": 0, "lo2": 0}

    def __call__(self) -> dict[str, Any]:
        return {nic: _nic(sent) for nic, sent in self.sent.items()}


def test_loopback_interfaces_are_lo_and_those_with_only_loopback_addresses() -> None:
    assert loopback_interfaces(ADDRESSES) == {"lo", "lo2"}


def test_the_rate_leaves_out_what_went_over_loopback() -> None:
    counters, now = FakeCounters(), iter([0.0, 2.0, 4.0])
    meter = EgressMeter(counters, lambda: ADDRESSES, clock=lambda: next(now))
    assert meter() == {"write_bps": 0.0}  # the first heartbeat has nothing to compare with
    counters.sent.update(lo=500 * MB, lo2=100 * MB, eth0=2 * MB)
    assert meter() == {"write_bps": pytest.approx(1 * MB)}  # 2 MB over 2 s; 600 MB on loopback left out
    counters.sent.update(lo=900 * MB)
    assert meter() == {"write_bps": 0.0}


@pytest.fixture
def loopback_sink() -> Iterator[socket.socket]:
    """A real TCP connection over 127.0.0.1 whose far end reads and drops everything."""
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    far, _ = server.accept()

    def drain() -> None:
        while far.recv(1 << 20):
            pass

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    yield client
    client.close()
    reader.join(timeout=10)
    far.close()
    server.close()


def test_real_loopback_traffic_reaches_psutils_total_but_not_the_egress(loopback_sink: socket.socket) -> None:
    now = iter([0.0, 1.0])
    meter = EgressMeter(clock=lambda: next(now))  # the real psutil counters; the rate over "1 s" is bytes
    total_before = psutil.net_io_counters().bytes_sent
    meter()
    loopback_sink.sendall(b"\\0" * (64 * MB))
    egress = meter()["write_bps"]
    total = psutil.net_io_counters().bytes_sent - total_before
    assert total >= 64 * MB  # what dask's host_net_io would have priced
    assert egress < 8 * MB, egress  # what else this host sent meanwhile, not the 64 MB


def test_the_telemetry_plugin_puts_the_meter_in_the_workers_heartbeat_metrics() -> None:
    worker = SimpleNamespace(metrics={})
    plugin = TelemetryPlugin(period=60.0)
    plugin.setup(worker)
    try:
        assert isinstance(worker.metrics[EGRESS_METRIC], EgressMeter)
        assert set(worker.metrics[EGRESS_METRIC](worker)) == {"write_bps"}
    finally:
        plugin.teardown(worker)
