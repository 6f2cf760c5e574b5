"""The GPU catalog: GPU types, how to recognise them, what they cost.

The data lives in one file, ``data/catalog.toml``; a user price file (same layout, any subset of
keys) is laid over it. Everything that needs a GPU fact or a price reads it from here.

>>> catalog = load_catalog()
>>> catalog.gpu("a100-80gb").memory_gb
80
"""

from __future__ import annotations

import copy
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import Phrase, SpecError

CPU = "cpu"


@dataclass(frozen=True)
class Prices:
    """USD per GPU-hour (per worker-hour for ``cpu``)."""

    on_demand: float
    spot: float
    reserved: float

    def to_dict(self) -> dict[str, float]:
        return {"on_demand": self.on_demand, "spot": self.spot, "reserved": self.reserved}


@dataclass(frozen=True)
class GpuType:
    name: str
    memory_gb: float
    nvml_patterns: tuple[str, ...]
    k8s_product: str
    interconnects: tuple[str, ...]
    prices: Prices
    purchase_usd: float = 0.0  # owning one, for owned-vs-cloud (cost.tco.compare_owned)
    power_watts: float = 0.0
    slurm_gres: str = ""  # the gres type Slurm sites commonly give it (--gres=gpu:<slurm_gres>:1)

    @property
    def is_cpu(self) -> bool:
        return self.name == CPU

    def matches_nvml_name(self, nvml_name: str) -> bool:
        lowered = nvml_name.lower()
        return any(p.lower() in lowered for p in self.nvml_patterns)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "memory_gb": self.memory_gb,
            "nvml_patterns": list(self.nvml_patterns),
            "k8s_product": self.k8s_product,
            "interconnects": list(self.interconnects),
            "prices": self.prices.to_dict(),
            "purchase_usd": self.purchase_usd,
            "power_watts": self.power_watts,
            "slurm_gres": self.slurm_gres,
        }


@dataclass(frozen=True)
class Catalog:
    gpus: dict[str, GpuType]
    frameworks: dict[str, str]
    default_framework: str
    storage_usd_per_gb_month: float
    network_usd_per_gb: float
    prices_as_of: str
    _aliases: dict[str, str] = field(default_factory=dict, repr=False)

    def names(self) -> list[str]:
        return list(self.gpus)

    def gpu(self, name: str) -> GpuType:
        """The GPU type called ``name`` (case-insensitive); SpecError naming valid ones otherwise."""
        key = self._aliases.get(str(name).strip().lower())
        if key is None:
            raise SpecError(
                Phrase("unknown GPU type {value} (choose {rule}; e.g. {example})"),
                field="gpu_type",
                value=name,
                rule=f"one of {', '.join(self.gpus)}",
                example="A100-80GB",
            )
        return self.gpus[key]

    def image_for(self, framework: str) -> str:
        try:
            return self.frameworks[framework]
        except KeyError:
            raise SpecError(
                Phrase("unknown framework {value} (choose {rule}; e.g. {example})"),
                field="framework",
                value=framework,
                rule=f"one of {', '.join(self.frameworks)}",
                example=self.default_framework,
            ) from None

    def identify_nvml_name(self, nvml_name: str) -> GpuType | None:
        for gpu in self.gpus.values():
            if gpu.nvml_patterns and gpu.matches_nvml_name(nvml_name):
                return gpu
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu_types": [g.to_dict() for g in self.gpus.values()],
            "frameworks": dict(self.frameworks),
            "default_framework": self.default_framework,
            "storage_usd_per_gb_month": self.storage_usd_per_gb_month,
            "network_usd_per_gb": self.network_usd_per_gb,
            "prices_as_of": self.prices_as_of,
        }


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise SpecError(f"price file {str(path)!r} does not exist (e.g. GPUGEEK_PRICE_FILE=~/prices.toml)") from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"price file {str(path)!r} is not valid TOML: {e}") from e


def _build(raw: dict[str, Any]) -> Catalog:
    gpus: dict[str, GpuType] = {}
    for name, row in raw["gpus"].items():
        try:
            gpus[name] = GpuType(
                name=name,
                memory_gb=row["memory_gb"],
                nvml_patterns=tuple(row.get("nvml_patterns", ())),
                k8s_product=row.get("k8s_product", ""),
                interconnects=tuple(row["interconnects"]),
                prices=Prices(float(row["on_demand"]), float(row["spot"]), float(row["reserved"])),
                purchase_usd=float(row.get("purchase_usd", 0.0)),
                power_watts=float(row.get("power_watts", 0.0)),
                slurm_gres=str(row.get("slurm_gres", "")),
            )
        except KeyError as e:
            raise SpecError(f"catalog entry {name!r} lacks the key {e} (see gpugeek_jupyter/data/catalog.toml)") from e
    frameworks = {k: v for k, v in raw.get("frameworks", {}).items() if k != "default"}
    meta = raw.get("meta", {})
    return Catalog(
        gpus=gpus,
        frameworks=frameworks,
        default_framework=raw.get("frameworks", {}).get("default", next(iter(frameworks), "")),
        storage_usd_per_gb_month=float(meta.get("storage_usd_per_gb_month", 0.0)),
        network_usd_per_gb=float(meta.get("network_usd_per_gb", 0.0)),
        prices_as_of=str(meta.get("prices_as_of", "")),
        _aliases={n.lower(): n for n in gpus},
    )


@lru_cache(maxsize=8)
def _load_cached(price_file: str | None) -> Catalog:
    raw = tomllib.loads(resources.files("gpugeek_jupyter").joinpath("data/catalog.toml").read_text())
    if price_file:
        raw = _deep_merge(raw, _read_toml(Path(price_file).expanduser()))
    return _build(raw)


def load_catalog(price_file: str | Path | None = None) -> Catalog:
    """The built-in catalog with ``price_file`` (a TOML file of overrides) laid over it."""
    return _load_cached(str(price_file) if price_file else None)
