"""Tracing lineage over registry rows alone: a chain is followed back, a job met twice (two jobs
resuming from each other's checkpoints) is named and not followed again, and the depth is bounded."""

from __future__ import annotations

from pathlib import Path

from gpugeek_jupyter.jobs.lineage import describe, trace
from gpugeek_jupyter.store import Registry


def _registry(tmp_path: Path, jobs: list[str]) -> Registry:
    registry = Registry(tmp_path / "registry.sqlite")
    pool = registry.add_pool("dev", "local", {"gpu_type": "cpu", "count": 1}, {}, owner="pid 1")
    for job in jobs:
        registry.add_job(job, pool.id, "dev", "cell", "ab" * 32, ranks=1)
    return registry


def test_two_jobs_that_resumed_from_each_other_end_the_walk(tmp_path: Path) -> None:
    registry = _registry(tmp_path, ["job-a", "job-b"])
    registry.add_lineage("job-a", "output", "/c/a.pt", {"step": 1})
    registry.add_lineage("job-b", "resumed_from", "/c/a.pt", {"step": 1})
    registry.add_lineage("job-b", "output", "/c/b.pt", {"step": 2})
    registry.add_lineage("job-a", "resumed_from", "/c/b.pt", {"step": 2})
    chain = trace("job-b", registry)
    [(_, a)] = chain.resumed_from
    assert a is not None and a.job_id == "job-a"
    [(_, b_again)] = a.resumed_from
    assert b_again is not None and b_again.job_id == "job-b" and b_again.resumed_from == []  # named, not followed


def test_the_walk_stops_at_its_depth(tmp_path: Path) -> None:
    jobs = [f"job-{i}" for i in range(6)]
    registry = _registry(tmp_path, jobs)
    for i in range(1, 6):
        registry.add_lineage(jobs[i - 1], "output", f"/c/{i}.pt", {"step": i})
        registry.add_lineage(jobs[i], "resumed_from", f"/c/{i}.pt", {"step": i})
    node, walked = trace("job-5", registry, depth=3), []
    while node is not None:
        walked.append((node.job_id, len(node.resumed_from)))
        node = node.resumed_from[0][1] if node.resumed_from else None
    # three jobs traced; the writer of the third's checkpoint is named, its own resume not followed
    assert walked == [("job-5", 1), ("job-4", 1), ("job-3", 1), ("job-2", 0)]


def test_a_fingerprint_in_a_few_words() -> None:
    assert describe({"kind": "file", "size": 1_234_567, "sha256": "6b1d9b4b62e8" + "0" * 52, "hashed": "sampled"}) == (
        "file, 1.2 MB, sha256 of samples 6b1d9b4b62e8"
    )
    assert describe({"kind": "folder", "files": 3, "size": 10, "sha256": "ab" * 32}) == (
        "folder, 3 files, 10 B, sha256 abababababab"
    )
    assert describe({"kind": "object", "type": "file", "size": 4, "ETag": '"9f"'}) == 'object, 4 B, ETag "9f"'
