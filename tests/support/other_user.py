"""Running code as another OS user of this host (tests/isolation)."""

from __future__ import annotations

import subprocess
import textwrap
from dataclasses import dataclass


@dataclass
class OtherUser:
    """Runs Python code as another user of this host."""

    name: str
    python: str
    pythonpath: str = ""

    def run(self, code: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "PYTHONDONTWRITEBYTECODE": "1"}
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath
        return subprocess.run(
            ["runuser", "-u", self.name, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()), self.python, "-s"]
            + ["-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd="/",
        )
