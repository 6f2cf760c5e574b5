"""The body of ``POST /gpugeek/pools``: JSON types checked here, values by ``PoolSpec.create``.

A JSON body is typed, so a string where a number belongs is a mistake to name, not a value to
coerce: ``{"count": "4"}`` is refused here with the field and a valid example, while
``{"count": 0}`` passes to :meth:`PoolSpec.create`, which states the rule for values.

>>> parse_launch_body(b'{"gpu_type": "cpu", "count": 2, "name": "dev"}')
{'gpu_type': 'cpu', 'count': 2, 'name': 'dev'}
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from ..errors import SpecError

_STRING = "a string"
_NUMBER = "a number"

# field -> (what JSON type it takes, whether null is allowed, a valid example)
LAUNCH_FIELDS: dict[str, tuple[str, bool, Any]] = {
    "gpu_type": (_STRING, False, "A100-80GB"),
    "count": (_NUMBER, False, 4),
    "backend": (_STRING, False, "local"),
    "spot_fraction": (_NUMBER, False, 0.7),
    "budget": (_NUMBER, True, 200),
    "idle_timeout": (_NUMBER, True, 20),
    "name": (_STRING, True, "dev"),
    "interconnect": (_STRING, True, "NVLink"),
    "framework": (_STRING, True, "PyTorch 2.13"),
    "price": (_NUMBER, True, 2.1),
    "address": (_STRING, True, "tcp://127.0.0.1:8786"),
    "namespace": (_STRING, True, "team-risk"),
    "image": (_STRING, True, "pytorch/pytorch:2.13.0-cuda12.8-cudnn9-runtime"),
    "base_pricing": (_STRING, True, "reserved"),
}

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
        return "a list"
    return "an object"


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_launch_body(body: bytes) -> dict[str, Any]:
    """Options for ``PoolSpec.create`` from a request body; SpecError (with ``field``) otherwise."""
    try:
        data = json.loads(body.decode("utf-8")) if body.strip() else None
    except (UnicodeDecodeError, ValueError) as e:
        raise SpecError(f"the request body is not valid JSON ({e}); send an object such as {_BODY_EXAMPLE}") from e
    if not isinstance(data, dict):
        raise SpecError(f"the request body must be a JSON object, got {_json_kind(data)}; e.g. {_BODY_EXAMPLE}")
    options: dict[str, Any] = {}
    for key, value in data.items():
        if key not in LAUNCH_FIELDS:
            raise SpecError(
                f"unknown field {json.dumps(_shorten(key))} in the launch request (known: {', '.join(LAUNCH_FIELDS)})",
                field=key,
            )
        kind, nullable, example = LAUNCH_FIELDS[key]
        if (value is None and not nullable) or (value is not None and _json_kind(value) != kind):
            shown = _shorten(json.dumps(value))
            raise SpecError(
                f"'{key}' must be {kind}{' or null' if nullable else ''}, got {shown} ({_json_kind(value)}); "
                f"e.g. {json.dumps({key: example})}",
                field=key,
            )
        if isinstance(value, str) and any(unicodedata.category(c) == "Cc" for c in value):
            raise SpecError(
                f"'{key}' must not contain control characters, got {_shorten(json.dumps(value))}; "
                f"e.g. {json.dumps({key: example})}",
                field=key,
            )
        options[key] = value
    return options
