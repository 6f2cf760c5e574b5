"""Run notebook cells under torchrun with the names a ``%%gpugeek_run`` cell gets for free.

    torchrun --nproc_per_node=2 torchrun_cell.py setup.py cell.py

Each file is executed in turn in one namespace (``__name__ == "__main__"``, like a notebook's), the
first after the gloo process group is up and ``rank``, ``world_size``, ``device`` and ``dist`` are set.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist


def main(paths: list[str]) -> None:
    dist.init_process_group("gloo")
    namespace: dict[str, object] = {
        "__name__": "__main__",
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "device": torch.device("cpu"),
        "dist": dist,
    }
    for path in paths:
        with open(path) as f:
            exec(compile(f.read(), path, "exec"), namespace)  # noqa: S102 - a cell, as a kernel runs it
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
