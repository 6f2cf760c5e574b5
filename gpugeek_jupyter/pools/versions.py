"""The same software on every rank: a pool's workers compared with this process.

A cell is pickled here and unpickled on the ranks, and a rank runs this package's code: a worker
with another Python, torch, cloudpickle, dask or gpugeek_jupyter fails in ways that name neither
(an unpickling error, a missing keyword). So when this process launches a pool, and before its first
job on a pool it attached to, it asks every worker for those versions, as dask's
``Client.get_versions`` does, and compares them itself (dask's own check warns with a table about
its own packages only). A difference is one line naming each worker and what it runs:

    pool 'dev': worker tls://10.0.0.7:40121 runs torch 2.12.0 (here 2.13.0), gpugeek_jupyter 0.0.9 (here 0.1.0)

It is a warning, never a refusal: a minor difference often works, and the user decides. Each pool is
checked once per process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._pool import Pool

log = logging.getLogger(__name__)

PACKAGES = ("gpugeek_jupyter", "torch", "cloudpickle", "dask", "distributed")
SHIPPED = "gpugeek_jupyter"  # sent to workers that lack it (jobs/process_group.py)
NOTICE_KIND = "version-mismatch"
CHECK_TIMEOUT_S = 10.0

_checked: set[tuple[int, str]] = set()  # (pool id, scheduler address) checked by this process
_software: dict[tuple[int, str], dict[str, str]] = {}  # what the workers answered, by check
_checked_lock = threading.Lock()


def versions_probe() -> Callable[[], dict[str, str | None]]:
    """A function that returns its interpreter's Python and the versions of :data:`PACKAGES` (None: not
    installed; a package found without its metadata answers with its imported ``__version__``). Made here, inside a function, so that cloudpickle sends it by value: it runs on a
    worker that lacks this package too."""
    packages = PACKAGES

    def probe() -> dict[str, str | None]:
        import platform
        import sys
        from importlib import metadata

        versions: dict[str, str | None] = {"python": platform.python_version()}
        for package in packages:
            try:
                versions[package] = metadata.version(package.replace("_", "-"))
            except metadata.PackageNotFoundError:  # on the path without its metadata: what it says, if imported
                version = getattr(sys.modules.get(package), "__version__", None)
                versions[package] = str(version) if version is not None else None
        return versions

    return probe


def software_versions() -> dict[str, str | None]:
    """This process's Python and versions of :data:`PACKAGES`."""
    return versions_probe()()


def _shown(version: str | None) -> str:
    return version if version is not None else "none"


def differences(here: Mapping[str, str | None], there: Mapping[str, Any]) -> list[str]:
    """What a worker runs that differs from ``here``, as ``torch 2.12.0 (here 2.13.0)``. A worker
    without gpugeek_jupyter is not told: its first job ships this process's copy to it."""
    return [
        f"{name} {_shown(there.get(name))} (here {_shown(version)})"
        for name, version in here.items()
        if there.get(name) != version and not (name == SHIPPED and there.get(name) is None)
    ]


def describe_mismatches(
    pool_name: str, here: Mapping[str, str | None], workers: Mapping[str, Mapping[str, Any] | BaseException]
) -> str | None:
    """One line naming each worker whose versions differ from ``here`` (workers that differ alike are
    named together), or None when every worker runs what this process runs. A worker that could not
    answer is left out: its job will say why."""
    by_difference: dict[str, list[str]] = {}
    for address in sorted(workers):
        answer = workers[address]
        if not isinstance(answer, Mapping):
            continue
        found = differences(here, answer)
        if found:
            by_difference.setdefault(", ".join(found), []).append(address)
    if not by_difference:
        return None
    parts = [
        f"{'worker' if len(addresses) == 1 else 'workers'} {', '.join(addresses)} "
        f"{'runs' if len(addresses) == 1 else 'run'} {difference}"
        for difference, addresses in by_difference.items()
    ]
    return f"pool '{pool_name}': {'; '.join(parts)}; install the same versions there, or expect jobs to fail"


def workers_software(workers: Mapping[str, Mapping[str, Any] | BaseException]) -> dict[str, str]:
    """Python and :data:`PACKAGES` as the workers that answered run them: a package's version, or its
    versions joined by `` / `` where workers differ (``none``: not installed).

    >>> workers_software({"w1": {"python": "3.12.3", "torch": "2.13.0"}, "w2": {"python": "3.12.3", "torch": None}})
    {'python': '3.12.3', 'torch': '2.13.0 / none'}
    """
    found: dict[str, set[str]] = {}
    for answer in workers.values():
        if isinstance(answer, Mapping):
            for name, version in answer.items():
                found.setdefault(name, set()).add(_shown(version))
    return {name: " / ".join(sorted(versions)) for name, versions in found.items()}


def pool_software(pool: Pool) -> dict[str, str] | None:
    """What :func:`check_pool_versions` found ``pool``'s workers run, when this process checked it."""
    with _checked_lock:
        return _software.get((pool.id, str(pool.scheduler_address)))


def check_pool_versions(pool: Pool) -> str | None:
    """Compare ``pool``'s workers with this process once (per pool and process); a difference is posted
    as a notice (``%gpugeek_launch`` and ``%%gpugeek_run`` print it) and returned. Never raises."""
    key = (pool.id, str(pool.scheduler_address))
    with _checked_lock:
        if key in _checked:
            return None
        _checked.add(key)
    try:
        answers = pool.client.run(versions_probe(), on_error="return", wait=True)
    except Exception as e:
        log.info("pool %s: could not ask its workers for their versions: %s", pool.name, e)
        return None
    with _checked_lock:
        _software[key] = workers_software(answers)
    line = describe_mismatches(pool.name, software_versions(), answers)
    if line is not None:
        pool.manager.post_notice(pool, NOTICE_KIND, line)
    return line
