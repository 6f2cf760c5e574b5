"""Fixtures of the job-row tests: a fresh registry and a ready pool in it (a module may define its
own ``registry``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpugeek_jupyter.store import Registry
from support.queue_rows import ready_pool


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    return Registry(tmp_path / "jobs.sqlite")


@pytest.fixture
def pool_id(registry: Registry) -> int:
    return ready_pool(registry)
