"""Another OS user of the same host: ``nobody``, run with ``runuser`` and the system's Python.

The venv's interpreter lives under the owner's home, which ``nobody`` cannot enter; what ``nobody``
runs is ``/usr/bin/python3`` (the same minor version), and for dask a copy of just the packages
``distributed`` imports, put where ``nobody`` can read them (:func:`readable_dask`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from server.conftest import api, jp_server_config, jp_serverapp  # noqa: F401  (the Jupyter server fixtures)

from support.other_user import OtherUser

OTHER_USER = "nobody"
SYSTEM_PYTHON = "/usr/bin/python3"


def _other_user_available() -> str | None:
    """Why the other user cannot be used here, or None."""
    if os.geteuid() != 0:
        return "needs root, to run processes as another user with runuser"
    if shutil.which("runuser") is None:
        return "needs runuser (util-linux)"
    if not Path(SYSTEM_PYTHON).exists():
        return f"needs {SYSTEM_PYTHON}, an interpreter another user can execute"
    try:
        import pwd

        pwd.getpwnam(OTHER_USER)
    except KeyError:
        return f"needs the OS user {OTHER_USER!r}"
    return None


@pytest.fixture(scope="session")
def other_user() -> OtherUser:
    """``nobody`` with the system Python; the test is skipped where that cannot run."""
    why = _other_user_available()
    if why:
        pytest.skip(why)
    return OtherUser(OTHER_USER, SYSTEM_PYTHON)


def _site_packages_of(module_file: str) -> Path | None:
    for parent in Path(module_file).resolve().parents:
        if parent.name in ("site-packages", "dist-packages"):
            return parent
    return None


@pytest.fixture(scope="session")
def readable_dask(other_user: OtherUser) -> Iterator[OtherUser]:
    """``nobody`` with a readable copy of ``distributed`` and everything it imports (the venv itself is
    out of its reach), so that it can try a real dask ``Client``."""
    probe = "import distributed, distributed.security, cryptography.x509, sys; print('\\n'.join(filter(None, (getattr(m, '__file__', None) or '' for m in list(sys.modules.values())))))"
    files = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    roots: set[Path] = set()
    for file in files:
        site = _site_packages_of(file)
        if site is None:
            continue
        top = Path(file).resolve().relative_to(site).parts[0]
        roots.add(site / top)
    target = Path(tempfile.mkdtemp(prefix="gpugeek-other-user-"))
    try:
        for root in sorted(roots):
            destination = target / root.name
            if root.is_dir():
                shutil.copytree(root, destination, ignore=shutil.ignore_patterns("__pycache__", "tests"))
            else:
                shutil.copy2(root, destination)
            for lib in root.parent.glob(root.name.split(".")[0] + ".libs"):  # wheels' vendored shared libraries
                shutil.copytree(lib, target / lib.name, dirs_exist_ok=True)
        for path in [target, *target.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        user = OtherUser(other_user.name, other_user.python, pythonpath=str(target))
        check = user.run("import distributed; print(distributed.__version__)")
        if check.returncode != 0:
            pytest.skip(
                f"{OTHER_USER} cannot import the copy of distributed with {SYSTEM_PYTHON}: {check.stderr[-300:]}"
            )
        yield user
    finally:
        shutil.rmtree(target, ignore_errors=True)


@pytest.fixture
def open_directory() -> Iterator[Path]:
    """A directory every user can enter (``0755`` under ``/tmp``), where a wrongly opened file would
    be readable by ``nobody``: pytest's own temporary directories are ``0700`` and would hide that."""
    base = Path(tempfile.mkdtemp(prefix="gpugeek-isolation-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def registry_in_the_open(open_directory: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's registry in a directory every user may enter (sticky, like ``/tmp``; one of this
    user's that is open is refused): only the permissions gpugeek sets keep ``nobody`` out."""
    from gpugeek_jupyter import config, runtime

    path = open_directory / "runtime" / "gpugeek.sqlite"
    path.parent.mkdir()
    path.parent.chmod(0o1777)  # open like /tmp, shared by design: the one open registry folder accepted
    monkeypatch.setenv("GPUGEEK_REGISTRY", str(path))
    monkeypatch.setenv("GPUGEEK_PRELOAD_TORCH", "0")
    config.set_config(None)
    runtime.reset_pool_manager()
    return path
