"""The ``address`` backend: attach to a dask scheduler that is already running somewhere.

The pool does not own those workers: stopping it detaches (closes the client) and leaves the
scheduler running. Cost is still accrued for the workers the pool saw while attached.

A ``tls://`` scheduler is reached with the user's own ``Security`` from dask's configuration
(``distributed.comm.tls.ca-file``, ``.client.cert``, ``.client.key``, or the
``DASK_DISTRIBUTED__COMM__TLS__*`` variables); without them the launch fails naming what is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BackendUnavailableError, Phrase, Setting
from ._backend import ProgressCallback, RunningCluster, wait_for_workers

if TYPE_CHECKING:
    from distributed import Client

    from ..spec import PoolSpec
    from .credentials import PoolCredentials

TLS_SETTINGS = {  # what a tls:// client needs, by dask config key
    "distributed.comm.tls.ca-file": "tls_ca_file",
    "distributed.comm.tls.client.cert": "tls_client_cert",
}


def missing_tls_settings() -> list[str]:
    """The dask config keys a client needs for ``tls://`` that are not set here (empty: all set)."""
    from distributed.security import Security

    security = Security()
    return [key for key, attribute in TLS_SETTINGS.items() if not getattr(security, attribute)]


class AddressBackend:
    name = "address"
    uses_pool_credentials = False  # someone else's scheduler: its own security, from dask's config
    serves_private_dashboard = False  # someone else's scheduler: its dashboard is where it says

    def preflight(self, spec: PoolSpec) -> None:
        """A ``tls://`` address needs the user's TLS settings; reachability is checked by start()."""
        assert spec.address is not None  # PoolSpec.create guarantees it for this backend
        if spec.address.startswith("tls://"):
            missing = missing_tls_settings()
            if missing:
                raise BackendUnavailableError(
                    Phrase(
                        "{address} needs TLS credentials of yours in dask's config, and {missing} "
                        "{is_are} not set (in ~/.config/dask/*.yaml, or DASK_DISTRIBUTED__COMM__TLS__CA_FILE, "
                        "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT and __KEY)",
                        address=Setting(address=spec.address),
                        missing=", ".join(missing),
                        is_are="is" if len(missing) == 1 else "are",
                    )
                )

    def start(
        self,
        spec: PoolSpec,
        on_progress: ProgressCallback,
        start_timeout: float,
        credentials: PoolCredentials | None = None,
        dashboard_socket: Path | None = None,
    ) -> RunningCluster:
        from distributed import Client

        assert spec.address is not None  # PoolSpec.create guarantees it for this backend
        try:
            client = Client(spec.address, set_as_default=False, timeout=min(start_timeout, 10.0))
        except (OSError, TimeoutError) as e:
            raise BackendUnavailableError(
                Phrase(
                    "no dask scheduler answers at {address} ({cause}); start one with 'dask scheduler' "
                    "or check the address (e.g. {example})",
                    address=Setting(address=spec.address),
                    cause=str(e),
                    example=Setting(address="tcp://127.0.0.1:8786"),
                )
            ) from e
        try:
            wait_for_workers(client, spec.count, on_progress, start_timeout, f"scheduler {spec.address}")
        except BaseException:
            client.close()
            raise
        return RunningCluster(
            client=client,
            scheduler_address=spec.address,
            dashboard_link=_dashboard_link(client),
            owns_workers=False,
            security=client.security,
        )


def _dashboard_link(client: Client) -> str | None:
    """The scheduler's dashboard address, None when it serves its dashboard on no port (a gpugeek
    pool's scheduler serves it on a Unix socket of its owner's: dask then finds no port to name)."""
    try:
        return client.dashboard_link or None
    except KeyError:
        return None
