"""One MLflow run per job, against a real ``mlflow server`` (SQLite backend store) this module starts
and stops by its pid.

The server needs the full ``mlflow`` package (the package itself needs only ``mlflow-skinny``, the
client): its command is ``GPUGEEK_TEST_MLFLOW_SERVER`` (e.g. ``/opt/mlflow-venv/bin/mlflow``), else
an ``mlflow`` next to this Python, else the tests are skipped saying so.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpugeek_jupyter.jobs import run_cell, run_script

mlflow = pytest.importorskip("mlflow", reason="the mlflow client: pip install 'gpugeek-jupyter[mlflow]'")


def _server_command() -> str | None:
    chosen = os.environ.get("GPUGEEK_TEST_MLFLOW_SERVER")
    if chosen:
        return chosen
    beside = Path(sys.executable).with_name("mlflow")
    if beside.exists() and subprocess.run([str(beside), "server", "--help"], capture_output=True).returncode == 0:
        return str(beside)
    return shutil.which("mlflow-server")


class MlflowServer:
    def __init__(self, command: str, root: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [command, "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
            + ["--backend-store-uri", f"sqlite:///{root / 'mlflow.sqlite'}", "--default-artifact-root", str(root)],
            stdout=subprocess.DEVNULL,
            stderr=open(root / "server.log", "w"),  # noqa: SIM115 - kept open for the server's life
            start_new_session=True,  # its workers in its own process group, ended with it
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
            if self.process.poll() is not None:
                break
        self.stop()
        raise RuntimeError(f"mlflow server did not answer /health: {(root / 'server.log').read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)  # the server's pid is its group's
        self.process.wait(30)


@pytest.fixture(scope="module")
def server_command() -> str:
    command = _server_command()
    if command is None:
        pytest.skip("no mlflow server here: set GPUGEEK_TEST_MLFLOW_SERVER to an mlflow command with the server")
    return command


@pytest.fixture
def server(server_command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MlflowServer]:
    from gpugeek_jupyter import config

    running = MlflowServer(server_command, tmp_path)
    monkeypatch.setenv("GPUGEEK_MLFLOW_URI", running.uri)
    config.set_config(None)
    try:
        yield running
    finally:
        running.stop()


def runs(uri: str, count: int, timeout: float = 60.0) -> list[Any]:
    """The experiment's runs once ``count`` of them have ended (the job does not wait for that)."""
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    deadline = time.monotonic() + timeout
    while True:
        experiment = client.get_experiment_by_name("gpugeek-jupyter")
        found = client.search_runs([experiment.experiment_id]) if experiment is not None else []
        ended = [run for run in found if run.info.status != "RUNNING"]
        if len(ended) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_a_script_job_is_one_run_with_its_params_rank_0s_metrics_and_tags(
    server: MlflowServer, pool: Any, in_tmp: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (in_tmp / "train.py").write_text(
        "import os\nimport gpugeek_jupyter\nrank = int(os.environ['RANK'])\n"
        "for step in range(5):\n    gpugeek_jupyter.log(step=step, loss=10.0 * rank + step)\n"
    )
    result = run_script(pool, "train.py", hyperparams={"lr": 0.1, "epochs": 5}, timeout=120)
    assert result.ok, result.failure
    (run,) = runs(server.uri, 1)
    assert run.info.run_name == result.job_id and run.info.status == "FINISHED" and run.info.end_time
    assert run.data.params == {"lr": "0.1", "epochs": "5", "pool.gpu_type": "cpu", "pool.count": "2"} | {
        "pool.backend": run.data.params["pool.backend"]
    }
    tags = run.data.tags
    assert (tags["gpugeek.job_id"], tags["gpugeek.pool"], tags["gpugeek.kind"]) == (result.job_id, "jobs", "script")
    assert tags["gpugeek.outcome"] == "succeeded" and len(tags["gpugeek.code_sha256"]) == 64
    assert tags["gpugeek.software"].startswith("python ") and " torch " in tags["gpugeek.software"]
    history = mlflow.tracking.MlflowClient(tracking_uri=server.uri).get_metric_history(run.info.run_id, "loss")
    assert sorted((m.step, m.value) for m in history) == [(s, float(s)) for s in range(5)]  # rank 0's only
    assert "View run" not in capfd.readouterr().out  # success is quiet


def test_each_cell_job_is_its_own_run_and_a_failure_ends_it_failed(server: MlflowServer, pool: Any) -> None:
    assert run_cell(pool, "gg.log(step=0, acc=0.5)", {}, timeout=120).ok
    failed = run_cell(pool, "gg.log(step=0, acc=0.1)\nraise ValueError('bad batch')", {}, timeout=120)
    assert not failed.ok
    found = {run.info.run_name: run for run in runs(server.uri, 2)}
    assert len(found) == 2
    assert (
        found[failed.job_id].info.status == "FAILED" and found[failed.job_id].data.tags["gpugeek.outcome"] == "failed"
    )
    logged = {
        name: value for name, value in found[failed.job_id].data.metrics.items() if not name.startswith("system/")
    }
    assert logged == {"acc": 0.1}  # the pool's telemetry adds system metrics when a sample fell in the job


KEEPS_LOGGING = """
import time
for step in range(60):
    time.sleep(0.05)
    gg.log(step=step, loss=1.0 / (step + 1))
"""


def test_the_server_killed_mid_job_leaves_the_result_unchanged(server: MlflowServer, pool: Any) -> None:
    notices: list[str] = []
    threading.Timer(1.0, server.stop).start()
    started = time.monotonic()
    result = run_cell(pool, KEEPS_LOGGING, {}, on_notice=notices.append, timeout=120)
    assert result.ok, result.failure
    assert len(result.metrics()) == 2 * 60  # every value kept with the job
    assert time.monotonic() - started < 60  # the end waited a bounded time for the tracking thread
    said = [n for n in notices if n.startswith("MLflow:")]
    assert len(said) == 1 and result.job_id in said[0] and "kept with the job" in said[0], notices


TRAINS = """
import time, torch
frame = open(gg.dataset(data)).read()
model = torch.nn.Linear(2, 1)
ckpt = gg.checkpoint(folder, model=model)
for step in range(3):
    time.sleep(0.3)
    gg.log(step=step, loss=1.0 / (step + 1))
    ckpt.save(step)
"""


def test_a_run_has_the_pools_system_metrics_its_dataset_its_checkpoints_and_its_cost(
    server: MlflowServer, cpu_pool: Any, tmp_path: Path
) -> None:
    from gpugeek_jupyter import telemetry

    telemetry.set_period(cpu_pool, 0.2)  # samples within this short job
    data = tmp_path / "train.csv"
    data.write_text("x,y\n1,2\n")
    names = {"data": str(data), "folder": str(tmp_path / "ckpt")}
    result = run_cell(cpu_pool, TRAINS, names, timeout=120)
    assert result.ok, result.report()
    (run,) = runs(server.uri, 1)
    client = mlflow.tracking.MlflowClient(tracking_uri=server.uri)
    system = {name for name in run.data.metrics if name.startswith("system/")}
    assert {"system/0/cpu_utilization_percentage", "system/1/system_memory_usage_megabytes"} <= system, system
    assert all(client.get_metric_history(run.info.run_id, name) for name in system)
    [given] = run.inputs.dataset_inputs
    assert given.dataset.name == "train.csv" and str(data) in given.dataset.source
    assert given.dataset.digest == hashlib.sha256(data.read_bytes()).hexdigest()[:36]
    checkpoints = run.data.tags["gpugeek.checkpoints"].splitlines()
    assert [Path(c).name for c in checkpoints] == [f"step-00000000{s}.pt" for s in range(3)]
    assert float(run.data.tags["gpugeek.cost_usd"]) >= 0.0  # the ledger's cost of the job (a cpu pool's is 0)


def test_track_chooses_per_job_and_a_bad_one_is_one_line(
    server: MlflowServer, pool: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugeek_jupyter import config
    from gpugeek_jupyter.errors import SpecError

    assert run_cell(pool, "1", {}, track=False, timeout=120).ok  # the setting is on: this job asks for no run
    monkeypatch.delenv("GPUGEEK_MLFLOW_URI")
    config.set_config(None)
    assert run_cell(pool, "2", {}, timeout=120).ok  # the setting is off: no run
    chosen = run_cell(pool, "3", {}, track=server.uri, timeout=120)  # this job's own server
    assert chosen.ok
    assert [run.info.run_name for run in runs(server.uri, 1)] == [chosen.job_id]
    with pytest.raises(SpecError, match=r"^track needs a tracking server: set GPUGEEK_MLFLOW_URI"):
        run_cell(pool, "4", {}, track=True)
    with pytest.raises(SpecError, match=r"^track must be True, False or an MLflow tracking URI, got 5 "):
        run_cell(pool, "5", {}, track=5)


RESTARTS_ONCE = """
import os
gg.log(step=0, loss=10.0 * rank + int(os.environ["TORCHELASTIC_RESTART_COUNT"]))
gg.log(step=1, loss=10.0 * rank + 1)
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    raise RuntimeError("first attempt fails")
"""


def test_the_ranks_mean_when_chosen_and_the_attempts_in_one_run(
    server: MlflowServer, pool: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugeek_jupyter import config

    monkeypatch.setenv("GPUGEEK_MLFLOW_METRICS", "mean")
    config.set_config(None)
    result = run_cell(pool, RESTARTS_ONCE, {}, max_restarts=1, timeout=120)
    assert result.ok and result.restarts == 1, result.report()
    (run,) = runs(server.uri, 1)
    client = mlflow.tracking.MlflowClient(tracking_uri=server.uri)
    loss = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss"))
    assert loss == [(0, 5.0), (0, 6.0), (1, 6.0), (1, 6.0)]  # the mean of rank 0 and rank 1 (10 more), each attempt
    attempts = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "gpugeek.attempt"))
    assert attempts == [(0, 1.0)] and run.data.tags["gpugeek.restarts"] == "1"  # where the restart began
