"""The GPU catalog is one data file, overridable by a user price file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpugeek_jupyter.catalog import load_catalog
from gpugeek_jupyter.errors import SpecError

EXPECTED = ["cpu", "T4", "L4", "L40S", "A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB"]


def test_catalog_lists_every_supported_type_with_prices_and_kubernetes_labels() -> None:
    catalog = load_catalog()
    assert catalog.names() == EXPECTED
    for gpu in catalog.gpus.values():
        assert gpu.interconnects
        assert 0 < gpu.prices.spot <= gpu.prices.reserved <= gpu.prices.on_demand
        assert gpu.is_cpu or (gpu.k8s_product and gpu.nvml_patterns and gpu.memory_gb > 0)
    assert catalog.prices_as_of


def test_nvml_names_identify_catalog_types() -> None:
    catalog = load_catalog()
    assert catalog.identify_nvml_name("NVIDIA A100-SXM4-80GB").name == "A100-80GB"
    assert catalog.identify_nvml_name("NVIDIA H200").name == "H200-141GB"
    assert catalog.identify_nvml_name("Tesla T4").name == "T4"
    assert catalog.identify_nvml_name("Matrox G200") is None


def test_user_price_file_overrides_only_what_it_names(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text("[gpus.H100-80GB]\non_demand = 2.49\n[meta]\nnetwork_usd_per_gb = 0.0\n")
    catalog = load_catalog(prices)
    assert catalog.gpu("H100-80GB").prices.on_demand == 2.49
    assert catalog.gpu("H100-80GB").prices.spot == load_catalog().gpu("H100-80GB").prices.spot
    assert catalog.network_usd_per_gb == 0.0


def test_missing_price_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="does not exist"):
        load_catalog(tmp_path / "nope.toml")
