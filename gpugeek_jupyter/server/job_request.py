"""The body of ``POST /gpugeek/jobs``: a torchrun-ready script to run, detached, on a kept pool.

JSON types are checked here (as for a launch, :func:`.launch_request.typed_body`), values by the
job's own rules; every error is phrased for JSON.

>>> parse_job_body(b'{"pool": "train", "script_path": "train.py", "hyperparams": {"lr": 0.001}}')
{'pool': 'train', 'script_path': 'train.py', 'hyperparams': {'lr': 0.001}}
>>> try:
...     parse_job_body(b'{"pool": "train"}')
... except SpecError as e:
...     print(e)
"script_path" must be given: the script to run (e.g. "script_path": "train.py")
"""

from __future__ import annotations

from typing import Any

from ..errors import Phrase, SpecError, Surface, phrased_for
from .launch_request import _BOOLEAN, _LIST, _NUMBER, _OBJECT, _STRING, typed_body

# field -> (its JSON type, whether null is allowed, a valid example)
JOB_FIELDS: dict[str, tuple[str | tuple[str, ...], bool, Any]] = {
    "pool": (_STRING, False, "train"),
    "script_path": (_STRING, False, "train.py"),
    "args": (_LIST, True, ["--epochs", "3"]),
    "hyperparams": (_OBJECT, True, {"lr": 0.001}),
    "env": (_OBJECT, True, {"NCCL_DEBUG": "INFO"}),
    "timeout": (_NUMBER, True, 3600),
    "max_restarts": (_NUMBER, True, 2),
    "min_ranks": (_NUMBER, True, 2),
    "track": ((_BOOLEAN, _STRING), True, "http://127.0.0.1:5000"),  # its MLflow run (jobs.tracking)
}
_REQUIRED = {"pool": "the kept pool to run on", "script_path": "the script to run"}
_BODY_EXAMPLE = '{"pool": "train", "script_path": "train.py", "hyperparams": {"lr": 0.001}}'


def parse_job_body(body: bytes) -> dict[str, Any]:
    """The fields of a job submission; SpecError (with ``field``) otherwise, phrased for JSON."""
    with phrased_for(Surface.SERVER):
        fields = typed_body(body, JOB_FIELDS, "job submission", _BODY_EXAMPLE)
        for name, what in _REQUIRED.items():
            if name not in fields:
                raise SpecError(
                    Phrase("{field} must be given: " + what + " (e.g. {example})"),
                    field=name,
                    rule="given",
                    example=JOB_FIELDS[name][2],
                )
        if any(not isinstance(a, str) for a in fields.get("args") or []):
            raise SpecError(field="args", value=fields["args"], rule="a list of strings", example=["--epochs", "3"])
    return fields
