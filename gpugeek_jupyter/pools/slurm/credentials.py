"""Where a Slurm pool's files go: a private folder per launch in ``GpugeekConfig.slurm_shared_directory``
(which the compute nodes must see) with the workers' logs and a copy of the pool's TLS credentials,
readable by the user only; the copy goes when the pool stops, or at a later launch once the pool is
no longer live, and the folder :data:`KEEP_LOGS_DAYS` after the pool ended."""

from __future__ import annotations

import datetime
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...config import get_config
from ...store import make_private_directory, write_private_file

if TYPE_CHECKING:
    from ...spec import PoolSpec
    from ..credentials import PoolCredentials

log = logging.getLogger(__name__)

KEEP_LOGS_DAYS = 7  # pool folders (the workers' logs) of ended pools are removed after this


def shared_root() -> Path:
    configured = get_config().slurm_shared_directory
    if configured:
        return Path(configured).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data_home) / "gpugeek-jupyter" / "slurm"


def make_pool_folder(spec: PoolSpec) -> Path:
    """A new private folder for one launch of ``spec``: ``<shared>/<name>-<UTC time>-<pid>``."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
    root = make_private_directory(shared_root())
    folder = Path(tempfile.mkdtemp(prefix=f"{spec.name}-{stamp}-", dir=root))  # 0700
    make_private_directory(folder / "logs")
    return folder


def copy_credentials(credentials: PoolCredentials, folder: Path) -> Any:
    """The workers' ``Security``: the pool's certificate, key and CA copied into ``folder/tls`` (0600)."""
    from distributed.security import Security

    tls = make_private_directory(folder / "tls")
    for source in (credentials.ca_file, credentials.cert_file, credentials.key_file):
        write_private_file(tls / source.name, source.read_bytes())
    write_private_file(tls / "source", str(credentials.directory).encode())
    cert, key = str(tls / credentials.cert_file.name), str(tls / credentials.key_file.name)
    return Security(
        require_encryption=True,
        tls_ca_file=str(tls / credentials.ca_file.name),
        tls_client_cert=cert,
        tls_client_key=key,
        tls_worker_cert=cert,
        tls_worker_key=key,
    )


def remove_credentials_copy(folder: Path) -> None:
    try:
        shutil.rmtree(folder / "tls")
    except FileNotFoundError:
        pass
    except OSError as e:  # a later launch prunes it again
        log.warning("could not remove the TLS credentials' copy in %s: %s", folder / "tls", e)


def prune_pool_folders(now: float | None = None) -> None:
    """Remove the credentials' copies of pools whose credentials are gone (the pool stopped or was
    pruned as not live), and the folders of pools ended more than :data:`KEEP_LOGS_DAYS` ago."""
    root = shared_root()
    try:
        folders = [f for f in root.iterdir() if f.is_dir()]
    except FileNotFoundError:
        return
    now = time.time() if now is None else now
    for folder in folders:
        source = folder / "tls" / "source"
        try:
            if source.exists() and not Path(source.read_text().strip()).exists():
                remove_credentials_copy(folder)
            if not (folder / "tls").exists() and now - _last_written(folder) > KEEP_LOGS_DAYS * 86400:
                shutil.rmtree(folder, ignore_errors=True)
        except OSError as e:
            log.debug("could not prune %s: %s", folder, e)


def _last_written(folder: Path) -> float:
    """When anything of a pool's folder last changed: the folder, its logs folder or a log in it."""
    paths = [folder, folder / "logs", *(folder / "logs").glob("*")] if (folder / "logs").is_dir() else [folder]
    return max(p.stat().st_mtime for p in paths)
