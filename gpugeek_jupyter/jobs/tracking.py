"""One MLflow run per job (never one per rank), when ``GpugeekConfig.mlflow_tracking_uri`` is set.

The job's driver (the kernel, or the agent for a detached job) makes the run when the job starts
and ends it with the job's outcome, as Lightning's MLflow logger has rank 0's driver do; the ranks
never talk to the tracking server. In the run:

- params: the job's hyperparameters (a script's ``--key value`` pairs) and its pool's
  ``pool.gpu_type``, ``pool.count`` and ``pool.backend``;
- metrics: rank 0's ``gg.log`` values, with their steps and times (every rank's are kept with the
  job: ``result.metrics()``); after a restart the attempt's steps are logged again in the same run;
- tags: ``gpugeek.job_id``, ``gpugeek.pool``, ``gpugeek.kind``, ``gpugeek.code_sha256``, then
  ``gpugeek.outcome``, ``gpugeek.restarts`` and ``gpugeek.duration_s``; the run's name is the job id
  and its experiment ``gpugeek-jupyter``.

The job never waits on the server: everything goes through a bounded queue to one thread of its
own. A server that is down or slow costs one warning; what could not be sent is counted, and the
job's notices say so at its end (its metrics stay with the job). At the end the job waits at
most ``END_WAIT_S`` for the thread to finish sending, then leaves it to finish on its own.
"""

from __future__ import annotations

import importlib.util
import logging
import queue
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .logs import MetricsCallback, Row

if TYPE_CHECKING:
    from .result import JobResult

log = logging.getLogger(__name__)

EXPERIMENT = "gpugeek-jupyter"
QUEUE_ITEMS = 1000  # batches waiting to be sent at most; past it, batches are counted as not sent
END_WAIT_S = 5.0  # the job's end waits this long at most for the run to be sent and ended
MLFLOW_BATCH = 1000  # metrics per log_batch call (MLflow's limit)
OUTCOME_STATUS = {"succeeded": "FINISHED", "cancelled": "KILLED"}  # else FAILED


class MlflowRun:
    """The run of one job: :meth:`metrics` is an ``on_metrics`` callback, :meth:`end` ends it."""

    def __init__(
        self,
        tracking_uri: str,
        job_id: str,
        params: Mapping[str, Any],
        tags: Mapping[str, str],
    ) -> None:
        self.tracking_uri = tracking_uri
        self.job_id = job_id
        self.run_id: str | None = None
        self.unsent = 0  # gg.log values not sent (the server was down, slow, or the queue full)
        self.error: str | None = None  # the first failure, said once
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=QUEUE_ITEMS)
        self._queue.put(("start", (dict(params), dict(tags))))
        self._thread = threading.Thread(target=self._send_all, name=f"gpugeek-mlflow-{job_id}", daemon=True)
        self._thread.start()

    def metrics(self, attempt: int, rank: int, rows: list[Row]) -> None:
        """Queue rank 0's values (the others' stay with the job only); never blocks."""
        if rank != 0:
            return
        try:
            self._queue.put_nowait(("metrics", rows))
        except queue.Full:
            self._failed(len(rows), "the queue to the tracking server is full (it is slow)")

    def end(self, result: JobResult) -> str | None:
        """End the run with the job's outcome; what to tell the user when something was not sent."""
        outcome = result.status.value
        tags = {"gpugeek.outcome": outcome, "gpugeek.restarts": str(result.restarts)}
        tags["gpugeek.duration_s"] = f"{result.duration_s:.3f}"
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
            kind, payload = self._queue.get()
            try:
                if kind == "start":
                    client = self._client()
                    self.run_id = self._start(client, *payload)
                elif self.run_id is None:  # the run could not be made: nothing of it can go
                    if kind == "metrics":
                        self.unsent += len(payload)
                elif kind == "metrics":
                    self._log(client, payload)
                else:
                    status, tags = payload
                    client.log_batch(self.run_id, tags=_tags(tags))
                    _terminate(client, self.run_id, status)
            except Exception as e:  # the server is down or refused: the job goes on
                self._failed(len(payload) if kind == "metrics" else 0, f"{type(e).__name__}: {e}")
            if kind == "end":
                return

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


def start_run(tracking_uri: str, job_id: str, params: Mapping[str, Any], tags: Mapping[str, str]) -> MlflowRun | None:
    """The job's run, or None (with one warning) when mlflow is not installed."""
    if importlib.util.find_spec("mlflow") is None:
        log.warning(
            "job %s: mlflow_tracking_uri is set (%s) but mlflow is not installed: "
            "pip install 'gpugeek-jupyter[mlflow]'",
            job_id,
            tracking_uri,
        )
        return None
    return MlflowRun(tracking_uri, job_id, params, tags)


def both(first: MetricsCallback | None, second: MetricsCallback | None) -> MetricsCallback | None:
    """One ``on_metrics`` callback that tells ``first`` then ``second`` (either may be None)."""
    if first is None or second is None:
        return first or second

    def tell(attempt: int, rank: int, rows: list[Row]) -> None:
        first(attempt, rank, rows)
        second(attempt, rank, rows)

    return tell
