"""The pool's ``SLURMCluster``: dask-jobqueue's, with the workers' TLS from the pool folder, ended
jobs replaced by the job watcher rather than dropped, and the folder's credentials removed on close."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .credentials import remove_credentials_copy
from .jobqueue import correct_state, require_jobqueue


def pool_cluster_class() -> type:
    """dask-jobqueue's ``SLURMCluster``, for a pool: workers' TLS from the pool folder, ended jobs
    replaced by :class:`SlurmJobWatcher` rather than dropped, the folder's credentials removed on close."""
    require_jobqueue()
    from dask_jobqueue import SLURMCluster
    from distributed.deploy.cluster import Cluster

    from ..private_http import served_dashboard_link

    class PoolSLURMCluster(SLURMCluster):
        def __init__(self, *args: Any, worker_security: Any = None, pool_folder: Path | None = None, **kwargs: Any):
            self._pool_worker_security = worker_security
            self.pool_folder = pool_folder
            super().__init__(*args, **kwargs)

        @property
        def dashboard_link(self) -> str:
            return served_dashboard_link(self)

        def _get_worker_security(self, security: Any) -> Any:
            return self._pool_worker_security if self._pool_worker_security is not None else security

        def _update_worker_status(self, op: str, msg: Any) -> None:
            # SpecCluster closes a worker's job 15 s after its worker left unless one of that name is
            # back; a replacement still pending in the queue would then be cancelled
            if op == "remove":
                Cluster._update_worker_status(self, op, msg)
                return
            super()._update_worker_status(op, msg)

        async def _close(self) -> None:
            try:
                await super()._close()
            finally:
                if self.pool_folder is not None:
                    remove_credentials_copy(self.pool_folder)

        async def replace_worker(self, name: str) -> str | None:
            """Submit a new job for worker ``name`` (whose job ended); returns its job id."""
            job = self.workers.pop(name, None)
            if job is not None:
                await job.close()  # scancel of an ended job: nothing happens
            await correct_state(self)
            new = self.workers.get(name)
            return None if new is None else new.job_id

        def job_ids(self) -> dict[str, str]:
            """Worker name -> Slurm job id, of the jobs this cluster submitted and keeps."""
            return {str(n): str(j.job_id) for n, j in list(self.workers.items()) if getattr(j, "job_id", None)}

    PoolSLURMCluster.__name__ = PoolSLURMCluster.__qualname__ = "SLURMCluster"
    return PoolSLURMCluster
