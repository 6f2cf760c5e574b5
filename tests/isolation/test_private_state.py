"""The registry, its -wal and -shm, and the directory around them belong to their owner alone."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gpugeek_jupyter.errors import RegistryFolderOpenError
from gpugeek_jupyter.store import Registry, _private
from support.other_user import OtherUser

pytestmark = pytest.mark.slow


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _can_read(user: OtherUser, path: Path) -> str:
    """What ``user`` got trying to read ``path``: 'read N bytes', or the error's name."""
    result = user.run(
        f"""
        try:
            print('read', len(open({str(path)!r}, 'rb').read()), 'bytes')
        except OSError as e:
            print(type(e).__name__)
        """
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture(autouse=True)
def _warnings_are_fresh() -> None:
    _private._warned.clear()


def test_another_user_cannot_read_the_registry_its_wal_or_its_shm(other_user: OtherUser, open_directory: Path) -> None:
    state = open_directory / "runtime"
    state.mkdir(mode=0o700)
    path = state / "gpugeek.sqlite"
    path.write_bytes(b"")
    path.chmod(0o644)  # what the issue found: the registry 0644
    state.chmod(0o755)
    assert _can_read(other_user, path) == "read 0 bytes"  # the check sees a readable file as readable
    state.chmod(0o700)  # what the refusal of an open folder says to do

    registry = Registry(path)
    registry.add_pool("private", "local", {"name": "private"}, {}, owner="me")  # the -wal and -shm exist now
    files = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
    assert all(f.exists() for f in files)
    assert {f.name: _mode(f) for f in files} == {f.name: 0o600 for f in files}
    state.chmod(0o755)  # opened again while in use: the files stay the owner's alone
    for f in files:
        assert _can_read(other_user, f) == "PermissionError", f
    registry.close()


def test_even_in_a_directory_anyone_may_enter_the_files_stay_unreadable(
    other_user: OtherUser, open_directory: Path
) -> None:
    shared = open_directory / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp: shared by design, so left as it is
    registry = Registry(shared / "gpugeek.sqlite")
    registry.add_pool("private", "local", {"name": "private"}, {}, owner="me")
    assert _mode(shared) == 0o1777
    for f in shared.iterdir():
        assert _mode(f) == 0o600
        assert _can_read(other_user, f) == "PermissionError", f
    registry.close()


def test_the_registry_folder_open_to_others_is_refused_not_changed(open_directory: Path) -> None:
    state = open_directory / "runtime"
    state.mkdir()
    state.chmod(0o755)
    with pytest.raises(RegistryFolderOpenError) as refused:
        Registry(state / "gpugeek.sqlite")
    assert str(refused.value) == (
        f"the registry's folder {state} is mode 0o755, open to other users: run `chmod 700 {state}`, "
        "or set GPUGEEK_REGISTRY to a file in a private folder"
    )
    assert _mode(state) == 0o755 and list(state.iterdir()) == []
    state.chmod(0o700)
    Registry(state / "gpugeek.sqlite").close()


def test_a_registry_file_made_readable_is_made_private_again(open_directory: Path) -> None:
    path = open_directory / "state" / "gpugeek.sqlite"
    Registry(path).close()
    path.chmod(0o644)
    Registry(path).close()
    assert _mode(path) == 0o600


def test_a_new_registry_gets_a_private_directory_and_file(open_directory: Path) -> None:
    path = open_directory / "a" / "b" / "gpugeek.sqlite"
    Registry(path).close()
    assert _mode(path.parent) == 0o700 and _mode(path) == 0o600
