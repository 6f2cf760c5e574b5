"""What a job writes on the workers' host is the user's own: error files, the compile cache, logs."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_jobs_error_files_and_compile_cache_are_in_folders_only_the_user_can_read(pool: Any, in_tmp: Path) -> None:
    from gpugeek_jupyter.jobs import run_cell, run_script

    (in_tmp / "fail.py").write_text("raise SystemExit(3)\n")
    run_script(pool, "fail.py")  # scripts write torch's error files
    errors = Path(tempfile.gettempdir()) / f"gpugeek-jobs-{os.getuid()}"
    assert errors.is_dir() and errors.stat().st_uid == os.getuid() and _mode(errors) == 0o700
    result = run_cell(
        pool, "import os\n[os.environ.get(k) for k in ('TORCHINDUCTOR_CACHE_DIR', 'TRITON_CACHE_DIR')]", {}
    )
    ours = [Path(p) for p in result.values[0] if p and "/gpugeek-jupyter/compile/" in p]
    if not ours:  # the workers were started with caches of their own (kept as they are)
        pytest.skip(f"the workers have their own compile caches: {result.values[0]}")
    for cache_dir in ours:
        cache = cache_dir.parents[2]  # .../gpugeek-jupyter/compile/<pool>/<kind>
        assert cache.name == "gpugeek-jupyter" and _mode(cache) == 0o700, cache


def test_job_logs_are_kept_in_private_folders_also_outside_the_registry_folder(tmp_path: Path) -> None:
    from gpugeek_jupyter.config import GpugeekConfig, set_config
    from gpugeek_jupyter.jobs.logs import JobLogs

    set_config(GpugeekConfig(job_logs_dir=str(tmp_path / "logs")))
    try:
        logs = JobLogs("job-private")
        logs.write(0, "secret numbers\n")
        logs.close()
        assert _mode(tmp_path / "logs") == 0o700 and _mode(tmp_path / "logs" / "job-private") == 0o700
    finally:
        set_config(None)


def test_a_folder_found_private_is_checked_again_at_each_job(tmp_path: Path) -> None:
    from gpugeek_jupyter.jobs.rank import _private_dir

    folder = tmp_path / "cache"
    assert _private_dir(str(folder)) and _mode(folder) == 0o700
    folder.chmod(0o755)  # widened since (the remembered answer must not hide it)
    assert _private_dir(str(folder)) and _mode(folder) == 0o700
    folder.rmdir()
    other = tmp_path / "elsewhere"
    other.mkdir(mode=0o700)
    folder.symlink_to(other)  # the same path, now a link: not a folder of ours to use
    assert not _private_dir(str(folder))
