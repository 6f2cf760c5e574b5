"""A local pool only its owner can reach: another user of the host is refused at the TLS handshake,
and cannot read the registry or the pool's credentials; the owner's other processes attach as before.

Another user here is ``nobody``, run with ``runuser``. It cannot execute the venv's interpreter (under
the owner's home), so it runs ``/usr/bin/python3``: with the standard library only for a raw TLS
handshake, and with a readable copy of ``distributed`` (the ``readable_dask`` fixture) for a real dask
``Client``.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpugeek_jupyter.pools.scheduler_workers import connected_workers
from support.other_user import OtherUser

pytestmark = pytest.mark.slow

# A TLS client that checks nothing of the server (the strongest stranger) and presents no certificate
# unless given one; says how far it got: 'accepted' means the server took the connection.
RAW_HANDSHAKE = """
import json, socket, ssl, sys
results = {}
for address in json.loads(sys.argv[1]):
    host, port = address.split("://")[1].rsplit(":", 1)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if len(sys.argv) > 2:
        context.load_cert_chain(sys.argv[2], sys.argv[3])
    try:
        with socket.create_connection((host, int(port)), timeout=5) as raw:
            with context.wrap_socket(raw) as tls:
                tls.settimeout(2)
                try:
                    data = tls.recv(1)  # TLS 1.3: a refused client certificate arrives as an alert here
                    results[address] = "closed" if not data else "accepted"
                except socket.timeout:
                    results[address] = "accepted"  # handshake done and the server waits for a message
    except ssl.SSLError as e:
        results[address] = "refused: " + (e.reason or str(e))
    except OSError as e:
        results[address] = "refused: " + type(e).__name__
print(json.dumps(results))
"""

# A real dask Client as another user: without credentials, with a certificate of its own, over plain TCP.
DASK_CLIENT = """
import json, os, sys
from distributed import Client
from distributed.security import Security
address = sys.argv[1]
attempts = {
    "no credentials": (address, {}),
    "a certificate of its own": (address, {"security": Security.temporary()}),
    "plain tcp": (address.replace("tls://", "tcp://"), {}),
}
results = {}
for label, (where, kwargs) in attempts.items():
    try:
        client = Client(where, timeout=5, set_as_default=False, **kwargs)
    except Exception as e:
        results[label] = "refused: " + type(e).__name__ + ": " + str(e)[:300]
    else:
        results[label] = "connected, ran as uid " + str(sorted(set(client.run(os.getuid).values())))
        client.close()
print(json.dumps(results))
"""


@pytest.fixture
def tls_pool(registry_in_the_open: Path) -> Iterator[Any]:
    import gpugeek_jupyter

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="private")
    yield pool
    if pool.status.is_live:
        pool.stop()


def _listening_addresses(pool: Any) -> list[str]:
    """The scheduler's, every worker's and every nanny's address."""
    workers = connected_workers(pool.client)
    nannies = [info["nanny"] for info in workers.values() if info.get("nanny")]
    return [pool.scheduler_address, *workers, *nannies]


def _run_json(user: OtherUser, code: str, *args: str) -> dict[str, str]:
    result = user.run(f"import sys; sys.argv[1:] = {list(args)!r}\n" + code, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    answer: dict[str, str] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


def test_another_users_tls_client_without_the_pools_certificate_is_refused_at_the_handshake(
    tls_pool: Any, other_user: OtherUser
) -> None:
    addresses = _listening_addresses(tls_pool)
    assert len(addresses) == 5 and all(a.startswith("tls://127.0.0.1:") for a in addresses)
    credentials = tls_pool.security
    owner = _run_json(
        OtherUser("root", other_user.python),
        RAW_HANDSHAKE,
        json.dumps(addresses),
        credentials.tls_client_cert,
        credentials.tls_client_key,
    )
    assert set(owner.values()) == {"accepted"}, owner  # the same handshake with the pool's certificate passes

    stranger = _run_json(other_user, RAW_HANDSHAKE, json.dumps(addresses))
    assert {a: r.startswith("refused") for a, r in stranger.items()} == dict.fromkeys(addresses, True), stranger
    assert "TLSV13_ALERT_CERTIFICATE_REQUIRED" in stranger[tls_pool.scheduler_address], stranger


def test_another_users_dask_client_cannot_run_code_on_the_pool(tls_pool: Any, readable_dask: OtherUser) -> None:
    assert tls_pool.client.run(os.getuid)  # the owner's client works
    results = _run_json(readable_dask, DASK_CLIENT, tls_pool.scheduler_address)
    assert {label: r.startswith("refused") for label, r in results.items()} == dict.fromkeys(results, True), results
    # a certificate of its own gets no further than the TLS handshake: the pool's CA signed nothing of nobody's
    assert "TLS certificate does not match" in results["a certificate of its own"], results


def test_another_user_cannot_read_the_registry_or_the_pools_credentials(tls_pool: Any, other_user: OtherUser) -> None:
    from gpugeek_jupyter.pools.credentials import credentials_root

    registry_path = tls_pool.registry.path
    root = credentials_root(tls_pool.registry)
    files = sorted(p for p in registry_path.parent.rglob("*") if p.is_file())
    key_files = [p for p in files if p.suffix == ".pem"]
    assert {p.name for p in key_files} == {"ca.pem", "cert.pem", "key.pem"}
    assert {p.name for p in files} >= {registry_path.name, registry_path.name + "-wal"}
    # the registry's folder is shared like /tmp (sticky, the one open folder accepted) and left so;
    # what gpugeek makes in it is 0700 and 0600
    assert stat.S_IMODE(registry_path.parent.stat().st_mode) == 0o1777
    for directory in (root, *root.iterdir()):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    for file in files:
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
    readings = _run_json(
        other_user,
        """
import json, sys
results = {}
for path in json.loads(sys.argv[1]):
    try:
        results[path] = "read %d bytes" % len(open(path, "rb").read())
    except OSError as e:
        results[path] = type(e).__name__
print(json.dumps(results))
""",
        json.dumps([str(p) for p in files]),
    )
    assert readings == {str(p): "PermissionError" for p in files}


def test_the_credentials_go_with_the_pool(tls_pool: Any) -> None:
    from gpugeek_jupyter.pools.credentials import credentials_root

    directory = credentials_root(tls_pool.registry) / str(tls_pool.id)
    assert (directory / "key.pem").is_file()
    tls_pool.stop()
    assert not directory.exists()


def test_a_pool_without_tls_is_plain_tcp_when_configured(
    registry_in_the_open: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter import config
    from gpugeek_jupyter.pools.credentials import credentials_root
    from gpugeek_jupyter.store import get_registry

    monkeypatch.setenv("GPUGEEK_POOL_TLS", "0")
    config.set_config(None)
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=1, name="plain")
    try:
        assert pool.scheduler_address.startswith("tcp://")
        assert not credentials_root(get_registry()).exists()
    finally:
        pool.stop()


def test_attaching_to_a_tls_address_without_tls_settings_names_what_is_missing(
    registry_in_the_open: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.errors import BackendUnavailableError

    for variable in [v for v in os.environ if v.startswith("DASK_DISTRIBUTED__COMM__TLS")]:
        monkeypatch.delenv(variable)
    with pytest.raises(BackendUnavailableError) as raised:
        gpugeek_jupyter.launch(backend="address", address="tls://127.0.0.1:1", count=1, name="theirs")
    message = str(raised.value)
    assert "\n" not in message
    assert "distributed.comm.tls.ca-file, distributed.comm.tls.client.cert are not set" in message, message


def test_a_tls_pool_is_attached_by_address_with_the_users_own_dask_tls_settings(
    tls_pool: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpugeek_jupyter
    from support.tls import client_tls_config

    with client_tls_config(tls_pool.security):
        attached = gpugeek_jupyter.launch(backend="address", address=tls_pool.scheduler_address, count=2, name="mine")
        try:
            assert sorted(attached.client.run(os.getpid)) == sorted(tls_pool.client.run(os.getpid))
        finally:
            attached.stop()


def test_dasks_security_loader_finds_a_pools_credentials_by_its_address(tls_pool: Any) -> None:
    import dask
    from distributed import Client

    loader = "gpugeek_jupyter.pools.credentials.security_loader"
    with dask.config.set({"distributed.client.security-loader": loader}):
        with Client(tls_pool.scheduler_address, set_as_default=False, timeout=10) as client:
            assert sorted(client.run(os.getpid)) == sorted(tls_pool.client.run(os.getpid))
