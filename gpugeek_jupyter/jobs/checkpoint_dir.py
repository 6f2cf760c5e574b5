"""Where a job's checkpoints live: their names, which are whole, the newest, pruning, committing.

One place for both kinds of ``gg.checkpoint``: the rank-0 file ``step-<n>.pt`` and the sharded
directory ``step-<n>/`` of ``torch.distributed.checkpoint`` (DCP). The location is a local directory
or any fsspec URL (``s3://bucket/run``, ``gs://...``, ``abfs://...``, ``file:///mnt/shared/run``),
which DCP writes through its own fsspec storage. Either way it must be one place that every rank
sees.

How a checkpoint becomes whole, so that an interrupted save never hides the newest whole one:

- **local directory**: written under a hidden temporary name (``.step-<n>.pt.tmp-<token>``,
  ``.step-<n>.partial-<token>/``) and renamed with ``os.replace``, so a name ``step-<n>`` is always
  whole; a saved step saved again is swapped in whole;
- **fsspec URL**: an object store cannot rename a directory (a "move" copies object by object, and
  a reader could see half of it). A file is written to a temporary object and moved (one object
  appears whole); a sharded checkpoint is written in place and is whole once DCP has written its
  ``.metadata``, which DCP does last, after every rank's shards. A step saved again is removed
  first, so for that moment the older steps (``keep``) are the newest whole ones.

Temporary names (and, on a URL, step directories without ``.metadata``) left by a save that did
not finish are ignored, and removed by the next ``gg.checkpoint`` on the location.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

METADATA = ".metadata"  # DCP's own file, written once every rank's shards are
_STEP = re.compile(r"^step-(\d+)(\.pt)?$")
_TEMPORARY = re.compile(r"^\.step-\d+(\.pt)?\.(partial|old|tmp)-[0-9a-f]+$")

CheckpointPath = Path | str  # a local path, or the URL of a checkpoint on an fsspec filesystem


class CheckpointDir:
    """The checkpoints of one kind (``sharded`` or not) at ``location``."""

    def __init__(self, location: str | os.PathLike[str], *, sharded: bool) -> None:
        text = os.fspath(location)
        self.sharded = sharded
        self.suffix = "" if sharded else ".pt"
        self.local: Path | None = None
        self.fs: Any = None
        if "://" in text:
            import fsspec

            try:
                self.fs, root = fsspec.core.url_to_fs(text)
            except (ImportError, ValueError) as e:  # no such protocol, or its package is not installed here
                raise ValueError(
                    f"checkpoint location {text!r} cannot be opened on this worker: {e} (a local path or a "
                    f"shared filesystem works without it, e.g. gg.checkpoint('/shared/ckpts', ...))"
                ) from e
            self.root = str(root).rstrip("/")
            self.location = str(self.fs.unstrip_protocol(self.root))
        else:
            self.local = Path(text)
            self.root = str(self.local)
            self.location = self.root

    def __str__(self) -> str:
        return self.location

    @property
    def key(self) -> str:
        """One string per location, however it was spelt."""
        return str(self.local.resolve()) if self.local is not None else self.location

    # -- names -----------------------------------------------------------------------------------
    def name_of(self, step: int) -> str:
        return f"step-{int(step):09d}{self.suffix}"

    def path(self, name: str) -> CheckpointPath:
        """What torch and DCP are given for ``name``: a ``Path``, or a URL."""
        if self.local is not None:
            return self.local / name
        return str(self.fs.unstrip_protocol(f"{self.root}/{name}"))

    def _names(self) -> list[str]:
        if self.local is not None:
            return [p.name for p in self.local.iterdir()] if self.local.is_dir() else []
        try:
            entries = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return []
        return [str(entry).rstrip("/").rsplit("/", 1)[-1] for entry in entries]

    def _is_file(self, name: str) -> bool:
        if self.local is not None:
            return (self.local / name).is_file()
        return bool(self.fs.isfile(f"{self.root}/{name}"))

    def _steps(self, names: list[str] | None = None) -> list[tuple[int, str, bool]]:
        """(step, name, whole) of every checkpoint of this kind among ``names`` (default: the
        location's), by step."""
        found = []
        for name in self._names() if names is None else names:
            match = _STEP.match(name)
            if match is None or (match.group(2) is None) != self.sharded:
                continue
            whole = not self.sharded or self._is_file(f"{name}/{METADATA}")
            found.append((int(match.group(1)), name, whole))
        return sorted(found)

    def whole(self) -> list[tuple[int, str]]:
        """(step, name) of the whole checkpoints, oldest first."""
        return [(step, name) for step, name, whole in self._steps() if whole]

    def newest(self) -> str | None:
        found = self.whole()
        return found[-1][1] if found else None

    # -- tidying ---------------------------------------------------------------------------------
    def make(self) -> None:
        if self.local is not None:
            self.local.mkdir(parents=True, exist_ok=True)
        else:
            self.fs.makedirs(self.root, exist_ok=True)

    def remove(self, name: str) -> None:
        """Remove the checkpoint (or temporary) ``name``; one already gone is no error."""
        if self.local is not None:
            path = self.local / name
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()
            return
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(f"{self.root}/{name}", recursive=True)

    def unfinished(self) -> list[str]:
        """What saves that did not finish left: temporary names, and on a URL step directories
        without DCP's ``.metadata``."""
        names = self._names()  # one listing: on an object store each is a request
        left = [name for name in names if _TEMPORARY.match(name)]
        if self.local is None and self.sharded:
            left += [name for _, name, whole in self._steps(names) if not whole]
        return left

    def prune(self, keep: int) -> None:
        """Keep the newest ``keep`` whole checkpoints."""
        for _, name in self.whole()[:-keep]:
            self.remove(name)

    # -- the rank-0 file -------------------------------------------------------------------------
    def write_file(self, step: int, write: Callable[[IO[bytes]], None]) -> CheckpointPath:
        """Write ``step``'s file with ``write(file)`` so that its name is only ever whole."""
        final = self.name_of(step)
        temporary = f".{final}.tmp-{uuid.uuid4().hex[:12]}"
        self.make()
        if self.local is not None:
            with open(self.local / temporary, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(self.local / temporary, self.local / final)  # readers see the old file or the new one
        else:
            with self.fs.open(f"{self.root}/{temporary}", "wb") as f:
                write(f)
            self.fs.mv(f"{self.root}/{temporary}", f"{self.root}/{final}")
        return self.path(final)

    def open_file(self, name: str) -> IO[bytes]:
        if self.local is not None:
            return open(self.local / name, "rb")
        opened: IO[bytes] = self.fs.open(f"{self.root}/{name}", "rb")
        return opened

    # -- the sharded directory -------------------------------------------------------------------
    def staging(self, step: int, token: str) -> str:
        """Where DCP writes ``step``: a hidden directory renamed by :meth:`commit` (local), or the
        step's own directory, a saved one removed first (a URL; call on rank 0, before the save)."""
        final = self.name_of(step)
        if self.local is not None:
            return f".{final}.partial-{token}"
        return final

    def clear_for(self, step: int) -> None:
        """On a URL, remove ``step``'s saved checkpoint before it is written again (rank 0)."""
        if self.local is None:
            self.remove(self.name_of(step))  # none there is no error

    def commit(self, staging: str, step: int, token: str) -> bool:
        """Make ``step`` whole from what DCP wrote at ``staging``; False (and it is removed) when DCP
        did not finish it."""
        final = self.name_of(step)
        if not self._is_file(f"{staging}/{METADATA}"):
            self.remove(staging)
            return False
        if self.local is None:
            return True  # written in place: whole with its .metadata
        old = f".{final}.old-{token}"
        if (self.local / final).exists():  # saved at this step before: swap, so a whole one is always there
            os.replace(self.local / final, self.local / old)
        os.replace(self.local / staging, self.local / final)
        self.remove(old)
        return True


class CheckpointBase:
    """What both kinds of ``gg.checkpoint`` hold: the location, the model and optimizer, how many
    to keep, this rank, the loader, and where training continues (``step``, ``extra``, ``path``)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        sharded: bool,
        model: Any = None,
        optimizer: Any = None,
        keep: int = 3,
        rank: int = 0,
        loader: Any = None,
    ) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep!r} (e.g. keep=3)")
        self.store = CheckpointDir(directory, sharded=sharded)
        self.directory: CheckpointPath = self.store.local if self.store.local is not None else self.store.location
        self.model = model
        self.optimizer = optimizer
        self.keep = keep
        self.rank = rank
        self.loader = loader
        self.step = 0  # where to continue: 0 when the location has none
        self.extra: dict[str, Any] = {}  # what save() was given besides the step
        self.path: CheckpointPath | None = None  # the checkpoint loaded or saved last

    @staticmethod
    def _agree(value: Any) -> Any:
        """Rank 0's ``value`` on every rank (itself outside a process group)."""
        import torch.distributed as dist  # lazy: torch, only inside a rank that checkpoints

        if not (dist.is_available() and dist.is_initialized()):
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def newest(self) -> CheckpointPath | None:
        """The whole checkpoint with the highest step (what unfinished saves left is ignored)."""
        name = self.store.newest()
        return self.store.path(name) if name else None

    def _remove_unfinished(self) -> None:
        """Rank 0: remove what saves that did not finish left."""
        if self.rank != 0:
            return
        for name in self.store.unfinished():
            log.info("removing %s, left by a save that did not finish", self.store.path(name))
            self.store.remove(name)
