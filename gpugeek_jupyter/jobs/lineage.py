"""Lineage: what a job read, resumed from and wrote, recorded as it runs, traced back afterwards.

On a rank, three things record (each a *fingerprint*: what the thing was when the job used it):

- ``gg.dataset(path_or_url)``: the job reads this data (``input``);
- ``gg.checkpoint(...)``'s load: the job resumed from this checkpoint (``resumed_from``);
- a checkpoint's ``save``: the job wrote it (``output``, rank 0's).

They travel with the rank's output (:class:`~.capture.Forwarder`, never a collective) to the process
that runs the job, which keeps them in the registry (one row per job, role and location). From a
checkpoint, the job that wrote it is the newest with it as an output; :func:`trace` follows that back
to the data: ``%gpugeek_lineage``, ``gpugeek_jupyter.lineage(...)``, ``GET /gpugeek/jobs/<id>/lineage``.

A fingerprint's cost is bounded: a local file up to :data:`WHOLE_HASH_BYTES` is hashed whole
(SHA-256), a larger one by its size and three :data:`SAMPLE_BYTES` pieces (start, middle, end:
``"hashed": "sampled"``, which tells a changed length or header apart, not every byte); a folder by
its files' names, sizes and modification times (up to :data:`MAX_LISTED` files); an fsspec URL by what
its store says of it (size, ETag, version, modification time), without reading it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..store import LineageRecord, Registry

WHOLE_HASH_BYTES = 64 * 2**20
SAMPLE_BYTES = 4 * 2**20
MAX_LISTED = 10_000
MAX_DEPTH = 32  # jobs traced back at most (a chain of resumes)
STORE_FIELDS = ("size", "ETag", "etag", "version_id", "VersionId", "generation", "md5Hash", "mtime", "LastModified")


def fingerprint(target: str | os.PathLike[str]) -> dict[str, Any]:
    """What ``target`` (a local file or folder, or an fsspec URL) is now.

    >>> import tempfile; folder = tempfile.mkdtemp(); path = os.path.join(folder, "a.csv")
    >>> _ = open(path, "w").write("x,y\\n1,2\\n")
    >>> fp = fingerprint(path); fp["kind"], fp["size"], fp["hashed"], fp["sha256"][:12]
    ('file', 8, 'whole', '81bf9fa83c6f')
    """
    text = os.fspath(target)
    if "://" in text and not text.startswith("file://"):
        return _object(text)
    path = Path(text.removeprefix("file://")).expanduser()
    if path.is_file():
        return _file(path)
    if path.is_dir():
        return _folder(path)
    raise FileNotFoundError(
        f"gg.dataset: {text!r} is neither a file nor a folder here (e.g. gg.dataset('/data/train'))"
    )


def location(target: str | os.PathLike[str]) -> str:
    """The location a fingerprint is kept under: an absolute path, or the URL as given."""
    text = os.fspath(target)
    if "://" in text and not text.startswith("file://"):
        return text
    return str(Path(text.removeprefix("file://")).expanduser().resolve())


def _file(path: Path) -> dict[str, Any]:
    stat = path.stat()
    digest = hashlib.sha256()
    with path.open("rb") as f:
        if stat.st_size <= WHOLE_HASH_BYTES:
            for block in iter(lambda: f.read(2**20), b""):
                digest.update(block)
            hashed = "whole"
        else:
            digest.update(str(stat.st_size).encode())
            for offset in (0, (stat.st_size - SAMPLE_BYTES) // 2, stat.st_size - SAMPLE_BYTES):
                f.seek(offset)
                digest.update(f.read(SAMPLE_BYTES))
            hashed = "sampled"
    return {
        "kind": "file",
        "size": stat.st_size,
        "mtime": stat.st_mtime,
        "sha256": digest.hexdigest(),
        "hashed": hashed,
    }


def _folder(path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    files, size, listed = 0, 0, True
    for name, stat in _walk(path):
        if files == MAX_LISTED:
            listed = False
            break
        digest.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        files += 1
        size += stat.st_size
    return {
        "kind": "folder",
        "files": files,
        "size": size,
        "sha256": digest.hexdigest(),
        "hashed": "listing" if listed else f"listing of the first {MAX_LISTED} files",
    }


def _walk(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    for folder, folders, names in os.walk(root):
        folders.sort()
        for name in sorted(names):
            full = Path(folder) / name
            yield str(full.relative_to(root)), full.stat()


def _object(url: str) -> dict[str, Any]:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    try:
        info = fs.info(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"gg.dataset: {url!r} does not exist (e.g. gg.dataset('s3://bucket/train/'))") from None
    found = {key: info[key] for key in STORE_FIELDS if info.get(key) not in (None, "")}
    return {
        "kind": "object",
        "type": info.get("type", "file"),
        **{k: str(v) if k != "size" else v for k, v in found.items()},
    }


# -- on a rank --------------------------------------------------------------------------------------
def record(role: str, target: str | os.PathLike[str], facts: dict[str, Any]) -> None:
    """Hand a lineage record to the running job's forwarder (nothing kept outside a job)."""
    from . import capture

    forwarder = capture.current_forwarder()
    if forwarder is not None:
        forwarder.lineage({"role": role, "uri": location(target), "fingerprint": facts})


def dataset(target: str | os.PathLike[str], record_it: bool = True) -> str:
    """``gg.dataset``: record that the job reads ``target`` (``record_it``: this rank fingerprints it;
    the others of its host only return it); returns it, as given, to read."""
    if record_it:
        record("input", target, fingerprint(target))
    return os.fspath(target)


def checkpoint_facts(target: str | os.PathLike[str], step: int) -> dict[str, Any]:
    """A checkpoint's fingerprint (its file or folder as :func:`fingerprint` sees it) and its step."""
    try:
        facts = fingerprint(target)
    except (OSError, ImportError) as e:  # a store that cannot say: the step and location still count
        facts = {"kind": "unknown", "error": str(e)}
    return {**facts, "step": int(step)}


# -- afterwards: tracing -----------------------------------------------------------------------------
@dataclass
class JobLineage:
    """One job of a chain: what it read, resumed from (each with the job that wrote it) and wrote."""

    job_id: str
    status: str
    pool: str
    inputs: list[LineageRecord] = field(default_factory=list)
    resumed_from: list[tuple[LineageRecord, JobLineage | None]] = field(default_factory=list)  # (record, its writer)
    outputs: list[LineageRecord] = field(default_factory=list)
    software: dict[str, str] = field(default_factory=dict)  # Python and packages, as its ranks ran them

    def lines(self, indent: str = "") -> list[str]:
        """The chain as text, this job first, each resume's writer under it."""
        out = [f"{indent}{self.job_id} ({self.status}, pool {self.pool})"]
        if self.software:
            out.append(f"{indent}  ran on {describe_software(self.software)}")
        for item in self.inputs:
            out.append(f"{indent}  read {item.uri} ({describe(item.fingerprint)})")
        for item, writer in self.resumed_from:
            by = f"written by {writer.job_id}" if writer else "unknown origin: no job of this registry wrote it"
            out.append(f"{indent}  resumed from {item.uri} (step {item.fingerprint.get('step', '?')}, {by})")
            if writer is not None:
                out.extend(writer.lines(indent + "    "))
        for item in self.outputs:
            out.append(f"{indent}  wrote {item.uri} (step {item.fingerprint.get('step', '?')})")
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, the writers nested."""
        return {
            "job": self.job_id,
            "status": self.status,
            "pool": self.pool,
            "inputs": [_json(item) for item in self.inputs],
            "resumed_from": [
                {**_json(item), "written_by": writer.to_dict() if writer else None}
                for item, writer in self.resumed_from
            ],
            "outputs": [_json(item) for item in self.outputs],
            "software": self.software,
        }

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _json(item: LineageRecord) -> dict[str, Any]:
    return {"uri": item.uri, "fingerprint": item.fingerprint, "recorded_at": item.recorded_at}


def describe_software(software: dict[str, str]) -> str:
    """``python 3.12.3, torch 2.13.0, ...``: what a job's ranks ran.

    >>> describe_software({"python": "3.12.3", "torch": "2.13.0", "gpugeek_jupyter": "0.1.0"})
    'python 3.12.3, torch 2.13.0, gpugeek_jupyter 0.1.0'
    """
    return ", ".join(f"{name} {version}" for name, version in software.items())


def describe(facts: dict[str, Any]) -> str:
    """``file, 1.2 MB, sha256 6b1d9b4b62e8``: a fingerprint in a few words."""
    parts = [str(facts.get("kind", "?"))]
    if "files" in facts:
        parts.append(f"{facts['files']} files")
    if isinstance(facts.get("size"), int | float):
        parts.append(_size(float(facts["size"])))
    if facts.get("sha256"):
        sampled = " of samples" if facts.get("hashed") == "sampled" else ""
        parts.append(f"sha256{sampled} {str(facts['sha256'])[:12]}")
    for key in ("ETag", "etag", "version_id", "VersionId", "generation"):
        if facts.get(key):
            parts.append(f"{key} {facts[key]}")
    return ", ".join(parts)


def _size(size: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def trace(job_id: str, registry: Registry, depth: int = MAX_DEPTH, seen: set[str] | None = None) -> JobLineage:
    """Job ``job_id``'s lineage, back through the jobs that wrote what it resumed from (``depth``
    jobs at most; a job met twice is named, not followed again)."""
    seen = set() if seen is None else seen
    seen.add(job_id)
    job = registry.job(job_id)
    node = JobLineage(job_id, job.status.value, job.pool_name, software=dict(job.summary.get("software") or {}))
    for item in registry.lineage_of(job_id):
        if item.role == "input":
            node.inputs.append(item)
        elif item.role == "output":
            node.outputs.append(item)
        else:
            writer = registry.writer_of(item.uri)
            node.resumed_from.append((item, None if writer is None else _writer(writer.job_id, registry, depth, seen)))
    return node


def _writer(job_id: str, registry: Registry, depth: int, seen: set[str]) -> JobLineage:
    """The job that wrote a checkpoint: traced in turn, or only named when met before or too deep."""
    if job_id not in seen and depth > 1:
        return trace(job_id, registry, depth - 1, seen)
    job = registry.job(job_id)
    return JobLineage(job_id, job.status.value, job.pool_name)


def lineage(target: str | os.PathLike[str], registry: Registry | None = None) -> JobLineage:
    """The lineage of a job (its id) or of a checkpoint (its path or URL: traced from the job that
    wrote it), back to the data; ``print()`` it for the chain, ``.to_dict()`` for JSON.

    >>> chain = gpugeek_jupyter.lineage("/ckpt/step-000000006.pt")      # doctest: +SKIP
    >>> chain.job_id, chain.resumed_from[0][1].inputs[0].fingerprint["sha256"][:12]   # doctest: +SKIP
    ('job-b2c3d4e50178', '6b1d9b4b62e8')
    """
    from ..errors import NotFoundError, Phrase, Value
    from ..store import get_registry

    registry = registry or get_registry()
    text = os.fspath(target)
    try:
        registry.job(text)
    except NotFoundError:
        writer = registry.writer_of(location(text))
        if writer is None:
            raise NotFoundError(
                Phrase(
                    "{value} is neither a job nor a checkpoint any job of this registry wrote (unknown origin); "
                    "e.g. {example}",
                    value=Value(text),
                    example="job-1a2b3c4da910 or /ckpt/step-000000003.pt",
                )
            ) from None
        return trace(writer.job_id, registry)
    return trace(text, registry)
