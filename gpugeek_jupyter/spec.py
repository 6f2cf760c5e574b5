"""``PoolSpec``: what a user asks for, validated once, in one place.

Magics, the Python API and the server's launch route all build a spec with :func:`PoolSpec.create`,
so one rule gives one error everywhere, phrased by the surface that shows it (``count=4``,
``--count 4`` or ``"count": 4``; see :mod:`.errors`). Every message names the bad value (its
``repr()``) and a valid example.

>>> PoolSpec.create(gpu_type="cpu", count="2", name="dev").count
2
"""

from __future__ import annotations

import functools
import inspect
import math
import re
import secrets
from dataclasses import asdict, dataclass, replace
from typing import Any

from .catalog import GpuType, load_catalog
from .config import BACKENDS, get_config
from .errors import Phrase, Setting, SpecError

MAX_COUNT = 1024
NAME_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # a DNS-1123 label, usable on Kubernetes
ADDRESS_PATTERN = re.compile(r"^(tcp|tls|ucx|inproc)://[^\s/]+$")
# Slurm's time formats (sbatch --time): M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
WALLTIME_PATTERN = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(:\d{1,2}){0,2})$")
SLURM_NAME_PATTERN = re.compile(r"^[^\s#'\"\\]{1,200}$")  # one word, as sbatch reads a directive's value
SLURM_OPTIONS = ("partition", "account", "qos", "walltime", "constraint", "sbatch_directives", "prologue")


@dataclass(frozen=True)
class LaunchField:
    """One option of a launch, declared once for every surface: its name (the Python keyword and
    JSON field; the magic's flag is ``--`` and the name with dashes), the JSON type a request body
    must give it, whether null is allowed, a valid example, its help (as ``%gpugeek_launch?``
    shows it), how the magic takes it, the values it takes when they are few, and the backends it
    is for (empty: all)."""

    name: str
    json_type: str  # "string", "number", "integer", "array" (of strings) or "boolean"
    nullable: bool
    example: Any
    help: str
    magic: str = "value"  # "value" (--flag VALUE), "append" (repeatable) or "switch" (--flag alone)
    metavar: str | None = None  # the magic's name for the value, when not the flag's
    choices: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()
    spec_field: bool = True  # a PoolSpec field (keep is not: it says who owns the pool)
    minimum: float | None = None  # the least value a number takes (REST schema and panel)
    maximum: float | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


# The launch fields, in the order %gpugeek_launch lists them: its options, the REST body's type
# checks and openapi.json's LaunchRequest (server/launch_request.py), and the side panel's field
# rules (which it reads from that schema) are made from these; the vocabulary test holds
# PoolSpec.create's keywords to them.
LAUNCH_FIELDS: tuple[LaunchField, ...] = (
    LaunchField(
        "gpu_type",
        "string",
        False,
        "A100-80GB",
        "GPU type from the catalog (cpu, T4, L4, L40S, A100-40GB, A100-80GB, H100-80GB, H200-141GB)",
    ),
    LaunchField(
        "count",
        "integer",
        False,
        4,
        "number of GPUs (cpu: worker processes), one rank each",
        minimum=1,
        maximum=MAX_COUNT,
    ),
    LaunchField("interconnect", "string", True, "NVLink", "NVLink, PCIe, InfiniBand... (default: the type's first)"),
    LaunchField("framework", "string", True, "PyTorch 2.13", 'framework image, e.g. "PyTorch 2.0" (kubernetes)'),
    LaunchField("backend", "string", False, "local", "local (default), kubernetes, address or slurm", choices=BACKENDS),
    LaunchField("name", "string", True, "dev", "pool name (lowercase, digits, '-'); generated when omitted"),
    LaunchField(
        "spot_fraction", "number", False, 0.7, "share of workers on spot prices, 0..1 (e.g. 0.7)", minimum=0, maximum=1
    ),
    LaunchField(
        "base_pricing",
        "string",
        True,
        "reserved",
        "price of the non-spot workers: on-demand (default) or reserved",
        choices=("on_demand", "on-demand", "reserved"),
    ),
    LaunchField("budget", "number", True, 200, "USD; the pool stops when it has spent this much", minimum=0),
    LaunchField("idle_timeout", "number", True, 20, "minutes idle before the pool stops itself (0: never)", minimum=0),
    LaunchField("price", "number", True, 2.1, "USD per GPU-hour, overriding the catalog for this pool", minimum=0),
    LaunchField(
        "worker_memory",
        "string",
        True,
        "16GiB",
        "each worker's memory limit (dask's memory_limit: its nanny ends a worker past 95% of it); "
        "default: the host's memory shared by its workers (local), the GPU type's share (kubernetes), "
        "the site's (slurm)",
        backends=("local", "kubernetes", "slurm"),
    ),
    LaunchField(
        "address",
        "string",
        True,
        "tcp://10.0.0.5:8786",
        "scheduler address, for the address backend (tcp://host:8786)",
        backends=("address",),
    ),
    LaunchField(
        "namespace",
        "string",
        True,
        "team-risk",
        "Kubernetes namespace, for the kubernetes backend",
        backends=("kubernetes",),
    ),
    LaunchField(
        "image",
        "string",
        True,
        "pytorch/pytorch:2.13.0-cuda12.8-cudnn9-runtime",
        "container image, for the kubernetes backend (overrides framework)",
        backends=("kubernetes",),
    ),
    LaunchField(
        "partition",
        "string",
        True,
        "gpu",
        "Slurm partition, for the slurm backend (default: GpugeekConfig.slurm_partition)",
        backends=("slurm",),
    ),
    LaunchField(
        "account", "string", True, "proj42", "Slurm account to charge, for the slurm backend", backends=("slurm",)
    ),
    LaunchField("qos", "string", True, "normal", "Slurm QOS, for the slurm backend", backends=("slurm",)),
    LaunchField(
        "walltime",
        "string",
        True,
        "04:00:00",
        "time limit of each Slurm job: minutes, HH:MM:SS or D-HH:MM:SS",
        backends=("slurm",),
    ),
    LaunchField(
        "constraint",
        "string",
        True,
        "a100",
        "Slurm node features the workers need (sbatch --constraint)",
        backends=("slurm",),
    ),
    LaunchField(
        "sbatch_directives",
        "array",
        True,
        ["--exclusive"],
        "extra #SBATCH lines of the Slurm workers' job script (e.g. --exclusive, --mail-type=END)",
        magic="append",
        metavar="OPTION",
        backends=("slurm",),
    ),
    LaunchField(
        "prologue",
        "string",
        True,
        "module load cuda/12.4",
        "shell lines run before each Slurm worker starts (e.g. module load cuda/12.4)",
        magic="append",
        metavar="LINE",
        backends=("slurm",),
    ),
    LaunchField(
        "keep",
        "boolean",
        True,
        True,
        "the user's agent owns the pool: it outlives the process that launched it and takes detached jobs",
        magic="switch",
        spec_field=False,
    ),
)


@dataclass(frozen=True)
class PoolSpec:
    """A validated request for a pool. Build it with :meth:`create`.

    :attr:`gpu` is the catalog entry of ``gpu_type``, resolved once by :meth:`create` (from the
    price file it was given) and carried by the spec to the backends and the prices; a spec read
    back from a row (:meth:`from_dict`) resolves it at the first ask. It is no field: rows, JSON
    and equality hold ``gpu_type`` only.
    """

    name: str
    gpu_type: str
    count: int
    interconnect: str
    framework: str
    backend: str
    spot_fraction: float = 0.0
    budget: float | None = None
    idle_timeout: float | None = None  # minutes; None = the configured default
    price: float | None = None  # USD per GPU-hour override (all workers)
    worker_memory: int | None = None  # bytes: each worker's memory limit; None: the backend's default
    address: str | None = None  # for backend=address
    namespace: str | None = None  # for backend=kubernetes
    image: str | None = None  # for backend=kubernetes; default from the framework
    base_pricing: str = "on_demand"  # how the non-spot workers are priced: on_demand or reserved
    # for backend=slurm, defaults from GpugeekConfig.slurm_*; None or empty: the site's default
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    walltime: str | None = None  # Slurm's format, e.g. "04:00:00"
    constraint: str | None = None
    sbatch_directives: tuple[str, ...] = ()  # extra #SBATCH lines, e.g. ("--exclusive",)
    prologue: str = ""  # shell lines run before the worker starts, e.g. "module load cuda/12.4"

    @property
    def gpu(self) -> GpuType:
        """The catalog entry of ``gpu_type`` (its memory, NVML names, prices, Slurm gres).

        >>> PoolSpec.create(gpu_type="a100-80gb", count=1, name="dev").gpu.memory_gb
        80
        """
        resolved: GpuType | None = self.__dict__.get("_gpu")
        if resolved is None:
            resolved = load_catalog(get_config().price_file or None).gpu(self.gpu_type)
            object.__setattr__(self, "_gpu", resolved)  # frozen: the cache is not a field
        return resolved

    @property
    def spot_workers(self) -> int:
        # round half up, so 0.7 x 5 = 3.5 -> 4 spot (Python's round() would give banker's rounding)
        return int(math.floor(self.spot_fraction * self.count + 0.5))

    @property
    def reserved_workers(self) -> int:
        return self.count - self.spot_workers

    def pricing_of_worker(self, index: int) -> str:
        """'spot' for the first ``spot_workers`` workers, ``base_pricing`` for the rest."""
        return "spot" if index < self.spot_workers else self.base_pricing

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PoolSpec:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if "sbatch_directives" in known:  # a list once stored as JSON
            known["sbatch_directives"] = tuple(known["sbatch_directives"] or ())
        return cls(**known)

    def with_name(self, name: str) -> PoolSpec:
        renamed = replace(self, name=_check_name(name))
        if "_gpu" in self.__dict__:
            object.__setattr__(renamed, "_gpu", self.__dict__["_gpu"])
        return renamed

    @classmethod
    def create(
        cls,
        gpu_type: Any = "cpu",
        count: Any = 1,
        interconnect: Any = None,
        framework: Any = None,
        backend: Any = None,
        spot_fraction: Any = 0.0,
        budget: Any = None,
        idle_timeout: Any = None,
        name: Any = None,
        price: Any = None,
        worker_memory: Any = None,
        address: Any = None,
        namespace: Any = None,
        image: Any = None,
        base_pricing: Any = None,
        partition: Any = None,
        account: Any = None,
        qos: Any = None,
        walltime: Any = None,
        constraint: Any = None,
        sbatch_directives: Any = None,
        prologue: Any = None,
        price_file: str | None = None,
    ) -> PoolSpec:
        """Validate raw values (strings from a magic or JSON from the panel) into a spec."""
        config = get_config()
        catalog = load_catalog(price_file if price_file is not None else config.price_file or None)
        gpu = catalog.gpu("cpu" if gpu_type is None else gpu_type)
        count_value = _check_count(count)
        backend_value = _check_backend(backend if backend not in (None, "") else config.default_backend)
        interconnect_value = _check_interconnect(interconnect, gpu.name, gpu.interconnects)
        framework_value = framework if framework not in (None, "") else catalog.default_framework
        catalog.image_for(framework_value)  # validates
        slurm_given = {
            "partition": partition,
            "account": account,
            "qos": qos,
            "walltime": walltime,
            "constraint": constraint,
            "sbatch_directives": sbatch_directives,
            "prologue": prologue,
        }
        _refuse_other_backends_fields(
            backend_value, address=address, namespace=namespace, image=image, worker_memory=worker_memory, **slurm_given
        )
        address_value = _check_address(address, backend_value)
        namespace_value = _check_namespace(namespace, backend_value, config.kubernetes_namespace)
        pool_name = _check_name(name) if name not in (None, "") else _generated_name(gpu.name)
        slurm = _check_slurm_options(backend_value, **slurm_given)
        spec = cls(
            name=pool_name,
            gpu_type=gpu.name,
            count=count_value,
            interconnect=interconnect_value,
            framework=framework_value,
            backend=backend_value,
            spot_fraction=_check_fraction(spot_fraction),
            budget=_check_nonnegative(budget, "budget", 200, allow_none=True),
            idle_timeout=_check_nonnegative(idle_timeout, "idle_timeout", 20, allow_none=True),
            price=_check_nonnegative(price, "price", 2.1, allow_none=True),
            worker_memory=_check_memory(
                worker_memory if _given(worker_memory) or backend_value == "address" else config.worker_memory
            ),
            address=address_value,
            namespace=namespace_value,
            image=str(image) if image not in (None, "") else None,
            base_pricing=_check_base_pricing(base_pricing),
            **slurm,
        )
        object.__setattr__(spec, "_gpu", gpu)  # resolved once: every consumer reads spec.gpu
        return spec


def _generated_name(gpu_type: str) -> str:
    return f"{gpu_type.lower().replace('_', '-')}-{secrets.token_hex(2)}"


def _check_name(name: Any) -> str:
    text = str(name).strip()
    if not NAME_PATTERN.match(text):
        raise SpecError(
            field="name",
            value=name,
            rule="lowercase letters, digits and '-', 1-63 characters, starting and ending with a letter or digit",
            example="dev",
        )
    return text


def _check_count(count: Any) -> int:
    try:
        value = int(str(count).strip())
    except (TypeError, ValueError):
        value = -1
    if isinstance(count, float) and not count.is_integer():
        value = -1
    if isinstance(count, bool) or not 1 <= value <= MAX_COUNT:
        raise SpecError(field="count", value=count, rule=f"a whole number from 1 to {MAX_COUNT}", example=4)
    return value


def _check_backend(backend: Any) -> str:
    text = str(backend).strip().lower()
    if text not in BACKENDS:
        raise SpecError(field="backend", value=backend, rule=f"one of {', '.join(BACKENDS)}", example="local")
    return text


def _check_interconnect(interconnect: Any, gpu_name: str, allowed: tuple[str, ...]) -> str:
    if interconnect in (None, ""):
        return allowed[0]
    by_lower = {a.lower(): a for a in allowed}
    value = by_lower.get(str(interconnect).strip().lower())
    if value is None:
        raise SpecError(
            field="interconnect",
            value=interconnect,
            rule=f"one of {', '.join(allowed)} for {gpu_name}",
            example=allowed[0],
        )
    return value


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _check_fraction(value: Any) -> float:
    if value in (None, ""):
        return 0.0
    number = _as_float(value)
    if number is None or not 0.0 <= number <= 1.0:
        raise SpecError(field="spot_fraction", value=value, rule="a number from 0 to 1", example=0.7)
    return number


def _check_nonnegative(value: Any, field: str, example: float, allow_none: bool) -> float | None:
    if value in (None, "") and allow_none:
        return None
    number = _as_float(value)
    if number is None or number < 0:
        raise SpecError(field=field, value=value, rule="a number >= 0", example=example)
    return number


MIN_WORKER_MEMORY = 256 * 2**20  # a worker with torch imported needs about this much to start


def _check_memory(value: Any) -> int | None:
    """A size in bytes from ``16GiB``, ``512 MB`` or a number of bytes (dask's ``parse_bytes``)."""
    if value in (None, ""):
        return None
    from dask.utils import parse_bytes  # only when a size is given: dask is slow to import

    try:
        size = int(value) if isinstance(value, int) and not isinstance(value, bool) else parse_bytes(str(value))
    except (TypeError, ValueError):
        size = -1
    if size < MIN_WORKER_MEMORY:
        raise SpecError(
            field="worker_memory",
            value=value,
            rule="a size such as 16GiB or 512MB, at least 256MiB",
            example=_EXAMPLES["worker_memory"],
        )
    return size


def _check_base_pricing(value: Any) -> str:
    if value in (None, ""):
        return "on_demand"
    text = str(value).strip().lower().replace("-", "_")
    if text not in ("on_demand", "reserved"):
        raise SpecError(field="base_pricing", value=value, rule="on-demand or reserved", example="reserved")
    return text


def _refuse_other_backends_fields(backend: str, **given: Any) -> None:
    """A field declared for other backends (``LaunchField.backends``) is refused when given, naming
    the first such field and a backend it is for."""
    for field in LAUNCH_FIELDS:
        if field.backends and backend not in field.backends and _given(given.get(field.name)):
            for_backend = field.backends[0]
            raise SpecError(
                Phrase(
                    "{field} {value} only applies to {backend} (e.g. {example})", backend=Setting(backend=for_backend)
                ),
                field=field.name,
                value=given[field.name],
                rule=f"only with backend {for_backend!r}",
                example=Setting(backend=for_backend, **{field.name: field.example}),
            )


def _check_address(address: Any, backend: str) -> str | None:
    if backend != "address":
        return None
    if address in (None, ""):
        raise SpecError(
            Phrase("{backend} needs {field} (e.g. {example})", backend=Setting(backend="address")),
            field="address",
            value=address,
            rule="needed with backend 'address'",
            example="tcp://127.0.0.1:8786",
        )
    text = str(address).strip()
    if "://" not in text:
        text = "tcp://" + text
    if not ADDRESS_PATTERN.match(text) or not re.search(r":\d+$", text):
        raise SpecError(
            field="address",
            value=address,
            rule="a dask scheduler address, scheme://host:port",
            example="tcp://127.0.0.1:8786",
        )
    return text


def _check_namespace(namespace: Any, backend: str, default_namespace: str) -> str | None:
    if backend != "kubernetes":
        return None
    text = str(namespace).strip() if namespace not in (None, "") else default_namespace
    if not NAME_PATTERN.match(text):
        raise SpecError(
            field="namespace",
            value=namespace,
            rule="a DNS-1123 label: lowercase letters, digits and '-'",
            example="team-risk",
        )
    return text


def _given(value: Any) -> bool:
    return value not in (None, "") and not (isinstance(value, list | tuple) and not value)


def _check_slurm_options(backend: str, **given: Any) -> dict[str, Any]:
    """The slurm options of a spec: given ones checked, the others from ``GpugeekConfig.slurm_*``;
    refused (naming the first) for another backend."""
    if backend != "slurm":
        return {}
    config = get_config()
    defaults: dict[str, Any] = {
        "partition": config.slurm_partition,
        "account": config.slurm_account,
        "qos": config.slurm_qos,
        "walltime": config.slurm_walltime,
        "constraint": config.slurm_constraint,
        "sbatch_directives": list(config.slurm_sbatch_directives),
        "prologue": config.slurm_prologue,
    }
    chosen = {field: value if _given(value) else defaults[field] for field, value in given.items()}
    checked: dict[str, Any] = {}
    for field in ("partition", "account", "qos", "constraint"):
        checked[field] = _check_slurm_word(chosen[field], field)
    checked["walltime"] = _check_walltime(chosen["walltime"])
    checked["sbatch_directives"] = _check_sbatch_directives(chosen["sbatch_directives"])
    checked["prologue"] = _check_prologue(chosen["prologue"])
    return checked


_EXAMPLES: dict[str, Any] = {field.name: field.example for field in LAUNCH_FIELDS}  # declared once, there


def _check_slurm_word(value: Any, field: str) -> str | None:
    if not _given(value):
        return None
    text = str(value).strip()
    if not SLURM_NAME_PATTERN.match(text):
        raise SpecError(
            field=field,
            value=value,
            rule="one word, without spaces, quotes or '#'",
            example=_EXAMPLES[field],
        )
    return text


def _check_walltime(value: Any) -> str | None:
    if not _given(value):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:  # minutes, as Slurm reads a number
        return str(value)
    text = str(value).strip()
    if isinstance(value, bool) or not WALLTIME_PATTERN.match(text):
        raise SpecError(
            Phrase("{field} {value} is not a Slurm time limit ({rule}; e.g. {example})"),
            field="walltime",
            value=value,
            rule="minutes, HH:MM:SS or D-HH:MM:SS",
            example=_EXAMPLES["walltime"],
        )
    return text


def _check_sbatch_directives(value: Any) -> tuple[str, ...]:
    """Each one an #SBATCH line's option (``--exclusive``, ``--mail-type=END``); a missing ``--`` is
    added (a magic's ``--sbatch-directives exclusive``), a pasted ``#SBATCH`` dropped."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(item, str) for item in items):
        raise SpecError(
            field="sbatch_directives",
            value=value,
            rule="a list of sbatch options",
            example=_EXAMPLES["sbatch_directives"],
        )
    directives = []
    for item in items:
        text = item.strip().removeprefix("#SBATCH").strip()
        if not text:
            continue
        if "\n" in text or "\r" in text:
            raise SpecError(
                field="sbatch_directives",
                value=item,
                rule="one sbatch option per item, on one line",
                example=_EXAMPLES["sbatch_directives"],
            )
        directives.append(text if text.startswith("-") else "--" + text)
    return tuple(directives)


def _check_prologue(value: Any) -> str:
    lines = [value] if isinstance(value, str) else value
    if not isinstance(lines, list | tuple) or not all(isinstance(line, str) for line in lines):
        raise SpecError(
            field="prologue",
            value=value,
            rule="shell lines, as one string or a list of strings",
            example=_EXAMPLES["prologue"],
        )
    text = "\n".join(line.rstrip() for line in lines).strip("\n")
    if "\x00" in text:
        raise SpecError(
            field="prologue", value=value, rule="shell text without NUL characters", example=_EXAMPLES["prologue"]
        )
    return text


@functools.cache
def launch_keywords() -> frozenset[str]:
    """The keywords a launch takes from Python (``gpugeek_jupyter.launch``, ``create_job``): those of
    :meth:`PoolSpec.create`, read from it."""
    return frozenset(inspect.signature(PoolSpec.create).parameters)
