"""GET /gpugeek/jobs/<id>/lineage: a job's lineage as JSON, the writer of what it resumed from nested;
and %gpugeek_lineage in a real kernel over the same registry rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpugeek_jupyter.store import get_registry
from support.kernel import magics_kernel

from .conftest import Fetch
from .test_routes import registered_pool

DATA = {"kind": "file", "size": 1200, "sha256": "6b1d9b4b62e8" + "0" * 52, "hashed": "whole"}


def _two_jobs() -> None:
    registry = get_registry()
    pool = registered_pool("dev")
    for job in ("job-a", "job-b"):
        registry.add_job(job, pool.id, pool.name, "cell", "ab" * 32, ranks=2)
    registry.add_lineage("job-a", "input", "/data/train.csv", DATA)
    registry.add_lineage("job-a", "output", "/ckpt/step-000000003.pt", {"kind": "file", "step": 3})
    registry.add_lineage("job-b", "resumed_from", "/ckpt/step-000000003.pt", {"kind": "file", "step": 3})
    registry.add_lineage("job-b", "resumed_from", "/elsewhere/step-000000001.pt", {"kind": "file", "step": 1})


async def test_a_jobs_lineage_nests_the_writer_of_its_checkpoint(api: Fetch, jp_serverapp: Any) -> None:
    _two_jobs()
    status, body = await api("GET", "jobs", "job-b", "lineage")
    assert status == 200, body
    lineage = body["lineage"]
    assert (lineage["job"], lineage["status"], lineage["pool"]) == ("job-b", "running", "dev")
    known, unknown = lineage["resumed_from"]
    assert known["uri"] == "/ckpt/step-000000003.pt" and known["written_by"]["job"] == "job-a"
    assert known["written_by"]["inputs"][0] == {
        "uri": "/data/train.csv",
        "fingerprint": DATA,
        "recorded_at": known["written_by"]["inputs"][0]["recorded_at"],
    }
    assert unknown["written_by"] is None  # a checkpoint of unknown origin
    assert lineage["software"] == {}  # rows written here, by no job that ran


async def test_the_lineage_of_an_unknown_job_is_a_404_naming_it(api: Fetch, jp_serverapp: Any) -> None:
    status, body = await api("GET", "jobs", "job-nope", "lineage")
    assert status == 404 and "job-nope" in body["message"], body


def test_the_magic_prints_the_chain_from_a_checkpoint(isolated_registry: Path) -> None:
    _two_jobs()
    with magics_kernel({"GPUGEEK_REGISTRY": str(isolated_registry)}) as kernel:
        shown = kernel.run("%gpugeek_lineage job-b")
        missing = kernel.run("%gpugeek_lineage /nowhere/step-1.pt")
        bare = kernel.run("%gpugeek_lineage")
    assert shown.error is None, shown.text
    assert shown.stdout.splitlines() == [
        "job-b (running, pool dev)",
        "  resumed from /ckpt/step-000000003.pt (step 3, written by job-a)",
        "    job-a (running, pool dev)",
        "      read /data/train.csv (file, 1.2 kB, sha256 6b1d9b4b62e8)",
        "      wrote /ckpt/step-000000003.pt (step 3)",
        "  resumed from /elsewhere/step-000000001.pt (step 1, unknown origin: no job of this registry wrote it)",
    ]
    assert missing.stderr.startswith(
        "UsageError: '/nowhere/step-1.pt' is neither a job nor a checkpoint any job of this registry wrote"
    ), missing.text
    assert bare.stderr.startswith("UsageError: name a job or a checkpoint (e.g. %gpugeek_lineage job-1a2b3c4d"), (
        bare.text
    )
