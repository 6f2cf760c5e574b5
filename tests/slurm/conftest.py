"""A real one-host Slurm for the tests of ``--backend slurm``, started once per test session.

munged, slurmctld and slurmd run from a ``slurm.conf`` generated under a temporary directory
(:mod:`slurm.one_host`), as our own children, and are stopped by their pids at the end. Where they
cannot start (no ``slurm-wlm``/``munge`` packages: ``make test`` installs them; not root) every test
that needs them is skipped with the reason. Each test gets its own shared directory (workers' logs,
credentials' copies) and checks that it leaves no Slurm job behind.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm.one_host import OneHostSlurm, SlurmUnavailable


def _why_not_here() -> str | None:
    if os.geteuid() != 0:
        return "the one-host Slurm runs its daemons as root (SlurmUser=root); run the tests as root"
    return None


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OneHostSlurm]:
    """munged + slurmctld + slurmd on this host, ``SLURM_CONF`` set for the session's client commands."""
    reason = _why_not_here()
    if reason:
        pytest.skip(reason)
    try:
        cluster = OneHostSlurm.start(tmp_path_factory.mktemp("slurm"))
    except SlurmUnavailable as e:
        pytest.skip(f"no one-host Slurm here: {e}")
    with pytest.MonkeyPatch.context() as patch:
        for key, value in cluster.environ.items():
            patch.setenv(key, value)
        yield cluster
    cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: OneHostSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[OneHostSlurm]:
    """The session's Slurm, with this test's own shared directory; fails the test if it leaves jobs."""
    monkeypatch.setenv("GPUGEEK_SLURM_SHARED_DIRECTORY", str(tmp_path / "shared"))
    monkeypatch.setenv("GPUGEEK_LOG_LEVEL", "ERROR")
    yield slurm_cluster
    slurm_cluster.fail_if_jobs_left()
