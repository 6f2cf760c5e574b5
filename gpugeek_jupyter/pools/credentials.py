"""Per-pool TLS credentials: only the launching user's processes can talk to a pool.

At launch each pool gets its own certificate authority and one certificate signed by it, which
its scheduler, nannies, workers and every client present (dask's mutual TLS,
``distributed.security.Security`` with ``require_encryption=True``); the CA's private key is
dropped once the certificate is signed, so nothing else can ever be admitted. A connection
without the pool's certificate is refused at the TLS handshake, and scheduler addresses are
``tls://``.

The files live beside the registry, by pool id, so that the same user's other kernels, scripts
and Jupyter server find them::

    <registry dir>/gpugeek-credentials/<pool id>/ca.pem, cert.pem, key.pem     (0600, dirs 0700)

Only their paths ever appear in reprs, logs or the registry, never their contents. They are
removed when the pool stops; those of pools that ended otherwise (a killed kernel) are removed at
the next launch.

To connect a dask ``Client`` of your own: ``Client(pool.scheduler_address, security=pool.security)``,
or, for any process of this user, let dask find them by address::

    dask.config.set({"distributed.client.security-loader": "gpugeek_jupyter.pools.credentials.security_loader"})
"""

from __future__ import annotations

import datetime
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import GpugeekError, Phrase, Value
from ..store import (
    PoolRecord,
    Registry,
    check_private_directory,
    check_private_file,
    make_private_directory,
    write_private_file,
)

if TYPE_CHECKING:
    from distributed.security import Security

log = logging.getLogger(__name__)

CREDENTIALS_DIRECTORY = "gpugeek-credentials"
CA_FILE, CERT_FILE, KEY_FILE = "ca.pem", "cert.pem", "key.pem"
VALID_DAYS = 365
TLS_SCHEME = "tls://"


@dataclass(frozen=True)
class PoolCredentials:
    """Where one pool's TLS files are (never what they hold).

    >>> pool_credentials(registry, pool.id).security()   # doctest: +SKIP
    Security(require_encryption=True, tls_ca_file=Local (.../gpugeek-credentials/7/ca.pem), ...)
    """

    directory: Path

    @property
    def ca_file(self) -> Path:
        return self.directory / CA_FILE

    @property
    def cert_file(self) -> Path:
        return self.directory / CERT_FILE

    @property
    def key_file(self) -> Path:
        return self.directory / KEY_FILE

    def files(self) -> dict[str, bytes]:
        """The three files' contents by name (``ca.pem``, ``cert.pem``, ``key.pem``), for a
        Kubernetes Secret: handle as the key it holds, never log or print it."""
        return {path.name: path.read_bytes() for path in (self.ca_file, self.cert_file, self.key_file)}

    def security(self) -> Security:
        """dask's ``Security`` for every role (client, scheduler, worker), encryption required."""
        from distributed.security import Security

        cert, key = str(self.cert_file), str(self.key_file)
        return Security(
            require_encryption=True,
            tls_ca_file=str(self.ca_file),
            tls_client_cert=cert,
            tls_client_key=key,
            tls_scheduler_cert=cert,
            tls_scheduler_key=key,
            tls_worker_cert=cert,
            tls_worker_key=key,
        )


def credentials_root(registry: Registry) -> Path:
    """The directory of every pool's credentials, beside ``registry``'s file."""
    return registry.path.parent / CREDENTIALS_DIRECTORY


def _pool_directory(registry: Registry, pool_id: int) -> Path:
    return credentials_root(registry) / str(int(pool_id))


def create_pool_credentials(registry: Registry, pool_id: int, pool_name: str) -> PoolCredentials:
    """A new CA and certificate for pool ``pool_id``, written ``0600`` into a ``0700`` directory.

    Anything left there under that id (a registry file made anew restarts ids) is replaced.
    """
    root = make_private_directory(credentials_root(registry))
    directory = root / str(int(pool_id))
    if directory.exists():
        shutil.rmtree(directory)
    make_private_directory(directory)
    ca_pem, cert_pem, key_pem = _issue(pool_name)
    write_private_file(directory / CA_FILE, ca_pem)
    write_private_file(directory / KEY_FILE, key_pem)
    write_private_file(directory / CERT_FILE, cert_pem)
    return PoolCredentials(directory)


def _issue(pool_name: str) -> tuple[bytes, bytes, bytes]:
    """(CA certificate, certificate, its private key) as PEM; the CA's key is not kept.

    ECDSA P-256: a key in well under a millisecond (an RSA-2048 key takes ~30 ms here).
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=VALID_DAYS)
    label = "".join(c if c.isalnum() or c in "-_." else "-" for c in pool_name)[:40] or "pool"
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"gpugeek pool {label} CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"gpugeek pool {label}")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("dask-internal")]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return ca.public_bytes(serialization.Encoding.PEM), cert.public_bytes(serialization.Encoding.PEM), key_pem


def pool_credentials(registry: Registry, pool_id: int) -> PoolCredentials | None:
    """Pool ``pool_id``'s credentials, or None when it has none here; checked (and repaired) private.

    Raises GpugeekError when they belong to another user.
    """
    directory = _pool_directory(registry, pool_id)
    try:
        info = directory.stat()
    except FileNotFoundError:
        return None
    except PermissionError as e:
        raise GpugeekError(f"the pool's TLS credentials in {directory} cannot be read by this user: {e}") from e
    if info.st_uid != os.geteuid():
        raise GpugeekError(
            f"the pool's TLS credentials in {directory} belong to uid {info.st_uid}, not to this user "
            f"(uid {os.geteuid()}); a pool can only be reached by the user who launched it"
        )
    credentials = PoolCredentials(directory)
    if not all(f.is_file() for f in (credentials.ca_file, credentials.cert_file, credentials.key_file)):
        return None
    check_private_directory(directory.parent)
    check_private_directory(directory)
    for file in (credentials.ca_file, credentials.cert_file, credentials.key_file):
        check_private_file(file)
    return credentials


def keep_pool_credentials(registry: Registry, pool_id: int, files: dict[str, bytes]) -> PoolCredentials:
    """Pool ``pool_id``'s credentials from ``files`` (``ca.pem``, ``cert.pem``, ``key.pem``: those
    of a running pool a new record connects to again), written as :func:`create_pool_credentials`
    writes new ones."""
    missing = [name for name in (CA_FILE, CERT_FILE, KEY_FILE) if name not in files]
    if missing:
        raise ValueError(f"the pool's credentials lack {', '.join(missing)}")
    root = make_private_directory(credentials_root(registry))
    directory = root / str(int(pool_id))
    if directory.exists():
        shutil.rmtree(directory)
    make_private_directory(directory)
    for name in (CA_FILE, KEY_FILE, CERT_FILE):
        write_private_file(directory / name, files[name])
    return PoolCredentials(directory)


def remove_pool_credentials(registry: Registry, pool_id: int) -> None:
    """Delete pool ``pool_id``'s credentials (nothing happens when it has none)."""
    directory = _pool_directory(registry, pool_id)
    try:
        shutil.rmtree(directory)
    except FileNotFoundError:
        return
    except OSError as e:  # a later launch prunes it again; the pool is over either way
        log.warning("could not remove the TLS credentials in %s: %s", directory, e)


def prune_pool_credentials(registry: Registry) -> None:
    """Delete the credentials of pools that are no longer live (their owner died, or they are gone)."""
    root = credentials_root(registry)
    try:
        entries = [e for e in root.iterdir() if e.name.isdigit()]
    except FileNotFoundError:
        return
    if not entries:
        return
    live = {p.id for p in registry.list_pools(live_only=True)}
    for entry in entries:
        if int(entry.name) not in live:
            remove_pool_credentials(registry, int(entry.name))


def connection_security(record: PoolRecord, registry: Registry) -> Security | None:
    """The ``Security`` to reach ``record``'s scheduler from this process.

    A pool launched with TLS: its own credentials. A plain ``tcp://`` pool, or one attached by
    address (the user's own ``Security`` from dask's config applies there): None, so that dask uses
    its configuration as usual. Raises GpugeekError naming the missing credentials otherwise.
    """
    address = record.scheduler_address or ""
    if not address.startswith(TLS_SCHEME) or record.backend == "address":
        return None
    credentials = pool_credentials(registry, record.id)
    if credentials is None:
        raise GpugeekError(
            Phrase(
                "pool {name} takes TLS connections with its own certificates only, and they are not in {where}; "
                "it can be reached from the launching user's processes that share its registry "
                "(GPUGEEK_REGISTRY={registry})",
                name=Value(record.name),
                where=str(_pool_directory(registry, record.id)),
                registry=str(registry.path),
            )
        )
    return credentials.security()


def security_loader(info: dict[str, Any]) -> Security | None:
    """For dask's ``distributed.client.security-loader``: the credentials of the live pool whose
    scheduler is at ``info["address"]`` in the configured registry, or None (dask's own config)."""
    from ..store import get_registry

    address = info.get("address")
    if not isinstance(address, str) or not address.startswith(TLS_SCHEME):
        return None
    registry = get_registry()
    for record in registry.list_pools(live_only=True):
        if record.scheduler_address == address:
            return connection_security(record, registry)
    return None
