"""Pool and job models: the panel's keys, money from worker intervals, utilization from the registry."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpugeek_jupyter.dashboards import pool_dashboard_path
from gpugeek_jupyter.pricing import prices_in_force
from gpugeek_jupyter.server.handlers import load_openapi_text, route_table
from gpugeek_jupyter.server.models import job_usd, make_job_model, make_pool_model, pool_cost, pool_telemetry
from gpugeek_jupyter.spec import PoolSpec
from gpugeek_jupyter.store import JobStatus, PoolRecord, PoolStatus, Registry

REPO = Path(__file__).resolve().parents[2]
START = 1_000_000.0
LOST_AFTER = 15.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def interface_keys(name: str) -> set[str]:
    """The property names of TypeScript interface ``name`` in the panel's models.ts."""
    source = (REPO / "labextension" / "src" / "models.ts").read_text()
    body = re.search(r"export interface " + name + r" \{(.*?)\n\}", source, re.S)
    assert body, f"interface {name} not found in labextension/src/models.ts"
    return set(re.findall(r"^\s+(\w+)\??:", body.group(1), re.M))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def registry(tmp_path: Path, clock: Clock) -> Registry:
    return Registry(tmp_path / "models.sqlite", clock=clock)


def two_worker_pool(registry: Registry, budget: float | None = None, gpu_type: str = "cpu") -> PoolRecord:
    """A ready pool with one spot and one on-demand worker, both started at START."""
    spec = PoolSpec.create(gpu_type=gpu_type, count=2, spot_fraction=0.5, backend="local", name="models", budget=budget)
    record = registry.add_pool(spec.name, spec.backend, spec.to_dict(), prices_in_force(spec), owner="kernel abc")
    for index in range(2):
        registry.open_worker_interval(record.id, str(index), spec.pricing_of_worker(index), pid=12345 + index)
    registry.set_pool_status(
        record.id, PoolStatus.READY, scheduler_address="tcp://127.0.0.1:1", dashboard_link="http://127.0.0.1:2/status"
    )
    return registry.pool_by_id(record.id)


def pool_model(registry: Registry, record: PoolRecord, now: float) -> dict[str, Any]:
    record = registry.pool_by_id(record.id)
    cost = pool_cost(registry, record, now, LOST_AFTER)
    return make_pool_model(record, registry.worker_intervals(), cost, pool_telemetry(registry, record))


def test_pool_model_has_exactly_the_panels_keys_and_is_json(registry: Registry, clock: Clock) -> None:
    record = two_worker_pool(registry)
    model = pool_model(registry, record, clock.now)
    assert set(model) == interface_keys("IPoolModel")
    assert json.loads(json.dumps(model)) == model
    assert model["created_at"].startswith("1970-01-12T13:46:40")  # START in UTC, ISO 8601
    assert model["owner"] == "kernel abc"


def test_a_pool_launched_from_a_notebook_is_owned_by_the_notebook_as_people_name_it(
    registry: Registry, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert pool_model(registry, two_worker_pool(registry), clock.now)["owner_label"] is None
    registry.set_pool_status(registry.latest_pool("models").id, PoolStatus.STOPPED)
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/ada/work/train.ipynb")  # Jupyter sets it in each kernel
    model = pool_model(registry, two_worker_pool(registry), clock.now)
    assert (model["owner"], model["owner_label"]) == ("kernel abc", "notebook train.ipynb")


def test_job_model_has_exactly_the_panels_keys(registry: Registry, clock: Clock) -> None:
    record = two_worker_pool(registry)
    job = registry.add_job("job-1", record.id, record.name, "torchrun", "ab" * 32, ranks=2, hyperparams={"lr": 0.1})
    model = make_job_model(job, job_usd(registry, job, clock.now, LOST_AFTER), clock.now)
    assert set(model) == interface_keys("IJobModel")
    assert json.loads(json.dumps(model)) == model


def test_live_pool_costs_its_workers_intervals_at_the_prices_fixed_at_launch(registry: Registry, clock: Clock) -> None:
    record = two_worker_pool(registry, budget=10.0)
    prices = record.prices
    clock.now = START + 1800.0
    registry.heartbeat([record.id])
    model = pool_model(registry, record, clock.now)
    expected = 0.5 * (prices["spot"] + prices["on_demand"])
    assert model["usd_so_far"] == pytest.approx(expected, rel=1e-6)
    assert model["usd_per_hour"] == pytest.approx(prices["spot"] + prices["on_demand"])
    assert model["budget_usd"] == 10.0
    assert model["budget_fraction"] == pytest.approx(expected / 10.0, rel=1e-6)
    # the non-spot worker is priced on-demand (the default), so none is counted as reserved
    assert (model["workers_ready"], model["spot_workers"], model["reserved_workers"]) == (2, 1, 0)


def test_stopped_pool_keeps_its_spend_but_costs_nothing_per_hour(registry: Registry, clock: Clock) -> None:
    record = two_worker_pool(registry)
    clock.now = START + 3600.0
    registry.set_pool_status(record.id, PoolStatus.STOPPED, reason="stopped by the user")
    clock.now = START + 7200.0  # later polls must not add the time after the stop
    model = pool_model(registry, record, clock.now)
    assert model["usd_so_far"] == pytest.approx(record.prices["spot"] + record.prices["on_demand"], rel=1e-6)
    assert (model["usd_per_hour"], model["workers_ready"], model["status"]) == (0.0, 0, "stopped")
    assert model["budget_fraction"] is None and model["reason"] == "stopped by the user"


def test_job_costs_the_pool_workers_only_while_it_ran(registry: Registry, clock: Clock) -> None:
    record = two_worker_pool(registry)
    clock.now = START + 600.0
    job = registry.add_job("job-2", record.id, record.name, "torchrun", "cd" * 32, ranks=2)
    clock.now = START + 1500.0
    registry.heartbeat([record.id])
    registry.set_job_status("job-2", JobStatus.SUCCEEDED)
    clock.now = START + 3000.0
    registry.heartbeat([record.id])
    model = make_job_model(
        registry.job(job.id), job_usd(registry, registry.job(job.id), clock.now, LOST_AFTER), clock.now
    )
    assert model["usd"] == pytest.approx(0.25 * (record.prices["spot"] + record.prices["on_demand"]), rel=1e-6)
    assert (model["duration_s"], model["status"], model["ranks"]) == (900.0, "succeeded", 2)


def test_gpu_utilization_rows_become_percent_history_and_latest_mean(registry: Registry, clock: Clock) -> None:
    record = two_worker_pool(registry, gpu_type="A100-80GB")
    for at, util in ((1.0, 0.25), (2.0, 0.5), (3.0, 0.875)):
        registry.add_utilization(record.id, util, gpus=2, at=START + at)
    model = pool_model(registry, record, START + 3.0)
    assert model["sm_util_history"] == [25.0, 50.0, 87.5]
    assert model["mean_sm_util"] == 87.5
    assert (model["reason"], model["util_kind"]) == (None, "sm")


def test_cpu_pool_shows_cpu_utilization_labelled_as_such(registry: Registry, clock: Clock) -> None:
    record = two_worker_pool(registry)
    registry.add_utilization(record.id, 0.9, gpus=2, at=START + 1.0)  # its CPUs, busy; not GPUs
    model = pool_model(registry, record, START + 1.0)
    assert (model["mean_sm_util"], model["sm_util_history"], model["util_kind"]) == (90.0, [90.0], "cpu")
    assert model["reason"] is None


def test_openapi_describes_every_route_and_the_models_keys() -> None:
    spec = json.loads(load_openapi_text())  # as served: the LaunchRequest made from the launch fields
    schemas = spec["components"]["schemas"]
    assert set(schemas["Pool"]["properties"]) == interface_keys("IPoolModel")
    assert set(schemas["Job"]["properties"]) == interface_keys("IJobModel")
    assert set(schemas["LaunchRequest"]["properties"]) >= interface_keys("ILaunchRequest")
    documented = {re.sub(r"\{\w+\}", "X", path) for path in spec["paths"]}
    served = {
        re.sub(r"\(\?P<\w+>[^)]+\)", "X", pattern).removeprefix("/").removesuffix("/?").replace("\\.", ".")
        for pattern, _ in route_table("/")
    }
    assert {"/" + path for path in served} == documented


def test_a_local_pools_dashboard_is_the_servers_own_route_to_it(registry: Registry, clock: Clock) -> None:
    record = two_worker_pool(registry)
    registry.set_pool_status(record.id, PoolStatus.READY, dashboard_link=pool_dashboard_path("models"))
    model = pool_model(registry, record, clock.now)
    assert model["dashboard_link"] == model["dashboard_path"] == "gpugeek/pools/models/dashboard/status"


def test_an_ended_pool_carries_no_dashboard_link(registry: Registry, clock: Clock) -> None:
    record = two_worker_pool(registry)
    registry.set_pool_status(record.id, PoolStatus.STOPPED, reason="stopped by the user")
    model = pool_model(registry, record, clock.now)
    assert (model["status"], model["dashboard_link"], model["dashboard_path"]) == ("stopped", None, None)
