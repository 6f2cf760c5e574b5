"""One MLflow run per job (never one per rank), when ``GpugeekConfig.mlflow_tracking_uri`` is set.

The job's driver (the kernel, or the agent for a detached job) makes the run when the job starts
and ends it with the job's outcome, as Lightning's MLflow logger has rank 0's driver do; the ranks
never talk to the tracking server. In the run:

- params: the job's hyperparameters (a script's ``--key value`` pairs) and its pool's
  ``pool.gpu_type``, ``pool.count`` and ``pool.backend``;
- metrics: rank 0's ``gg.log`` values, with their steps and times, or with
  ``GpugeekConfig.mlflow_metrics = "mean"`` the mean over the ranks at each step
  (:mod:`.rank_means`); every rank's are kept with the job (``result.metrics()``). After a restart
  the attempt's steps are logged again in the same run, and ``gpugeek.attempt`` (1, 2, ...) marks
  the first step each restart logged;
- system metrics: the pool's telemetry while the job runs, under MLflow's own names
  (``system/<worker>/gpu_0_utilization_percentage``, ``..._memory_usage_megabytes``,
  ``..._power_usage_watts``, ``system/<worker>/cpu_utilization_percentage``,
  ``system/<worker>/system_memory_usage_megabytes``), each the mean of the samples of every
  :data:`SYSTEM_PERIOD_S` (as MLflow's own monitor averages its samples), the step the seconds since
  the job started;
- inputs: each ``gg.dataset`` (MLflow's ``log_inputs``: its location, fingerprint and digest);
- tags: ``gpugeek.job_id``, ``gpugeek.pool``, ``gpugeek.kind``, ``gpugeek.code_sha256``; as the job
  goes, ``gpugeek.resumed_from`` and ``gpugeek.checkpoints`` (the checkpoints rank 0 wrote, one per
  line, newest last: links, never copies); at its end ``gpugeek.outcome``, ``gpugeek.restarts``,
  ``gpugeek.duration_s`` and ``gpugeek.cost_usd`` (the ledger's cost of the job). The run's name is
  the job id and its experiment ``gpugeek-jupyter``.

A job's ``track`` option chooses: None follows the setting, False makes no run, True needs the
setting, a string is the tracking URI of this job.

The job never waits on the server: everything goes through a bounded queue to one thread of its
own. A server that is down or slow costs one warning; what could not be sent is counted, and the
job's notices say so at its end (its metrics stay with the job). At the end the job waits at
most ``END_WAIT_S`` for the thread to finish sending, then leaves it to finish on its own.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np

from .logs import MetricsCallback, Row
from .rank_means import RankMeans

if TYPE_CHECKING:
    from ..telemetry import Columns
    from .result import JobResult

    SystemSamples = Callable[[float, float, bool], Columns]

log = logging.getLogger(__name__)

EXPERIMENT = "gpugeek-jupyter"
QUEUE_ITEMS = 1000  # batches waiting to be sent at most; past it, batches are counted as not sent
END_WAIT_S = 5.0  # the job's end waits this long at most for the run to be sent and ended
MLFLOW_BATCH = 1000  # metrics per log_batch call (MLflow's limit)
OUTCOME_STATUS = {"succeeded": "FINISHED", "cancelled": "KILLED"}  # else FAILED
SYSTEM_PERIOD_S = 10.0  # the pool's telemetry goes to the run this often, averaged (MLflow's own interval)
TAG_CHARS = 8000  # MLflow's longest tag value
MB = 2**20  # MLflow's system metrics count megabytes of 2**20 bytes
ATTEMPT_METRIC = "gpugeek.attempt"  # 1, 2, ... at the first step each restart logged


JobCost = Callable[[Any, str], "float | None"]  # (the job's registry, its id) -> what it cost in USD
_job_cost: JobCost | None = None


def price_jobs_with(job_cost: JobCost | None) -> None:
    """Where the ``gpugeek.cost_usd`` tag comes from: the cost ledger (set by the runtime, which knows
    both; this package does not import the ledger)."""
    global _job_cost
    _job_cost = job_cost


def job_cost_usd(registry: Any, job_id: str) -> float | None:
    """What job ``job_id`` cost, when a ledger was given (:func:`price_jobs_with`) and can say."""
    if _job_cost is None:
        return None
    try:
        return _job_cost(registry, job_id)
    except Exception as e:  # a job without a row (the agent's own work), a registry being closed
        log.info("job %s: no cost for its MLflow run: %s: %s", job_id, type(e).__name__, e)
        return None


class MlflowRun:
    """The run of one job: :meth:`metrics` is an ``on_metrics`` callback, :meth:`end` ends it."""

    def __init__(
        self,
        tracking_uri: str,
        job_id: str,
        params: Mapping[str, Any],
        tags: Mapping[str, str],
        system_samples: SystemSamples | None = None,
        means: RankMeans | None = None,
    ) -> None:
        self.tracking_uri = tracking_uri
        self.job_id = job_id
        self.means = means  # the ranks' means are logged, not rank 0's values
        self._attempt = -1  # the attempt whose values were logged last
        self.started_at = time.time()
        self.system_samples = system_samples  # (start, end, collect) -> the pool's telemetry columns
        self._system_until = self.started_at  # the end of the last period sent
        self._checkpoints: list[str] = []  # rank 0's, newest last
        self.run_id: str | None = None
        self.unsent = 0  # gg.log values not sent (the server was down, slow, or the queue full)
        self.error: str | None = None  # the first failure, said once
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=QUEUE_ITEMS)
        self._queue.put(("start", (dict(params), dict(tags))))
        self._thread = threading.Thread(target=self._send_all, name=f"gpugeek-mlflow-{job_id}", daemon=True)
        self._thread.start()

    def metrics(self, attempt: int, rank: int, rows: list[Row]) -> None:
        """Queue rank 0's values, or the ranks' means (``means``); the rest stay with the job only.
        The first values of each restart come with a ``gpugeek.attempt`` value; never blocks."""
        if self.means is not None:
            rows = self.means.add(attempt, rank, rows)
        elif rank != 0:
            return
        if rows and attempt != self._attempt:
            self._attempt = attempt
            if attempt > 0:  # a restart: where its steps start again
                rows = [(rows[0][0], rows[0][1], ATTEMPT_METRIC, float(attempt)), *rows]
        if rows:
            self._put_metrics(rows)

    def _put_metrics(self, rows: list[Row]) -> None:
        try:
            self._queue.put_nowait(("metrics", rows))
        except queue.Full:
            self._failed(len(rows), "the queue to the tracking server is full (it is slow)")

    def lineage(self, record: Mapping[str, Any]) -> None:
        """Queue a rank's lineage record (:mod:`.lineage`): a dataset is an input of the run, a
        checkpoint a tag; never blocks."""
        try:
            self._queue.put_nowait(("lineage", dict(record)))
        except queue.Full:
            self._failed(0, "the queue to the tracking server is full (it is slow)")

    def end(self, result: JobResult, cost_usd: float | None = None) -> str | None:
        """End the run with the job's outcome (and its cost, when known); what to tell the user when
        something was not sent."""
        outcome = result.status.value
        tags = {"gpugeek.outcome": outcome, "gpugeek.restarts": str(result.restarts)}
        tags["gpugeek.duration_s"] = f"{result.duration_s:.3f}"
        if cost_usd is not None:
            tags["gpugeek.cost_usd"] = f"{cost_usd:.4f}"
        if self.means is not None and (rest := self.means.rest()):
            self._put_metrics(rest)
        try:
            self._queue.put(("end", (OUTCOME_STATUS.get(outcome, "FAILED"), tags)), timeout=END_WAIT_S)
        except queue.Full:
            self._failed(0, "the queue to the tracking server is full (it is slow)")
        self._thread.join(END_WAIT_S)
        if self._thread.is_alive():
            return (
                f"MLflow: the run of job {self.job_id} is still being sent to {self.tracking_uri} "
                f"(slow server); its metrics are kept with the job (result.metrics())"
            )
        if self.error is not None:
            return (
                f"MLflow: {self.unsent} values of job {self.job_id} were not sent to {self.tracking_uri} "
                f"({self.error}); they are kept with the job (result.metrics())"
            )
        return None

    # -- the sending thread ----------------------------------------------------------------------
    def _client(self) -> Any:
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.tracking_uri)

    def _send_all(self) -> None:
        client: Any = None
        while True:
            try:
                kind, payload = self._queue.get(timeout=self._till_system_period())
            except queue.Empty:
                kind, payload = "system", False
            try:
                if kind == "start":
                    client = self._client()
                    self.run_id = self._start(client, *payload)
                elif self.run_id is None:  # the run could not be made: nothing of it can go
                    if kind == "metrics":
                        self.unsent += len(payload)
                elif kind == "metrics":
                    self._log(client, payload)
                elif kind == "system":
                    self._log_system(client, collect=payload)
                elif kind == "lineage":
                    self._log_lineage(client, payload)
                else:
                    status, tags = payload
                    self._log_system(client, collect=True)
                    client.log_batch(self.run_id, tags=_tags(tags))
                    _terminate(client, self.run_id, status)
            except Exception as e:  # the server is down or refused: the job goes on
                self._failed(len(payload) if kind == "metrics" else 0, f"{type(e).__name__}: {e}")
            if kind == "end":
                return

    def _till_system_period(self) -> float | None:
        if self.system_samples is None:
            return None
        return max(0.0, self._system_until + SYSTEM_PERIOD_S - time.time())

    def _log_system(self, client: Any, collect: bool) -> None:
        """The pool's telemetry since the last period, averaged, as MLflow system metrics."""
        if self.system_samples is None:
            return
        start, end = self._system_until, time.time()
        self._system_until = end
        columns = self.system_samples(start, end, collect)
        from mlflow.entities import Metric

        step = round(end - self.started_at)
        metrics = [Metric(name, value, int(end * 1000), step) for name, value in system_metrics(columns).items()]
        for first in range(0, len(metrics), MLFLOW_BATCH):
            client.log_batch(self.run_id, metrics=metrics[first : first + MLFLOW_BATCH])

    def _log_lineage(self, client: Any, record: dict[str, Any]) -> None:
        role, uri, facts = record["role"], str(record["uri"]), record.get("fingerprint") or {}
        if role == "input":
            client.log_inputs(self.run_id, datasets=[_dataset_input(uri, facts)])
        elif role == "resumed_from":
            client.log_batch(self.run_id, tags=_tags({"gpugeek.resumed_from": uri[:TAG_CHARS]}))
        elif role == "output" and uri not in self._checkpoints:
            self._checkpoints.append(uri)
            shown = list(self._checkpoints)
            while len(shown) > 1 and sum(len(uri) + 1 for uri in shown) > TAG_CHARS:
                shown.pop(0)  # the newest when they no longer all fit
            client.log_batch(self.run_id, tags=_tags({"gpugeek.checkpoints": "\n".join(shown)[-TAG_CHARS:]}))

    def _start(self, client: Any, params: dict[str, Any], tags: dict[str, str]) -> str:
        experiment = client.get_experiment_by_name(EXPERIMENT)
        experiment_id = experiment.experiment_id if experiment is not None else client.create_experiment(EXPERIMENT)
        run = client.create_run(experiment_id, tags=tags, run_name=self.job_id)
        from mlflow.entities import Param

        items = [Param(str(k), str(v)[:6000]) for k, v in params.items()]
        for start in range(0, len(items), 100):  # MLflow takes 100 params per batch
            client.log_batch(run.info.run_id, params=items[start : start + 100])
        return str(run.info.run_id)

    def _log(self, client: Any, rows: list[Row]) -> None:
        from mlflow.entities import Metric

        metrics = [Metric(name, value, int(at * 1000), step) for step, at, name, value in rows]
        for start in range(0, len(metrics), MLFLOW_BATCH):
            client.log_batch(self.run_id, metrics=metrics[start : start + MLFLOW_BATCH])

    def _failed(self, values: int, why: str) -> None:
        self.unsent += values
        if self.error is None:
            self.error = why
            log.warning(
                "job %s: MLflow at %s: %s (the job goes on; its metrics stay with it)",
                self.job_id,
                self.tracking_uri,
                why,
            )


def system_metrics(columns: Columns) -> dict[str, float]:
    """MLflow system metrics from telemetry ``columns`` (:data:`~gpugeek_jupyter.telemetry.SCHEMA`):
    each worker's (by its name, the rank on a local pool) GPUs' SM %, memory and power and its
    process's CPU % and resident memory, the mean of the samples; NaNs (unknown) are left out.

    >>> import numpy as np
    >>> system_metrics({"worker_name": np.array(["0", "0"], dtype=object), "gpu": np.array([-1, -1]),
    ...     "time": np.array([1.0, 2.0]), "cpu_pct": np.array([50.0, 70.0]), "rss_bytes": np.array([2.0**30, np.nan]),
    ...     "sm_util_pct": np.array([np.nan] * 2), "mem_used_bytes": np.array([np.nan] * 2), "power_w": np.array([np.nan] * 2)})
    {'system/0/cpu_utilization_percentage': 60.0, 'system/0/system_memory_usage_megabytes': 1024.0}
    """
    found: dict[str, float] = {}
    names = columns["worker_name"]
    for worker in sorted({str(name) for name in names}):
        mine = names == worker
        prefix = f"system/{_metric_name(worker)}/"
        gpus = columns["gpu"][mine]
        gpu_rows = gpus >= 0
        for gpu in sorted(set(gpus[gpu_rows].tolist())):
            rows = gpus == gpu
            for column, name, scale in (
                ("sm_util_pct", "utilization_percentage", 1.0),
                ("mem_used_bytes", "memory_usage_megabytes", 1 / MB),
                ("power_w", "power_usage_watts", 1.0),
            ):
                _mean_into(found, f"{prefix}gpu_{gpu}_{name}", columns[column][mine][rows], scale)
        # a worker's process readings repeat on each of its GPUs' rows: one per sample time
        _, first = np.unique(columns["time"][mine], return_index=True)
        _mean_into(found, f"{prefix}cpu_utilization_percentage", columns["cpu_pct"][mine][first], 1.0)
        _mean_into(found, f"{prefix}system_memory_usage_megabytes", columns["rss_bytes"][mine][first], 1 / MB)
    return found


def _mean_into(found: dict[str, float], name: str, values: np.ndarray, scale: float) -> None:
    finite = values[~np.isnan(values.astype(np.float64))]
    if len(finite):
        found[name] = round(float(np.mean(finite)) * scale, 3)


def _metric_name(text: str) -> str:
    """``text`` with what MLflow refuses in a metric's name as ``_``."""
    return re.sub(r"[^A-Za-z0-9_\-. ]", "_", text) or "_"


def _dataset_input(uri: str, facts: Mapping[str, Any]) -> Any:
    """A ``gg.dataset`` as MLflow's dataset input: named for its last path part, its digest the
    fingerprint's hash (or the store's ETag or version), its source the location."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    digest = str(facts.get("sha256") or facts.get("ETag") or facts.get("etag") or facts.get("version_id") or "")
    scheme = uri.split("://", 1)[0] if "://" in uri else "local"
    dataset = Dataset(
        name=PurePosixPath(uri.rstrip("/")).name or uri,
        digest=digest[:36] or "unknown",
        source_type=scheme,
        source=json.dumps({"uri": uri}),
        profile=json.dumps({k: v for k, v in facts.items() if k != "sha256"}, default=str),
    )
    return DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "training")])


def _terminate(client: Any, run_id: str, status: str) -> None:
    """End the run with its end time, as ``set_terminated`` does but without the run's URL that it
    writes to stdout (success is quiet); through its store, else without the end time."""
    from mlflow.entities import RunStatus

    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    if store is None or not hasattr(store, "update_run_info"):  # another MLflow's insides
        client.update_run(run_id, status=status)
        return
    store.update_run_info(
        run_id, run_status=RunStatus.from_string(status), end_time=int(time.time() * 1000), run_name=None
    )


def _tags(tags: Mapping[str, str]) -> list[Any]:
    from mlflow.entities import RunTag

    return [RunTag(k, v) for k, v in tags.items()]


def start_run(
    tracking_uri: str,
    job_id: str,
    params: Mapping[str, Any],
    tags: Mapping[str, str],
    system_samples: SystemSamples | None = None,
    means: RankMeans | None = None,
) -> MlflowRun | None:
    """The job's run, or None (with one warning) when mlflow is not installed."""
    if importlib.util.find_spec("mlflow") is None:
        log.warning(
            "job %s: mlflow_tracking_uri is set (%s) but mlflow is not installed: "
            "pip install 'gpugeek-jupyter[mlflow]'",
            job_id,
            tracking_uri,
        )
        return None
    return MlflowRun(tracking_uri, job_id, params, tags, system_samples, means)


def both(first: MetricsCallback | None, second: MetricsCallback | None) -> MetricsCallback | None:
    """One ``on_metrics`` callback that tells ``first`` then ``second`` (either may be None)."""
    if first is None or second is None:
        return first or second

    def tell(attempt: int, rank: int, rows: list[Row]) -> None:
        first(attempt, rank, rows)
        second(attempt, rank, rows)

    return tell
