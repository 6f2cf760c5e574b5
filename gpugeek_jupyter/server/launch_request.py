"""The body of ``POST /gpugeek/pools``: JSON types checked here, values by ``PoolSpec.create``.

A JSON body is typed, so a string where a number belongs is a mistake to name, not a value to
coerce: ``{"count": "4"}`` is refused here with the field and a valid example, while
``{"count": 0}`` passes to :meth:`PoolSpec.create`, which states the rule for values. Every error
is phrased for JSON (:attr:`Surface.SERVER`): field names and values as the request writes them.

>>> parse_launch_body(b'{"gpu_type": "cpu", "count": 2, "name": "dev"}')
{'gpu_type': 'cpu', 'count': 2, 'name': 'dev'}
>>> try:
...     parse_launch_body(b'{"count": 0}')
... except SpecError as e:
...     print(e)
"count" must be a whole number from 1 to 1024, got 0 (e.g. "count": 4)
"""

from __future__ import annotations

import inspect
import json
import unicodedata
from collections.abc import Mapping
from typing import Any

from ..errors import Phrase, SpecError, Surface, phrased_for
from ..spec import LAUNCH_FIELDS as SPEC_LAUNCH_FIELDS
from ..spec import PoolSpec

_STRING = "a string"
_NUMBER = "a number"
_LIST = "a list"
_OBJECT = "an object"
_BOOLEAN = "a boolean"

_JSON_KINDS = {"string": _STRING, "number": _NUMBER, "integer": _NUMBER, "array": _LIST, "boolean": _BOOLEAN}

# field -> (what JSON type it takes, whether null is allowed, a valid example), from the one
# declaration of the launch fields (an integer is "a number" here: PoolSpec.create names 2.5)
LAUNCH_FIELDS: dict[str, tuple[str, bool, Any]] = {
    f.name: (_JSON_KINDS[f.json_type], f.nullable, f.example) for f in SPEC_LAUNCH_FIELDS
}


def launch_request_schema() -> dict[str, Any]:
    """``openapi.json``'s ``LaunchRequest``, made from the launch fields' declaration: each field's
    JSON type (and null when allowed) or its choices, its bounds, ``PoolSpec.create``'s default, its
    help as the description, an example, and ``x-backends``, the backends it is for (absent: all),
    which the side panel reads to show a field only for its backends."""
    defaults = inspect.signature(PoolSpec.create).parameters
    properties: dict[str, Any] = {}
    for field in SPEC_LAUNCH_FIELDS:
        described: dict[str, Any] = {}
        if field.choices:
            described["enum"] = [*field.choices, *([None] if field.nullable else [])]
        else:
            described["type"] = [field.json_type, "null"] if field.nullable else field.json_type
        if field.json_type == "array":
            described["items"] = {"type": "string"}
        if field.minimum is not None:
            described["minimum"] = field.minimum
        if field.maximum is not None:
            described["maximum"] = field.maximum
        default = defaults[field.name].default if field.name in defaults else None
        if default not in (None, inspect.Parameter.empty):
            described["default"] = default
        described["description"] = field.help
        described["examples"] = [field.example]
        if field.backends:
            described["x-backends"] = list(field.backends)
        properties[field.name] = described
    return {"type": "object", "additionalProperties": False, "properties": properties}


_MULTILINE = {"prologue"}  # shell lines: newlines and tabs are its text, other control characters are not

_BODY_EXAMPLE = '{"gpu_type": "cpu", "count": 2, "backend": "local", "name": "dev"}'


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return _NUMBER
    if isinstance(value, str):
        return _STRING
    if isinstance(value, list):
        return _LIST
    return "an object"


def parse_launch_body(body: bytes) -> dict[str, Any]:
    """Options for ``PoolSpec.create`` from a request body; SpecError (with ``field``) otherwise,
    phrased for JSON."""
    with phrased_for(Surface.SERVER):
        options = typed_body(body, LAUNCH_FIELDS, "launch request", _BODY_EXAMPLE, multiline=_MULTILINE)
        PoolSpec.create(
            **{k: v for k, v in options.items() if k != "keep"}
        )  # the values' rules, phrased here; the service builds its own spec
    return options


def typed_body(
    body: bytes,
    fields: Mapping[str, tuple[str | tuple[str, ...], bool, Any]],
    request_name: str,
    body_example: str,
    multiline: frozenset[str] | set[str] = frozenset(),
) -> dict[str, Any]:
    """The fields of a JSON object body, each of the JSON type ``fields`` gives it (``multiline``:
    text fields whose newlines and tabs are text); a SpecError naming the first wrong one."""
    try:
        data = json.loads(body.decode("utf-8")) if body.strip() else None
    except (UnicodeDecodeError, ValueError) as e:
        raise SpecError(f"the request body is not valid JSON ({e}); send an object such as {body_example}") from e
    if not isinstance(data, dict):
        raise SpecError(f"the request body must be a JSON object, got {_json_kind(data)}; e.g. {body_example}")
    options: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            raise SpecError(
                Phrase(f"unknown field {{value}} in the {request_name} (known: {{rule}})"),
                field=key,
                value=key,
                rule=", ".join(fields),
            )
        kind, nullable, example = fields[key]
        kinds = (kind,) if isinstance(kind, str) else kind  # one JSON type, or a few
        if (value is None and not nullable) or (value is not None and _json_kind(value) not in kinds):
            raise SpecError(
                Phrase("{field} must be {rule}, got {value} ({kind}) (e.g. {example})", kind=_json_kind(value)),
                field=key,
                value=value,
                rule=" or ".join(kinds) + (" or null" if nullable else ""),
                example=example,
            )
        allowed = "\n\t" if key in multiline else ""
        if isinstance(value, str) and any(unicodedata.category(c) == "Cc" and c not in allowed for c in value):
            raise SpecError(
                Phrase("{field} must not contain control characters, got {value} (e.g. {example})"),
                field=key,
                value=value,
                rule="text without control characters",
                example=example,
            )
        options[key] = value
    return options
