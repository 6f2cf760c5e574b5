"""The ``address`` backend: attach to a dask scheduler that is already running somewhere.

The pool does not own those workers: stopping it detaches (closes the client) and leaves the
scheduler running. Cost is still accrued for the workers the pool saw while attached.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import BackendUnavailableError, Phrase, Setting
from ._backend import ProgressCallback, RunningCluster, wait_for_workers

if TYPE_CHECKING:
    from ..spec import PoolSpec


class AddressBackend:
    name = "address"

    def preflight(self, spec: PoolSpec) -> None:
        """The address was validated by PoolSpec; reachability is checked by start()."""

    def start(self, spec: PoolSpec, on_progress: ProgressCallback, start_timeout: float) -> RunningCluster:
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
            dashboard_link=client.dashboard_link,
            owns_workers=False,
        )
