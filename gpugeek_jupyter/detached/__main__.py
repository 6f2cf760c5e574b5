"""The agent process: ``python -m gpugeek_jupyter.detached`` (started by :func:`.connection.connect`)."""

from __future__ import annotations

from .process import main

if __name__ == "__main__":
    main()
