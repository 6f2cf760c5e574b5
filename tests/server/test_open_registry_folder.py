"""A server whose registry folder is open to other users refuses it in one line, and leaves it as it is."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gpugeek_jupyter import config
from server.conftest import Fetch
from server.test_shutdown import RunningServer

LINE = (
    "the registry's folder {folder} is mode 0o755, open to other users: run `chmod 700 {folder}`, "
    "or set GPUGEEK_REGISTRY to a file in a private folder"
)


@pytest.fixture(autouse=True)
def open_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "state"
    folder.mkdir()
    folder.chmod(0o755)
    monkeypatch.setenv("GPUGEEK_REGISTRY", str(folder / "gpugeek.sqlite"))
    config.set_config(None)
    return folder


async def test_every_route_answers_the_refusal_and_the_folder_is_untouched(api: Fetch, open_folder: Path) -> None:
    line = LINE.format(folder=open_folder)
    for method, path in (("GET", ("pools",)), ("GET", ("jobs",)), ("DELETE", ("pools", "dev"))):
        status, body = await api(method, *path)
        assert (status, body["message"]) == (503, line), (method, path)
    assert stat.S_IMODE(open_folder.stat().st_mode) == 0o755
    assert not (open_folder / "gpugeek.sqlite").exists()


def test_a_real_server_logs_it_in_one_line_without_a_traceback(
    tmp_path: Path, open_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUGEEK_REGISTRY", str(open_folder / "gpugeek.sqlite"))  # the server's environment
    server = RunningServer(tmp_path)
    try:
        server.wait_until_answering()
        assert server.call("GET", "pools") == (503, {"message": LINE.format(folder=open_folder), "field": None})
    finally:
        server.stop()
    log = server.log_path.read_text()
    said = [line for line in log.splitlines() if "registry's folder" in line]
    assert len(said) == 1 and said[0].endswith(f"gpugeek_jupyter: {LINE.format(folder=open_folder)}"), log
    assert "Traceback" not in log, log
