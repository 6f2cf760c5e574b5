"""Prices in force for a pool: fixed when the pool starts, stored with it, never rewritten.

>>> from gpugeek_jupyter.spec import PoolSpec
>>> spec = PoolSpec.create(gpu_type="A100-80GB", count=4, spot_fraction=0.5, backend="local")
>>> prices = prices_in_force(spec)
>>> round(hourly_rate(spec, prices), 2)   # 2 spot x 1.57 + 2 on-demand x 5.12
13.38
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .catalog import load_catalog
from .config import get_config

if TYPE_CHECKING:
    from .spec import PoolSpec


def prices_in_force(spec: PoolSpec) -> dict[str, Any]:
    """USD per GPU-hour for each pricing class, with ``--price`` overriding all of them: the GPU's
    from the spec's catalog entry (:attr:`~gpugeek_jupyter.spec.PoolSpec.gpu`), storage and network
    from the configured price file."""
    catalog = load_catalog(get_config().price_file or None)
    gpu_prices = spec.gpu.prices.to_dict()
    if spec.price is not None:
        gpu_prices = {kind: spec.price for kind in gpu_prices}
    return {
        **gpu_prices,
        "storage_usd_per_gb_month": catalog.storage_usd_per_gb_month,
        "network_usd_per_gb": catalog.network_usd_per_gb,
        "prices_as_of": catalog.prices_as_of,
        "overridden": spec.price is not None,
    }


def price_of(prices: dict[str, Any], pricing: str) -> float:
    """USD per hour of one worker priced as ``pricing`` (spot, reserved or on_demand)."""
    return float(prices[pricing])


def hourly_rate(spec: PoolSpec, prices: dict[str, Any]) -> float:
    """USD per hour of the whole pool when all its workers run."""
    return sum(price_of(prices, spec.pricing_of_worker(i)) for i in range(spec.count))
