"""Where a scheduled run resumes from (``resume="latest"``): the newest whole checkpoint of either
kind, rank-0 files or sharded (DCP) steps, in a local folder or at a URL; a step still being
written, or left half-written, is never chosen."""

from __future__ import annotations

import uuid
from pathlib import Path

import fsspec

from gpugeek_jupyter.schedules.agent import newest_checkpoint


def _rank0_file(folder: Path, step: int) -> None:
    (folder / f"step-{step:09d}.pt").write_bytes(b"state")


def _sharded_step(folder: Path, step: int, whole: bool) -> Path:
    directory = folder / f"step-{step:09d}"
    directory.mkdir(parents=True)
    (directory / "__0_0.distcp").write_bytes(b"shard")
    if whole:
        (directory / ".metadata").write_bytes(b"written last")
    return directory


def test_the_newest_whole_step_of_either_kind_wins_and_an_unfinished_one_is_passed_over(tmp_path: Path) -> None:
    _rank0_file(tmp_path, 2)
    _rank0_file(tmp_path, 4)
    assert newest_checkpoint(str(tmp_path)) == str(tmp_path / "step-000000004.pt")

    newest = _sharded_step(tmp_path, 6, whole=True)
    _sharded_step(tmp_path, 8, whole=False)  # its ranks were still writing when the run ended
    (tmp_path / ".step-000000010.pt.partial-0a1b").write_bytes(b"half")  # a rank-0 save cut short
    assert newest_checkpoint(str(tmp_path)) == str(newest)


def test_nothing_to_resume_from_is_none(tmp_path: Path) -> None:
    assert newest_checkpoint(str(tmp_path / "never-made")) is None
    _sharded_step(tmp_path, 3, whole=False)
    assert newest_checkpoint(str(tmp_path)) is None


def test_a_url_checkpoint_folder_resumes_from_its_newest_whole_step(tmp_path: Path) -> None:
    _rank0_file(tmp_path, 2)
    _sharded_step(tmp_path, 5, whole=True)
    _sharded_step(tmp_path, 7, whole=False)
    assert newest_checkpoint(f"file://{tmp_path}") == f"file://{tmp_path}/step-000000005"

    # an object store's semantics (no directories of its own): fsspec's in-memory filesystem
    root = f"memory:///ckpts-{uuid.uuid4().hex}"
    memory = fsspec.filesystem("memory")
    memory.pipe(f"{root}/step-000000003.pt", b"state")
    memory.pipe(f"{root}/step-000000009/__0_0.distcp", b"shard")  # no .metadata: not whole
    assert newest_checkpoint(root) == f"{root}/step-000000003.pt"
    memory.pipe(f"{root}/step-000000009/.metadata", b"written last")
    assert newest_checkpoint(root) == f"{root}/step-000000009"
