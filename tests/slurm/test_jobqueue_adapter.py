"""The one private call the Slurm backend makes (pools/slurm/jobqueue.py), checked against the
installed dask-jobqueue: it must still be there, with the signature the adapter uses, in the range
pyproject.toml pins (no Slurm needed)."""

from __future__ import annotations

import inspect
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _pinned(extra: str) -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (line,) = [r for r in project["optional-dependencies"][extra] if r.startswith("dask-jobqueue")]
    return Requirement(line.split("#")[0].strip())


def test_the_installed_dask_jobqueue_is_in_the_pinned_range() -> None:
    pinned = _pinned("slurm")
    assert pinned.specifier == _pinned("test").specifier, "the slurm extra and the tests pin one range"
    assert pinned.specifier.contains(version("dask-jobqueue")), (version("dask-jobqueue"), str(pinned))
    assert any(s.operator == "<" for s in pinned.specifier), f"{pinned}: pin an upper bound (the call is private)"


def test_slurm_cluster_still_has_correct_state_taking_only_self_and_returning_an_awaitable() -> None:
    pytest.importorskip("dask_jobqueue")
    from dask_jobqueue import SLURMCluster

    correct_state = getattr(SLURMCluster, "_correct_state", None)
    assert callable(correct_state), "SLURMCluster._correct_state is gone: see pools/slurm/jobqueue.py"
    assert list(inspect.signature(correct_state).parameters) == ["self"]
    assert not inspect.iscoroutinefunction(correct_state)  # it returns the task it starts (or the one waiting)


def test_submit_jobs_submits_the_worker_spec_and_raises_what_the_job_command_said(tmp_path: Path) -> None:
    """A real SLURMCluster (its scheduler in this process) whose job class submits with a fake of
    sbatch that records its call and refuses as sbatch does: the adapter's call (submit_jobs, which
    awaits correct_state on the cluster's loop) submits the spec's one job and raises with its stderr,
    and the cluster then closes (SpecCluster's close refuses a job left 'created')."""
    pytest.importorskip("dask_jobqueue")
    from gpugeek_jupyter.pools.slurm.jobqueue import require_jobqueue, submit_jobs

    require_jobqueue()
    from dask_jobqueue import SLURMCluster
    from dask_jobqueue.slurm import SLURMJob

    fake_sbatch = tmp_path / "sbatch"
    fake_sbatch.write_text(
        f"#!/bin/sh\ntouch {tmp_path}/called\necho 'sbatch: error: invalid partition specified: x' >&2\nexit 1\n"
    )
    fake_sbatch.chmod(0o755)

    class RefusedJob(SLURMJob):
        submit_command = str(fake_sbatch)

    cluster = SLURMCluster(
        cores=1, memory="1GB", job_cls=RefusedJob, scheduler_options={"host": "127.0.0.1", "dashboard_address": ":0"}
    )
    try:
        cluster.worker_spec.update(cluster.new_worker_spec())
        with pytest.raises(RuntimeError, match="invalid partition specified: x"):
            submit_jobs(cluster)
        assert (tmp_path / "called").exists()
        cluster.close(timeout=30)
    except BaseException:
        cluster.close(timeout=30)
        raise


def test_the_private_methods_the_pools_cluster_overrides_are_still_there_with_the_signatures_it_keeps() -> None:
    """pools/slurm/cluster.py overrides three private methods of SLURMCluster's bases (the workers'
    TLS, what a worker's leaving does, the close): each must still exist on the installed, pinned
    dask-jobqueue and distributed, taking what the override takes, else the override silently stops
    being called."""
    pytest.importorskip("dask_jobqueue")
    from dask_jobqueue import SLURMCluster
    from distributed.deploy.cluster import Cluster

    from gpugeek_jupyter.pools.slurm.cluster import pool_cluster_class

    expected = {"_get_worker_security": ["self", "security"], "_update_worker_status": ["self", "op", "msg"]}
    for name, parameters in expected.items():
        base = getattr(SLURMCluster, name, None)
        assert callable(base), f"SLURMCluster.{name} is gone: see pools/slurm/cluster.py"
        assert list(inspect.signature(base).parameters) == parameters, name
        assert getattr(pool_cluster_class(), name) is not base, f"the pool's cluster no longer overrides {name}"
    assert list(inspect.signature(Cluster._update_worker_status).parameters) == ["self", "op", "msg"]
    assert inspect.iscoroutinefunction(SLURMCluster._close)
    assert list(inspect.signature(SLURMCluster._close).parameters) == ["self"]
