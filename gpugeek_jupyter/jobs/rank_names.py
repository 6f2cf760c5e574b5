"""The namespace rule, rank side: what a rank keeps of the notebook's values, and what is its own.

A rank's namespace lives across cells (a REPL per rank). Into it go the names the notebook sends
(:mod:`.names`); tensors come with a key, and the rank keeps its copy under that key, so a later
value that refers to the same notebook tensor gets this rank's copy (which the rank may have
trained since). A name the notebook sends replaces the rank's binding; when that binding was the
rank's own (a cell assigned it, rather than the notebook having sent it), the rank says so.

All of it is forgotten with the namespace, when the process group is rebuilt (:func:`reset`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any

_objects: dict[tuple[str, int], Any] = {}  # (notebook process, serial) -> this rank's copy
_received: dict[str, Any] = {}  # name -> the value the notebook sent under it


class NotHeldError(LookupError):
    """The notebook referred to a copy this rank does not hold (its namespace was rebuilt meanwhile)."""


def keep(owner: str, serial: int, rebuild: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """Rebuild a notebook tensor sent for the first time (as its pickle would) and keep this
    rank's copy of it."""
    value = rebuild(*args)
    _objects[(owner, serial)] = value
    return value


def held(owner: str, serial: int) -> Any:
    """This rank's copy of a notebook tensor sent before."""
    try:
        return _objects[(owner, serial)]
    except KeyError:
        raise NotHeldError(
            "this rank no longer holds a tensor the notebook sent before (its process group was rebuilt "
            "meanwhile); run the cell again: it is sent anew"
        ) from None


def forget(owner: str, serials: Iterable[int]) -> None:
    """Drop the copies of tensors that no longer exist in the notebook."""
    for serial in serials:
        _objects.pop((owner, serial), None)


def receive(namespace: MutableMapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    """Put the notebook's ``values`` into ``namespace``; the names whose binding there was the
    rank's own (assigned by a cell here), now replaced."""
    replaced = [
        name
        for name in values
        if name in namespace and (name not in _received or namespace[name] is not _received[name])
    ]
    namespace.update(values)
    _received.update(values)
    return replaced


def dropped(namespace: Mapping[str, Any]) -> list[str]:
    """Names the notebook sent that a cell here deleted since (to be sent again when used)."""
    gone = [name for name in _received if name not in namespace]
    for name in gone:
        del _received[name]
    return gone


def reset() -> None:
    """Forget everything: the namespace it described is gone."""
    _objects.clear()
    _received.clear()
