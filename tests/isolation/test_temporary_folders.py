"""A user's pools leave nothing in the shared temporary directory: dask's scratch space, torch's error
files and the ranks' temporary files live in the pool's own folder under ``gpugeek-jobs-<uid>``,
which goes with the pool; the launching process's folder and its multiprocessing ``pymp-*`` go at its
exit, or, when it was killed, at the next pool stop of the same user. A live process's folder and
anything of another user's are never touched.

Each test runs real processes with ``TMPDIR`` set to a fresh directory, so everything they leave there
is theirs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.other_user import OtherUser
from support.processes import kill, wait_until_gone

pytestmark = pytest.mark.slow

LAUNCH_RUN_STOP = """
    import os, sys, tempfile
    import gpugeek_jupyter
    from gpugeek_jupyter.jobs import run_cell

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="scratch")
    cell = "import os, tempfile\\nopen(os.path.join(tempfile.gettempdir(), 'rank-file'), 'w').close()\\n(tempfile.gettempdir(), os.environ['TORCHELASTIC_ERROR_FILE'])"
    result = run_cell(pool, cell, {})
    print("RANKS", *[folder for folder, _ in result.values])
    print("ERRORS", *[error for _, error in result.values])
    print("WHILE", *sorted(str(p) for p in __import__("pathlib").Path(tempfile.gettempdir()).rglob("*")))
    sys.stdout.flush()
    if sys.argv[1] == "stop":
        pool.stop()
        print("STOPPED", *sorted(str(p) for p in __import__("pathlib").Path(tempfile.gettempdir()).iterdir()))
    elif sys.argv[1] == "kill":
        os.kill(os.getpid(), 9)
"""


@pytest.fixture
def temporary_directory(tmp_path: Path) -> Path:
    folder = tmp_path / "tmp"
    folder.mkdir()
    return folder


def _python(code: str, temporary_directory: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(temporary_directory), "GPUGEEK_PRELOAD_TORCH": "0"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def _line(output: str, label: str) -> list[str]:
    return next(line.split()[1:] for line in output.splitlines() if line.startswith(label + " ") or line == label)


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_pools_temporary_files_live_in_its_own_folder_and_nothing_is_left_after_stop_and_exit(
    temporary_directory: Path,
) -> None:
    done = _python(LAUNCH_RUN_STOP, temporary_directory, "stop")
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = _line(done.stdout, "RANKS")
    root = temporary_directory / f"gpugeek-jobs-{os.geteuid()}"
    assert len(set(ranks)) == 1 and Path(ranks[0]).parent.parent == root  # <root>/proc-*/pool-scratch-*
    pool_folder = Path(ranks[0])
    assert pool_folder.name.startswith("pool-scratch-") and pool_folder.parent.name.startswith("proc-")
    assert all(Path(error).is_relative_to(pool_folder) for error in _line(done.stdout, "ERRORS"))
    seen = _line(done.stdout, "WHILE")
    assert str(pool_folder / "rank-file") in seen and str(pool_folder / "dask-scratch-space") in seen
    assert not any(
        Path(p).name.startswith("dask-scratch-space") and Path(p).parent == temporary_directory for p in seen
    )
    stopped = {Path(p).name for p in _line(done.stdout, "STOPPED")}
    assert f"gpugeek-jobs-{os.geteuid()}" in stopped and not pool_folder.exists()  # the process still lived
    assert _entries(temporary_directory) == []  # its folder and its pymp-* went at its exit


def test_a_killed_owners_folders_and_pymp_go_when_the_user_next_launches_or_stops_a_pool(
    temporary_directory: Path,
) -> None:
    killed = _python(LAUNCH_RUN_STOP, temporary_directory, "kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    root = temporary_directory / f"gpugeek-jobs-{os.geteuid()}"
    killed_folders = _entries(root)
    killed_pymp = [name for name in _entries(temporary_directory) if name.startswith("pymp-")]
    assert len(killed_folders) == 1 and len(killed_pymp) == 1

    done = _python(LAUNCH_RUN_STOP, temporary_directory, "stop")
    assert done.returncode == 0, done.stderr[-3000:]
    stopped = {Path(p).name for p in _line(done.stdout, "STOPPED")}
    assert killed_pymp[0] not in stopped  # gone while the second process still ran
    assert not (root / killed_folders[0]).exists()
    assert _entries(temporary_directory) == []


HOLD_A_FOLDER = """
    import sys, time
    from gpugeek_jupyter.pools.scratch import new_pool_folder
    print(new_pool_folder("live"), flush=True)
    time.sleep(120)
"""


@pytest.fixture
def live_owner(temporary_directory: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """A process that holds a pool folder (as a process with a live pool does), killed afterwards."""
    env = {**os.environ, "TMPDIR": str(temporary_directory)}
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLD_A_FOLDER)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        folder = Path(process.stdout.readline().strip())
        yield process, folder
    finally:
        kill([process.pid])
        process.wait(timeout=10)


def test_a_live_processs_folder_is_never_removed_and_a_killed_ones_is(
    temporary_directory: Path, live_owner: tuple[subprocess.Popen[str], Path]
) -> None:
    process, folder = live_owner
    assert folder.is_dir()
    prune = "from gpugeek_jupyter.pools.scratch import prune_scratch; prune_scratch()"
    assert _python(prune, temporary_directory).returncode == 0
    assert folder.is_dir()  # its lock is held
    process.send_signal(signal.SIGKILL)
    assert wait_until_gone([process.pid], 10) == []
    assert _python(prune, temporary_directory).returncode == 0
    assert _entries(temporary_directory) == []  # the folder, the root and the pymp-* it named


def test_another_users_folders_are_left_alone(temporary_directory: Path, other_user: OtherUser) -> None:
    import pwd

    nobody = pwd.getpwnam(other_user.name)
    temporary_directory.chmod(0o1777)
    theirs = temporary_directory / "pymp-theirs"
    theirs.mkdir()
    os.chown(theirs, nobody.pw_uid, nobody.pw_gid)
    # a dead process folder of ours that names their folder (as a forged lock file would)
    root = temporary_directory / f"gpugeek-jobs-{os.geteuid()}"
    dead = root / "proc-1-forged"
    dead.mkdir(parents=True)
    (dead / "owner.lock").write_text(str(theirs))
    their_root = temporary_directory / f"gpugeek-jobs-{nobody.pw_uid}"
    their_root.mkdir()
    (their_root / "proc-2-x").mkdir()
    os.chown(their_root, nobody.pw_uid, nobody.pw_gid)
    os.chown(their_root / "proc-2-x", nobody.pw_uid, nobody.pw_gid)
    prune = "from gpugeek_jupyter.pools.scratch import prune_scratch; prune_scratch()"
    assert _python(prune, temporary_directory).returncode == 0
    assert theirs.is_dir() and (their_root / "proc-2-x").is_dir()
    assert not root.exists()  # our dead folder went; theirs stayed


def test_a_root_that_is_not_this_users_is_not_used(temporary_directory: Path, other_user: OtherUser) -> None:
    import pwd

    nobody = pwd.getpwnam(other_user.name)
    squatted = temporary_directory / f"gpugeek-jobs-{os.geteuid()}"
    squatted.mkdir(mode=0o777)
    os.chown(squatted, nobody.pw_uid, nobody.pw_gid)
    probe = "from gpugeek_jupyter.pools.scratch import new_pool_folder; print(new_pool_folder('x'))"
    done = _python(probe, temporary_directory)
    assert done.returncode == 0 and done.stdout.strip() == "None", done.stdout + done.stderr
    assert list(squatted.iterdir()) == []
