"""The agent process: ``python -m gpugeek_jupyter.detached`` (started by :func:`.connection.connect`).

``--ensure`` starts the agent unless one runs, then exits (what a kept pool's keeper runs when the
agent that owned its pool died: the new agent takes the pool back).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    if sys.argv[1:] == ["--ensure"]:
        from .connection import connect

        connect().ping()
    else:
        from .process import main

        main()
