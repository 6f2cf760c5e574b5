"""Shared fixtures: an isolated registry per test, and real local pools."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# jp_fetch etc. for tests/server; Chromium and its pages for tests/browser and tests/slurm (pytest allows them only here)
pytest_plugins = ["pytest_jupyter.jupyter_server", "support.browser"]


def _hypothesis_profiles() -> None:
    """Property tests are derandomized (the same examples every run) unless HYPOTHESIS_PROFILE=fuzz
    (``make fuzz``): a suite that can fail by chance is not a check."""
    from hypothesis import settings

    settings.register_profile("deterministic", derandomize=True, database=None, print_blob=True)
    settings.register_profile("fuzz", derandomize=False, database=None, print_blob=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


_hypothesis_profiles()


def _interrupts_as_in_a_kernel() -> None:
    """A suite started in the background by a non-interactive shell (``make test &``, ``nohup``)
    inherits SIGINT ignored, and Python then installs no handler for it: no ``KeyboardInterrupt``
    ever. The interrupt tests need the handler that every kernel and foreground run has; the
    processes they start get it too (an ignored signal stays ignored across ``exec``, a handled one
    does not)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_interrupts_as_in_a_kernel()


@pytest.fixture(autouse=True)
def isolated_registry(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own registry file and fresh settings, also in subprocesses it starts."""
    from gpugeek_jupyter import config, runtime, store

    path = tmp_path_factory.mktemp("registry") / "gpugeek.sqlite"
    monkeypatch.setenv("GPUGEEK_REGISTRY", str(path))
    monkeypatch.setenv("GPUGEEK_HEARTBEAT", "0.5")
    config.set_config(None)
    runtime._manager = None
    yield path
    runtime.reset_pool_manager()
    config.set_config(None)
    store._registries.clear()


@pytest.fixture
def cpu_pool() -> Iterator[object]:
    """A real 2-worker local cpu pool, stopped after the test."""
    import gpugeek_jupyter

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="test-pool")
    yield pool
    if pool.status.is_live:
        pool.stop()


@pytest.fixture
def python_executable() -> str:
    return sys.executable


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from gpugeek_jupyter.nvml import discover_gpus

    found = discover_gpus()
    skip_gpu = pytest.mark.skip(reason=f"needs an NVIDIA GPU: {found.reason}") if not found.devices else None
    skip_k8s = None
    if not os.environ.get("KUBECONFIG"):
        skip_k8s = pytest.mark.skip(reason="needs KUBECONFIG pointing at a cluster with the dask-kubernetes operator")
    for item in items:
        if skip_gpu and "gpu" in item.keywords:
            item.add_marker(skip_gpu)
        if skip_k8s and "k8s" in item.keywords:
            item.add_marker(skip_k8s)
