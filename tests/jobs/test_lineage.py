"""Lineage on a real pool: a job that reads a dataset and writes checkpoints, a second that resumes
from one of them; the chain back from the second's newest checkpoint reaches the dataset's
fingerprint. Also the fingerprints' rules and a checkpoint of unknown origin."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

import gpugeek_jupyter
from gpugeek_jupyter.errors import NotFoundError
from gpugeek_jupyter.jobs import lineage as lineage_module
from gpugeek_jupyter.jobs import run_cell
from gpugeek_jupyter.jobs.lineage import fingerprint

STEP_3, STEP_6 = "step-000000003.pt", "step-000000006.pt"  # the checkpoints' own names
TRAIN = """
import pandas
frame = pandas.read_csv(gg.dataset(data))
model = torch.nn.Linear(2, 1)
ckpt = gg.checkpoint(folder, model=model)
for step in range(ckpt.step + 1, ckpt.step + 4):
    model(torch.tensor(frame.values, dtype=torch.float32)).sum().backward()
ckpt.save(step)
"""


def test_a_resumed_jobs_chain_reaches_the_data_the_first_job_read(cpu_pool: Any, tmp_path: Path) -> None:
    data = tmp_path / "train.csv"
    data.write_text("x,y\n1,2\n3,4\n")
    folder = tmp_path / "ckpt"
    names = {"data": str(data), "folder": str(folder)}
    first = run_cell(cpu_pool, "import torch\n" + TRAIN, dict(names), timeout=120)
    second = run_cell(cpu_pool, "import torch\n" + TRAIN, dict(names), timeout=120)
    assert first.ok and second.ok, (first.report(), second.report())

    chain = gpugeek_jupyter.lineage(str(folder / STEP_6))
    assert chain.job_id == second.job_id
    [(resumed, writer)] = chain.resumed_from
    assert resumed.uri == str(folder / STEP_3) and resumed.fingerprint["step"] == 3
    assert writer is not None and writer.job_id == first.job_id
    [read] = writer.inputs
    assert read.uri == str(data)
    assert read.fingerprint["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert [o.uri for o in writer.outputs] == [str(folder / STEP_3)]
    text = str(chain)
    assert text.splitlines()[0] == f"{second.job_id} (succeeded, pool test-pool)"
    import platform

    import torch

    ran_on = f"  ran on python {platform.python_version()}, gpugeek_jupyter "  # the ranks' versions, asked once
    assert text.splitlines()[1].startswith(ran_on) and f"torch {torch.__version__}" in text.splitlines()[1]
    assert chain.to_dict()["software"]["torch"] == torch.__version__
    assert f"resumed from {folder / STEP_3} (step 3, written by {first.job_id})" in text
    assert f"read {data} (file, 12 B, sha256 {read.fingerprint['sha256'][:12]})" in text
    assert chain.to_dict()["resumed_from"][0]["written_by"]["inputs"][0]["uri"] == str(data)
    # the same from the job's id; both ranks read the dataset, one row is kept
    assert str(gpugeek_jupyter.lineage(second.job_id)) == text
    assert len(gpugeek_jupyter.lineage(first.job_id).inputs) == 1


def test_a_checkpoint_no_job_wrote_is_of_unknown_origin(cpu_pool: Any, tmp_path: Path) -> None:
    import torch

    folder = tmp_path / "ckpt"
    folder.mkdir()
    torch.save({"model": torch.nn.Linear(2, 1).state_dict(), "step": 5, "extra": {}}, folder / "step-000000005.pt")
    resumed = run_cell(
        cpu_pool,
        "import torch\nckpt = gg.checkpoint(folder, model=torch.nn.Linear(2, 1))\nckpt.step",
        {"folder": str(folder)},
        timeout=120,
    )
    assert resumed.ok and resumed.values == [5, 5], resumed.report()
    [(item, writer)] = gpugeek_jupyter.lineage(resumed.job_id).resumed_from
    assert writer is None
    assert "unknown origin: no job of this registry wrote it" in str(gpugeek_jupyter.lineage(resumed.job_id))
    with pytest.raises(NotFoundError, match=r"^'/nowhere/step-1.pt' is neither a job nor a checkpoint any job"):
        gpugeek_jupyter.lineage("/nowhere/step-1.pt")


def test_fingerprints_hash_small_files_whole_large_ones_by_samples_and_folders_by_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = tmp_path / "small.bin"
    small.write_bytes(b"abc")
    assert fingerprint(small)["hashed"] == "whole"
    monkeypatch.setattr(lineage_module, "WHOLE_HASH_BYTES", 10)
    monkeypatch.setattr(lineage_module, "SAMPLE_BYTES", 4)
    large = tmp_path / "large.bin"
    large.write_bytes(bytes(range(40)))
    before = fingerprint(large)
    assert before["hashed"] == "sampled" and before["size"] == 40
    large.write_bytes(bytes(range(39)) + b"\xff")  # the last byte changed: the end sample sees it
    assert fingerprint(large)["sha256"] != before["sha256"]
    folder = tmp_path / "folder"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "x.txt").write_text("1")
    (folder / "y.txt").write_text("22")
    listed = fingerprint(folder)
    assert (listed["kind"], listed["files"], listed["size"]) == ("folder", 2, 3)
    os.utime(folder / "y.txt", (1, 1))
    assert fingerprint(folder)["sha256"] != listed["sha256"]
    memory = "memory://lineage/data.csv"
    import fsspec

    with fsspec.open(memory, "wb") as f:
        f.write(b"x\n1\n")
    assert fingerprint(memory) == {"kind": "object", "type": "file", "size": 4}
    with pytest.raises(FileNotFoundError, match=r"gg.dataset: '/no/such/data' is neither a file nor a folder here"):
        fingerprint("/no/such/data")
