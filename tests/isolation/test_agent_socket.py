"""The user's agent is theirs alone: another user of the host, even one who can enter the folder
beside the registry, cannot connect to its socket nor read its key, so cannot reach the user's kept
pools or detached jobs (nor attach to one)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from support.agent import agent_stopped_afterwards
from support.other_user import OtherUser

pytestmark = pytest.mark.slow


def test_another_user_cannot_connect_to_the_agents_socket_nor_read_its_key(
    other_user: OtherUser, registry_in_the_open: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugeek_jupyter.detached.connection import agent_paths, connect

    monkeypatch.setenv("GPUGEEK_AGENT_IDLE", "60")
    with agent_stopped_afterwards():
        assert connect().ping()["pid"] > 0
        paths = agent_paths()
        assert paths.socket.parent == registry_in_the_open.parent  # open to every user, sticky like /tmp
        assert stat.S_IMODE(paths.socket.stat().st_mode) == 0o600
        assert stat.S_IMODE(paths.key.stat().st_mode) == 0o600
        tried = other_user.run(
            f"""
            import socket
            for what, attempt in (
                ("socket", lambda: socket.socket(socket.AF_UNIX).connect({str(paths.socket)!r})),
                ("key", lambda: open({str(paths.key)!r}, "rb").read()),
            ):
                try:
                    attempt()
                    print(what, "reached")
                except OSError as e:
                    print(what, type(e).__name__)
            """
        )
    assert tried.returncode == 0, tried.stderr
    assert tried.stdout.split("\n")[:2] == ["socket PermissionError", "key PermissionError"], tried.stdout
