"""PoolSpec validation: every bad value gets one line naming it and a valid example."""

from __future__ import annotations

import pytest

from gpugeek_jupyter.errors import SpecError
from gpugeek_jupyter.spec import PoolSpec


def test_valid_spec_normalises_strings_from_a_magic_line() -> None:
    spec = PoolSpec.create(
        gpu_type="a100-80gb",
        count="4",
        interconnect="nvlink",
        framework="PyTorch 2.0",
        backend="LOCAL",
        spot_fraction="0.7",
        budget="200",
        idle_timeout="20",
        name="train",
    )
    assert (spec.gpu_type, spec.count, spec.interconnect, spec.backend) == ("A100-80GB", 4, "NVLink", "local")
    assert (spec.spot_fraction, spec.budget, spec.idle_timeout, spec.name) == (0.7, 200.0, 20.0, "train")


@pytest.mark.parametrize(
    ("options", "field", "bad_value", "example"),
    [
        ({"count": "0"}, "count", "'0'", "count=4"),
        ({"count": "two"}, "count", "'two'", "count=4"),
        ({"count": 2.5}, "count", "2.5", "count=4"),
        ({"count": "5000"}, "count", "'5000'", "count=4"),
        ({"gpu_type": "V100"}, "gpu_type", "'V100'", "gpu_type='A100-80GB'"),
        ({"backend": "pbs"}, "backend", "'pbs'", "backend='local'"),
        ({"spot_fraction": "1.5"}, "spot_fraction", "'1.5'", "spot_fraction=0.7"),
        ({"spot_fraction": "nan"}, "spot_fraction", "'nan'", "spot_fraction=0.7"),
        ({"budget": "-1"}, "budget", "'-1'", "budget=200"),
        ({"idle_timeout": "soon"}, "idle_timeout", "'soon'", "idle_timeout=20"),
        ({"name": "My Pool"}, "name", "'My Pool'", "name='dev'"),
        ({"name": "-dev"}, "name", "'-dev'", "name='dev'"),
        ({"gpu_type": "T4", "interconnect": "NVLink"}, "interconnect", "'NVLink'", "interconnect='PCIe'"),
        ({"framework": "TensorFlow 1"}, "framework", "'TensorFlow 1'", "framework='PyTorch"),
        ({"backend": "address"}, "address", "backend='address' needs address", "address='tcp://127.0.0.1:8786'"),
        ({"backend": "address", "address": "not an address"}, "address", "'not an address'", "address='tcp://"),
        ({"address": "tcp://1.2.3.4:8786"}, "address", "'tcp://1.2.3.4:8786'", "backend='address'"),
        ({"backend": "kubernetes", "namespace": "Team_Risk"}, "namespace", "'Team_Risk'", "namespace='team-risk'"),
        ({"price": "-2"}, "price", "'-2'", "price=2.1"),
        ({"base_pricing": "free"}, "base_pricing", "'free'", "base_pricing='reserved'"),
        ({"worker_memory": "lots"}, "worker_memory", "'lots'", "worker_memory='16GiB'"),
        ({"worker_memory": "10MB"}, "worker_memory", "'10MB'", "worker_memory='16GiB'"),
        ({"worker_memory": True}, "worker_memory", "True", "worker_memory='16GiB'"),
        (
            {"backend": "address", "address": "tcp://1.2.3.4:8786", "worker_memory": "4GiB"},
            "worker_memory",
            "'4GiB'",
            "backend='local'",
        ),
    ],
)
def test_invalid_value_is_named_with_a_keyword_example(options: dict, field: str, bad_value: str, example: str) -> None:
    with pytest.raises(SpecError) as raised:
        PoolSpec.create(**options)
    message = str(raised.value)
    assert "\n" not in message
    assert bad_value in message
    assert example in message
    assert "--" not in message and "%gpugeek" not in message
    assert raised.value.field == field


def test_a_field_error_carries_its_facts() -> None:
    with pytest.raises(SpecError) as raised:
        PoolSpec.create(count="0")
    error = raised.value
    assert (error.field, error.value, error.rule, error.example) == ("count", "0", "a whole number from 1 to 1024", 4)


def test_spot_fraction_rounds_half_up_and_labels_the_first_workers_spot() -> None:
    spec = PoolSpec.create(count=5, spot_fraction=0.7, base_pricing="reserved")
    assert (spec.spot_workers, spec.reserved_workers) == (4, 1)
    assert [spec.pricing_of_worker(i) for i in range(5)] == ["spot"] * 4 + ["reserved"]
    assert PoolSpec.create(count=10, spot_fraction=0.7).spot_workers == 7


def test_generated_name_is_a_valid_kubernetes_label() -> None:
    name = PoolSpec.create(gpu_type="H100-80GB").name
    assert PoolSpec.create(name=name).name == name
    assert name.startswith("h100-80gb-")


def test_spec_round_trips_through_a_dict() -> None:
    spec = PoolSpec.create(gpu_type="L4", count=3, spot_fraction=0.5, budget=10, name="x1")
    assert PoolSpec.from_dict(spec.to_dict()) == spec


def test_the_gpu_type_is_resolved_once_when_the_spec_is_made_and_carried_to_the_prices(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpugeek_jupyter.spec as spec_module
    from gpugeek_jupyter.catalog import load_catalog
    from gpugeek_jupyter.pools.local import LocalBackend
    from gpugeek_jupyter.pricing import prices_in_force

    prices = tmp_path / "prices.toml"
    prices.write_text("[gpus.H100-80GB]\non_demand = 2.49\n")
    spec = PoolSpec.create(gpu_type="h100-80gb", count=2, name="train", backend="local", price_file=str(prices))
    cpu = PoolSpec.create(gpu_type="cpu", count=1, name="cpu")
    assert spec.gpu == load_catalog(prices).gpu("H100-80GB")

    def no_second_lookup(*args: object, **kwargs: object) -> None:
        raise AssertionError("the catalog was read again for the spec's GPU type")

    monkeypatch.setattr(spec_module, "load_catalog", no_second_lookup)
    assert prices_in_force(spec)["on_demand"] == 2.49  # the price file the spec was made with
    assert spec.with_name("again").gpu is spec.gpu
    LocalBackend().preflight(cpu)  # a cpu pool needs no GPU here: known from the spec alone


def test_a_spec_read_back_from_its_row_resolves_its_gpu_type_and_keeps_it_out_of_the_row() -> None:
    made = PoolSpec.create(gpu_type="A100-80GB", count=1, name="dev")
    row = made.to_dict()
    assert "gpu" not in row and "_gpu" not in row and row["gpu_type"] == "A100-80GB"
    read_back = PoolSpec.from_dict(row)
    assert read_back == made and read_back.gpu == made.gpu and read_back.gpu.memory_gb == 80.0


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"namespace": "team-risk"},
            "namespace 'team-risk' only applies to backend='kubernetes' (e.g. backend='kubernetes', namespace='team-risk')",
        ),
        ({"image": "mine:1"}, "image 'mine:1' only applies to backend='kubernetes' (e.g. backend='kubernetes', image="),
        (
            {"backend": "kubernetes", "qos": "high"},
            "qos 'high' only applies to backend='slurm' (e.g. backend='slurm', qos='normal')",
        ),
    ],
)
def test_a_field_of_another_backend_is_refused_as_its_declaration_says(given: dict[str, str], message: str) -> None:
    with pytest.raises(SpecError) as error:
        PoolSpec.create(**given)
    assert str(error.value).startswith(message), str(error.value)


def test_worker_memory_is_a_size_in_bytes_however_it_is_written() -> None:
    assert PoolSpec.create(worker_memory="16GiB").worker_memory == 16 * 2**30
    assert PoolSpec.create(worker_memory="512 MB").worker_memory == 512 * 10**6
    assert PoolSpec.create(worker_memory=2**30).worker_memory == 2**30
    assert PoolSpec.create().worker_memory is None
    spec = PoolSpec.create(worker_memory="1.5GiB")
    assert PoolSpec.from_dict(spec.to_dict()) == spec  # a registry row gives it back
