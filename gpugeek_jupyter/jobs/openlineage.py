"""OpenLineage run events of jobs, when ``GpugeekConfig.openlineage_target`` is set.

The job's driver (the kernel, or the agent for a detached job) sends, through the OpenLineage
client (``pip install 'gpugeek-jupyter[openlineage]'``), a ``START`` event when the job starts and,
at its end, ``COMPLETE``, ``FAIL`` (with the failure as an ``errorMessage`` facet) or ``ABORT``
(cancelled), with what :mod:`.lineage` recorded: the ``gg.dataset`` data and the checkpoints it
resumed from as inputs, the checkpoints it wrote as outputs (each with its fingerprint's hash as a
``version`` facet). The target is a lineage server's URL (``http(s)://``, the client's HTTP
transport: Marquez's ``api/v1/lineage``) or a file (its file transport: one JSON event per line).

Names follow OpenLineage's naming rules: the job is ``<pool>.<script file>`` or ``<pool>.cell``
in the namespace ``gpugeek-jupyter``; a local file is namespace ``file``, name its absolute path; a
URL is namespace ``scheme://bucket-or-host``, name its path. The run id is a new UUIDv7 per job
(both events carry it; the job id is the ``gpugeek`` part of the ``processing_engine`` facet's name).

As for MLflow (:mod:`.tracking`), the job never waits on the target: one thread per job sends; a
failure costs one warning and one notice at the end, which waits :data:`END_WAIT_S` at most.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from ..store import LineageRecord
    from .result import JobResult

log = logging.getLogger(__name__)

NAMESPACE = "gpugeek-jupyter"
PRODUCER = "https://pypi.org/project/gpugeek-jupyter/"
END_WAIT_S = 5.0
END_STATE = {"succeeded": "COMPLETE", "cancelled": "ABORT"}  # else FAIL


def dataset_name(uri: str) -> tuple[str, str]:
    """OpenLineage's (namespace, name) of a location.

    >>> dataset_name("/data/train.csv"), dataset_name("s3://bucket/train/part-0.parquet")
    (('file', '/data/train.csv'), ('s3://bucket', 'train/part-0.parquet'))
    >>> dataset_name("https://example.org/data/a.csv")
    ('https://example.org', '/data/a.csv')
    """
    if "://" not in uri:
        return "file", uri
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return "file", parts.path
    if parts.scheme in ("s3", "s3a", "gs", "gcs", "abfs", "abfss", "wasbs"):
        return f"{parts.scheme}://{parts.netloc}", parts.path.lstrip("/")
    return f"{parts.scheme}://{parts.netloc}", parts.path or "/"


def job_name(pool: str, script_path: str | None) -> str:
    """The job's OpenLineage name: stable across runs of the same script (or of cells) on a pool.

    >>> job_name("dev", "/home/me/train.py"), job_name("dev", None)
    ('dev.train.py', 'dev.cell')
    """
    return f"{pool}.{PurePosixPath(script_path).name}" if script_path else f"{pool}.cell"


class LineageEvents:
    """The two events of one job; :meth:`end` sends the second and says what could not be sent."""

    def __init__(self, target: str, job_id: str, name: str) -> None:
        from openlineage.client.uuid import generate_new_uuid

        self.target = target
        self.job_id = job_id
        self.name = name
        self.run_id = str(generate_new_uuid())
        self.error: str | None = None
        self._lock = threading.Lock()
        self._client: Any = None
        self._start = self._send_in_thread(self._event("START", None, [], []))

    def end(self, result: JobResult, records: Iterable[LineageRecord]) -> str | None:
        """Send the job's last event (its outcome, inputs and outputs); a notice when something was not sent."""
        inputs = [r for r in records if r.role in ("input", "resumed_from")]
        outputs = [r for r in records if r.role == "output"]
        state = END_STATE.get(result.status.value, "FAIL")
        failure = result.failure if state == "FAIL" else None
        self._start.join(END_WAIT_S)
        sending = self._send_in_thread(self._event(state, failure, inputs, outputs))
        sending.join(END_WAIT_S)
        if sending.is_alive():
            return f"OpenLineage: the events of job {self.job_id} are still being sent to {self.target} (slow target)"
        if self.error is not None:
            return f"OpenLineage: the events of job {self.job_id} were not sent to {self.target} ({self.error})"
        return None

    # -- events ------------------------------------------------------------------------------------
    def _event(self, state: str, failure: str | None, inputs: list[LineageRecord], outputs: list[LineageRecord]) -> Any:
        from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
        from openlineage.client.facet_v2 import error_message_run, processing_engine_run

        from .._version import __version__

        facets: dict[str, Any] = {
            "processing_engine": processing_engine_run.ProcessingEngineRunFacet(
                version=__version__, name=f"gpugeek {self.job_id}", openlineageAdapterVersion=__version__
            )
        }
        if failure:
            facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
                message=failure[:10_000], programmingLanguage="python"
            )
        return RunEvent(
            eventType=RunState[state],
            eventTime=datetime.now(UTC).isoformat(),
            producer=PRODUCER,
            run=Run(runId=self.run_id, facets=facets),
            job=Job(namespace=NAMESPACE, name=self.name),
            inputs=[InputDataset(*dataset_name(r.uri), facets=_version_facet(r)) for r in inputs],
            outputs=[OutputDataset(*dataset_name(r.uri), facets=_version_facet(r)) for r in outputs],
        )

    def _send_in_thread(self, event: Any) -> threading.Thread:
        thread = threading.Thread(
            target=self._send, args=(event,), name=f"gpugeek-openlineage-{self.job_id}", daemon=True
        )
        thread.start()
        return thread

    def _send(self, event: Any) -> None:
        try:
            with self._lock:
                if self._client is None:
                    self._client = _client(self.target)
                self._client.emit(event)
        except Exception as e:  # the target is down or refused: the job goes on
            if self.error is None:
                self.error = f"{type(e).__name__}: {e}"
                log.warning("job %s: OpenLineage at %s: %s (the job goes on)", self.job_id, self.target, self.error)


def _version_facet(record: LineageRecord) -> dict[str, Any]:
    from openlineage.client.facet_v2 import dataset_version_dataset

    facts = record.fingerprint
    version = facts.get("sha256") or facts.get("ETag") or facts.get("etag") or facts.get("version_id")
    if not version:
        return {}
    return {"version": dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(version))}


def _client(target: str) -> Any:
    """The OpenLineage client of ``target``: HTTP for a URL, else a file of JSON lines."""
    from openlineage.client import OpenLineageClient

    if target.startswith(("http://", "https://")):
        from openlineage.client.transport.http import HttpConfig, HttpTransport

        # no retries: urllib3 would log each one, and wait between them; a missed event is said once
        config = HttpConfig(url=target, timeout=END_WAIT_S, retry={"total": 0})
        return OpenLineageClient(transport=HttpTransport(config))
    from openlineage.client.transport.file import FileConfig, FileTransport

    path = Path(target.removeprefix("file://")).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return OpenLineageClient(transport=FileTransport(FileConfig(log_file_path=str(path), append=True)))


def start_events(target: str, job_id: str, name: str) -> LineageEvents | None:
    """The job's events, or None (with one warning) when the OpenLineage client is not installed."""
    if importlib.util.find_spec("openlineage") is None:
        log.warning(
            "job %s: openlineage_target is set (%s) but the OpenLineage client is not installed: "
            "pip install 'gpugeek-jupyter[openlineage]'",
            job_id,
            target,
        )
        return None
    return LineageEvents(target, job_id, name)
