"""Nothing of a local pool answers HTTP on a TCP port: its scheduler serves the dask dashboard on a
Unix socket in the owner's ``0700`` folder, which another user of the host cannot open, and its
workers' own HTTP servers do not listen at all. The dashboard is the owner's Jupyter server's route
(``tests/server/test_dashboard_proxy.py``); an ended pool has no link.
"""

from __future__ import annotations

import os
import socket
import ssl
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpugeek_jupyter.pools.scheduler_workers import connected_workers
from support.other_user import OtherUser

pytestmark = pytest.mark.slow

HTTP_GET = b"GET /json/identity.json HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"


def _listening_ports(pid: int) -> set[int]:
    return {c.laddr.port for c in psutil.Process(pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


@pytest.fixture
def pool_and_ports(registry_in_the_open: Path) -> Iterator[tuple[Any, dict[str, set[int]]]]:
    """A 2-worker pool (no job run yet) and the TCP ports each of its processes opened: this one
    (the scheduler and the nannies live here) and each worker."""
    import gpugeek_jupyter

    before = _listening_ports(os.getpid())
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="no-http")
    try:
        ports = {"scheduler and nannies": _listening_ports(os.getpid()) - before}
        for address, pid in pool.client.run(os.getpid).items():
            ports[f"worker {address}"] = _listening_ports(pid)
        yield pool, ports
    finally:
        if pool.status.is_live:
            pool.stop()


def _answer(port: int, context: ssl.SSLContext | None) -> bytes:
    """What a port answers an HTTP request with (plain, or inside TLS with ``context``); b'' when it
    answers nothing within a second or refuses the handshake."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as raw:
            stream = context.wrap_socket(raw) if context is not None else raw
            stream.sendall(HTTP_GET)
            return stream.recv(64)
    except (TimeoutError, ssl.SSLError, ConnectionError):
        return b""


def test_the_pools_processes_listen_on_their_dask_comms_only(pool_and_ports: tuple[Any, dict[str, set[int]]]) -> None:
    pool, ports = pool_and_ports
    workers = connected_workers(pool.client)
    expected = {
        "scheduler and nannies": {_port(pool.scheduler_address), *(_port(w["nanny"]) for w in workers.values())}
    }
    expected.update({f"worker {address}": {_port(address)} for address in workers})
    assert ports == expected  # no dashboard port, no worker HTTP port
    assert pool.client.scheduler_info()["services"] == {}
    assert all(info["services"] == {} for info in workers.values())


def test_no_tcp_port_of_the_pool_answers_http_even_to_its_owners_certificate(
    pool_and_ports: tuple[Any, dict[str, set[int]]],
) -> None:
    pool, ports = pool_and_ports
    owner = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    owner.check_hostname = False
    owner.verify_mode = ssl.CERT_NONE
    owner.load_cert_chain(pool.security.tls_client_cert, pool.security.tls_client_key)
    every_port = sorted(set().union(*ports.values()))
    assert len(every_port) == 5
    answers = {port: (_answer(port, None), _answer(port, owner)) for port in every_port}
    assert {port: b"HTTP/" in b"".join(both) for port, both in answers.items()} == dict.fromkeys(every_port, False)


def test_the_dashboard_is_a_socket_in_a_folder_only_its_owner_can_enter(registry_in_the_open: Path) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.pools.dashboard_socket import dashboard_socket_path

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=1, name="socket")
    try:
        path = dashboard_socket_path(pool.registry, pool.id)
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert (stat.S_IMODE(path.parent.stat().st_mode), stat.S_IMODE(path.stat().st_mode)) == (0o700, 0o600)
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))
            client.sendall(HTTP_GET)
            assert client.recv(12) == b"HTTP/1.1 200"  # the owner's own processes reach it
    finally:
        pool.stop()


def test_another_user_cannot_connect_to_the_dashboard_socket(registry_in_the_open: Path, other_user: OtherUser) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.pools.dashboard_socket import dashboard_socket_path

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=1, name="theirs")
    try:
        path = dashboard_socket_path(pool.registry, pool.id)
        path.parent.parent.chmod(0o755)  # as a shared registry folder is left: only the socket's own folder guards it
        tried = other_user.run(
            "import socket, sys\n"
            "client = socket.socket(socket.AF_UNIX)\n"
            "try:\n"
            f"    client.connect({str(path)!r})\n"
            "    print('connected')\n"
            "except OSError as e:\n"
            "    print(type(e).__name__)\n"
        )
        assert tried.returncode == 0, tried.stderr
        assert tried.stdout.strip() == "PermissionError"
    finally:
        pool.stop()


def test_a_socket_that_belongs_to_another_user_is_not_served(registry_in_the_open: Path, other_user: OtherUser) -> None:
    import pwd

    from server.test_routes import registered_pool

    from gpugeek_jupyter.errors import GpugeekError
    from gpugeek_jupyter.pools.dashboard_socket import owned_dashboard_socket, prepare_dashboard_socket
    from gpugeek_jupyter.store import get_registry

    registry = get_registry()
    record = registered_pool("planted")  # a live pool row, whose socket someone else put there
    path = prepare_dashboard_socket(registry, record.id)
    assert path is not None
    with socket.socket(socket.AF_UNIX) as planted:
        planted.bind(str(path))
        os.chown(path, pwd.getpwnam(other_user.name).pw_uid, -1)
        with pytest.raises(GpugeekError) as refused:
            owned_dashboard_socket(registry, record)
    assert "belongs to uid" in str(refused.value) and "\n" not in str(refused.value)


def test_a_stopped_pool_has_no_dashboard_link_and_no_socket(registry_in_the_open: Path) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.pools.dashboard_socket import dashboard_socket_path

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=1, name="ended")
    path = dashboard_socket_path(pool.registry, pool.id)
    assert pool.dashboard_link == "/gpugeek/pools/ended/dashboard/status" and path.exists()
    pool.stop()
    assert (pool.dashboard_link, "dashboard=None>" in repr(pool), path.exists()) == (None, True, False)


def test_the_dashboard_relays_to_no_other_host_or_port(registry_in_the_open: Path) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.pools.dashboard_socket import dashboard_socket_path

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=1, name="no-relay")
    try:
        worker_port = _port(pool.worker_addresses()[0])
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(dashboard_socket_path(pool.registry, pool.id)))
            client.sendall(f"GET /proxy/{worker_port}/127.0.0.1/status HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
            assert client.recv(12) == b"HTTP/1.1 404"  # dask's relay to worker dashboards is not served
    finally:
        pool.stop()


def test_a_socket_path_too_long_for_a_unix_socket_means_no_dashboard_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from gpugeek_jupyter.pools.dashboard_socket import MAX_SOCKET_PATH, prepare_dashboard_socket
    from gpugeek_jupyter.store import Registry

    deep = tmp_path / ("d" * (MAX_SOCKET_PATH - len(str(tmp_path))))
    registry = Registry(deep / "gpugeek.sqlite")
    with caplog.at_level("WARNING", logger="gpugeek_jupyter.pools.dashboard_socket"):
        assert prepare_dashboard_socket(registry, 1) is None
    assert "has no dashboard" in caplog.text and "GPUGEEK_REGISTRY" in caplog.text
