"""``python -m gpugeek_jupyter doctor`` as a user runs it: real subprocesses, this installation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.kernel import REPO

pytestmark = pytest.mark.slow


def doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpugeek_jupyter", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def test_doctor_on_this_install_passes_the_jupyter_checks_and_its_exit_status_follows_the_failures() -> None:
    done = doctor()
    lines = done.stdout.strip().split("\n")
    assert lines[0].startswith("gpugeek-jupyter ") and sys.prefix in lines[0], done.stdout + done.stderr
    checks = lines[1:-1]
    assert all(line[:6] in ("pass  ", "fail  ", "skip  ") for line in checks), done.stdout
    by_name = {line[6:28].strip(): line for line in checks}
    assert by_name["labextension"].startswith("pass  "), by_name["labextension"]
    assert by_name["server extension"].startswith("pass  "), by_name["server extension"]
    assert {"registry", "GPUs", "dask-cuda", "torch"} <= by_name.keys()
    failures = [line for line in checks if line.startswith("fail  ")]
    assert all("; fix: " in line for line in failures)
    assert lines[-1].startswith(f"{len(checks)} checks: ") and lines[-1].endswith(f"{len(failures)} failed")
    assert done.returncode == (1 if failures else 0), done.stdout


def test_doctor_exits_non_zero_when_the_registry_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = doctor("--json", env={"GPUGEEK_REGISTRY": str(blocker / "gpugeek.sqlite")})
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    [registry] = [c for c in report["checks"] if c["name"] == "registry"]
    assert registry["state"] == "fail"
    assert f"{blocker} is a file, not a folder" in registry["detail"]
    assert registry["fix"].startswith("export GPUGEEK_REGISTRY=")
    assert report["failed"] == sum(c["state"] == "fail" for c in report["checks"]) >= 1
