"""The namespace rule, notebook side: which of the notebook's names a cell sends to the ranks.

A cell that reads a name the notebook defines gets the notebook's value of it, sent along, unless
the ranks already hold the notebook's current value of that name. Then nothing is sent, and the
ranks go on with their own binding: the copy sent before with whatever their cells did to it
(trained weights), or what a cell assigned to the name on the ranks (``counter += 1``). The
notebook wins only when it changed the name since it last sent it; when its new value replaces one
the ranks had assigned themselves, the cell says so (see :mod:`.rank_names`).

"Changed" is decided without sending anything:

- a torch tensor, wherever it sits (a top-level name, a model's parameter, inside a dict), is
  compared by identity and torch's version counter, which every in-place change bumps: a 400 MB
  tensor costs nothing to compare. It is sent once; every later value that contains it (an
  optimizer over a model's parameters) refers to the ranks' copy, so they share it there as here;
- anything else is compared by the content of its pickle (SHA-256; a numpy array's bytes are
  hashed where they lie, not copied): an unchanged numpy array costs a hash, not a send.

What the ranks hold lasts as long as their process group (a failed cell, a changed pool or another
notebook's job rebuilds it, and everything is sent again). A cell on some ranks only (``--ranks``)
sends what those ranks miss and records nothing.

>>> names = CellNames.of({"lr": 0.1})
>>> hold = RanksHold()
>>> sorted(hold.plan(names, "gen-1", every_rank=True).sent)
['lr']
"""

from __future__ import annotations

import functools
import hashlib
import io
import pickle
import secrets
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .payload import CellCode

# This process's mark on the objects it sends: the ranks keep them under (OWNER, serial).
OWNER = secrets.token_hex(6)

TensorToken = tuple[Any, ...]


# -- tensors: an identity that a freed tensor's reused id cannot fake --------------------------------
_serials: dict[int, tuple[weakref.ref[Any], int]] = {}
_serials_lock = threading.Lock()
_next_serial = [0]


def _serial_of(tensor: Any) -> int:
    """A number for ``tensor`` this process never gives another tensor (ids are reused, serials not)."""
    key = id(tensor)
    with _serials_lock:
        known = _serials.get(key)
        if known is not None and known[0]() is tensor:
            return known[1]
        _next_serial[0] += 1
        serial = _next_serial[0]

        def forget(ref: weakref.ref[Any], key: int = key) -> None:
            with _serials_lock:
                if _serials.get(key, (None, 0))[0] is ref:
                    del _serials[key]

        _serials[key] = (weakref.ref(tensor, forget), serial)
        return serial


def _torch() -> Any:
    return sys.modules.get("torch")  # never imported here: a notebook without torch has no tensors


def tensor_token(obj: Any) -> TensorToken | None:
    """What says a tensor is unchanged: its serial, torch's version counter, where its data lies and
    its shape; None for anything that is not a plain tensor with a version (those go by content)."""
    torch = _torch()
    if torch is None or not isinstance(obj, torch.Tensor):
        return None
    try:
        return (
            _serial_of(obj),
            obj._version,
            obj.data_ptr(),
            tuple(obj.shape),
            tuple(obj.stride()),
            str(obj.dtype),
            str(obj.device),
            obj.requires_grad,
            type(obj).__name__,
        )
    except (RuntimeError, TypeError, ValueError, NotImplementedError):  # inference, sparse, meta tensors
        return None


# -- fingerprints --------------------------------------------------------------------------------------
class _Digest(io.RawIOBase):
    """A file that hashes what a pickler writes to it, keeping none of it."""

    def __init__(self) -> None:
        super().__init__()
        self.hash = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.hash.update(data)
        return len(data)


def fingerprint(value: Any) -> str:
    """The SHA-256 of ``value``'s pickle, with tensors as their :func:`tensor_token` and the bytes of
    out-of-band buffers (numpy arrays) hashed in place. Raises what pickling raises."""
    digest = _Digest()

    def buffer(view: pickle.PickleBuffer) -> bool:
        try:
            digest.hash.update(view.raw())
        except BufferError:  # not contiguous: pickled in band instead
            return True
        return False

    _fingerprinter()(digest, protocol=5, buffer_callback=buffer).dump(value)
    return digest.hash.hexdigest()


@functools.cache
def _fingerprinter() -> type:
    """cloudpickle's pickler with tensors as their tokens (made once: cloudpickle is imported lazily)."""
    import cloudpickle

    class Fingerprinter(cloudpickle.Pickler):  # type: ignore[misc]
        def persistent_id(self, obj: Any) -> Any:
            return tensor_token(obj)

    return Fingerprinter


def tensor_serials(value: Any) -> set[int]:
    """The serials (:func:`tensor_token`) of the tensors inside ``value``, wherever they sit."""
    found: set[int] = set()

    class Finder(_fingerprinter()):  # type: ignore[misc]  # the pickler reads persistent_id when made
        def persistent_id(self, obj: Any) -> Any:
            token = tensor_token(obj)
            if token is not None:
                found.add(token[0])
            return token

    Finder(_Digest(), protocol=5, buffer_callback=lambda view: False).dump(value)
    return found


@functools.cache
def _empty_blob() -> bytes:
    import cloudpickle

    return bytes(cloudpickle.dumps({}))


@dataclass
class CellNames:
    """The notebook's values a cell reads, as they are now, with their fingerprints."""

    values: dict[str, Any]
    fingerprints: dict[str, str]

    @classmethod
    def of(cls, values: Mapping[str, Any], on_error: Callable[[Exception], Exception] | None = None) -> CellNames:
        """Fingerprint ``values``; a value that does not pickle raises ``on_error(e)`` (or ``e``)."""
        prints: dict[str, str] = {}
        for name, value in values.items():
            try:
                prints[name] = fingerprint(value)
            except Exception as e:
                raise (on_error(e) if on_error else e) from e
        return cls(dict(values), prints)

    def sealed(self, code: CellCode) -> CellCode:
        """``code`` carrying every value (a job run by another process: nothing is held for it)."""
        import cloudpickle

        return replace(code, names_blob=cloudpickle.dumps(self.values), kept=(), owner=OWNER)


# -- what the ranks hold -------------------------------------------------------------------------------
@dataclass
class Shipment:
    """One attempt's code and what to record once every rank has taken it."""

    code: CellCode
    sent: dict[str, str] = field(default_factory=dict)  # name -> fingerprint
    tensors: dict[int, tuple[weakref.ref[Any], TensorToken]] = field(default_factory=dict)
    forgotten: tuple[int, ...] = ()
    every_rank: bool = True
    generation: str = ""


class RanksHold:
    """What one pool's ranks hold of this notebook's values, for one process-group generation."""

    def __init__(self) -> None:
        self.generation: str | None = None
        self.names: dict[str, str] = {}  # name -> fingerprint of the value the ranks were sent
        self.tensors: dict[int, tuple[weakref.ref[Any], TensorToken]] = {}  # serial -> (ref, token)

    def plan(self, names: CellNames, generation: str, every_rank: bool, code: CellCode | None = None) -> Shipment:
        """The code of one attempt: the names the ranks lack, pickled with the tensors they hold as
        references to their copies."""
        import cloudpickle

        if generation != self.generation:  # a new group: the ranks' namespaces are new too
            self.generation, self.names, self.tensors = generation, {}, {}
        sending = {n: v for n, v in names.values.items() if self.names.get(n) != names.fingerprints[n]}
        kept = tuple(n for n in names.values if n not in sending)
        forgotten = tuple(s for s, (ref, _) in self.tensors.items() if ref() is None) if every_rank else ()
        base = code if code is not None else CellCode("", "", b"", (), {}, False)
        if not sending:  # the usual cell: nothing to pickle
            shipped = replace(base, names_blob=_empty_blob(), kept=kept, forget=forgotten, owner=OWNER)
            return Shipment(shipped, {}, {}, forgotten, every_rank, generation)
        held = self.tensors
        new: dict[int, tuple[weakref.ref[Any], TensorToken]] = {}
        parts: set[int] = set()  # tensors a kept tensor is rebuilt from (a Parameter's data): plain
        alive: list[Any] = []  # ... kept alive while pickling, so that their ids stay theirs

        class Sender(cloudpickle.Pickler):  # type: ignore[misc]
            def reducer_override(self, obj: Any) -> Any:
                token = None if id(obj) in parts else tensor_token(obj)
                if token is None:
                    return super().reducer_override(obj)
                serial = token[0]
                if serial in held and held[serial][1] == token:
                    return _rank_held(), (OWNER, serial)
                if not every_rank:  # the other ranks would not hold it: plain, and not recorded
                    return super().reducer_override(obj)
                reduced = obj.__reduce_ex__(5)
                if not (isinstance(reduced, tuple) and len(reduced) == 2):
                    return super().reducer_override(obj)
                rebuild, args = reduced
                inner = [a for a in args if tensor_token(a) is not None]
                parts.update(id(a) for a in inner)
                alive.extend(inner)
                new[serial] = (weakref.ref(obj), token)
                return _rank_keep(), (OWNER, serial, rebuild, args)

        buffer = io.BytesIO()
        Sender(buffer, protocol=5).dump(sending)
        shipped = replace(base, names_blob=buffer.getvalue(), kept=kept, forget=forgotten, owner=OWNER)
        sent = {n: names.fingerprints[n] for n in sending}
        return Shipment(shipped, sent, new, forgotten, every_rank, generation)

    def took(self, shipment: Shipment, dropped: tuple[str, ...] = ()) -> None:
        """Every rank of ``shipment``'s generation took it; ``dropped``: names their cell deleted."""
        if not shipment.every_rank or shipment.generation != self.generation:
            return
        self.names.update(shipment.sent)
        self.tensors.update(shipment.tensors)
        for serial in shipment.forgotten:
            self.tensors.pop(serial, None)
        for name in dropped:
            self.names.pop(name, None)

    def release(self, values: Mapping[str, Any]) -> None:
        """Count these notebook values as never sent (an explicit push): the next cell that names
        them sends them, tensors inside them with their data, and they replace the ranks' own."""
        for name in values:
            self.names.pop(name, None)
        for serial in tensor_serials(values):
            self.tensors.pop(serial, None)

    def lost(self) -> None:
        """The ranks' namespaces are gone (the attempt failed: its group is rebuilt)."""
        self.generation, self.names, self.tensors = None, {}, {}


def _rank_held() -> Callable[..., Any]:
    from .rank_names import held

    return held


def _rank_keep() -> Callable[..., Any]:
    from .rank_names import keep

    return keep
