"""The notebook side without a pool: feed ingestion, ring buffer, DataFrame and job summary."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from gpugeek_jupyter.telemetry import COLUMNS, TelemetryFeed
from gpugeek_jupyter.telemetry._buffer import RingBuffer
from gpugeek_jupyter.telemetry._schema import NO_GPU, SAMPLE_FIELDS, columns_from_rows, sample_row, to_frame
from gpugeek_jupyter.telemetry._summary import TIMELINE_POINTS, latest_rows, summarize


def _gpu_row(t: float, gpu: int, sm: float, used: float, power: float = 100.0) -> tuple:
    return sample_row(
        t,
        gpu=gpu,
        gpu_name="H100",
        gpu_uuid=f"GPU-{gpu}",
        sm_util_pct=sm,
        mem_util_pct=10.0,
        mem_used_bytes=used,
        mem_total_bytes=80e9,
        power_w=power,
        temperature_c=50.0,
        sm_clock_mhz=1980.0,
        pcie_rx_mb_s=1.0,
        pcie_tx_mb_s=1.0,
        process_gpu_mem_bytes=1e9,
        cpu_pct=50.0,
        overhead_cpu_pct=1.0,
        rss_bytes=1e9,
    )


def _cpu_row(t: float, cpu: float, reason: str = "NVML library not found (no NVIDIA driver on this machine)") -> tuple:
    return sample_row(t, cpu_pct=cpu, overhead_cpu_pct=0.5, rss_bytes=2e8, no_gpu_reason=reason)


def test_a_sample_row_names_its_fields_and_leaves_the_rest_unknown() -> None:
    row = dict(zip(SAMPLE_FIELDS, sample_row(5.0, cpu_pct=12.5), strict=True))
    assert row["time"] == 5.0 and row["cpu_pct"] == 12.5 and row["gpu"] == NO_GPU
    assert math.isnan(row["sm_util_pct"]) and row["gpu_name"] is None and row["error"] is None
    with pytest.raises(ValueError, match="not sample fields: sm_util"):
        sample_row(5.0, sm_util=3.0)


def test_feed_keeps_rows_of_every_worker_with_its_identity(simulated) -> None:
    workers = simulated(workers=2, gpus=2)
    feed = TelemetryFeed(client=None, pool_name="sim", period=1.0)
    assert feed.ingest(workers.answers()) == 4
    assert feed.ingest(workers.answers()) == 4
    frame = to_frame(feed.buffer.columns())
    assert list(frame.columns) == list(COLUMNS)
    assert frame.groupby(["worker_name", "gpu"]).size().to_dict() == {
        ("0", 0): 2,
        ("0", 1): 2,
        ("1", 0): 2,
        ("1", 1): 2,
    }
    assert set(frame["host"]) == {"node-0"} and set(frame["worker"]) == {workers.address(0), workers.address(1)}
    assert {w.seq for w in feed.workers.values()} == {2}


def test_a_worker_without_answer_or_sampler_is_noted_and_the_others_still_count(simulated) -> None:
    workers = simulated(workers=3, gpus=1)
    answers = workers.answers()
    answers[workers.address(1)] = OSError("connection reset")
    answers[workers.address(2)] = {"name": "2", "host": "node-0", "pid": 1, "missing": True}
    feed = TelemetryFeed(client=None, pool_name="sim", period=1.0)
    assert feed.ingest(answers) == 1
    assert "no answer: OSError: connection reset" in str(feed.workers[workers.address(1)].problem)
    assert "not running" in str(feed.workers[workers.address(2)].problem)
    assert feed.workers[workers.address(0)].problem is None


def test_workers_that_left_are_forgotten(simulated) -> None:
    workers = simulated(workers=2, gpus=1)
    feed = TelemetryFeed(client=None, pool_name="sim", period=1.0)
    answers = workers.answers()
    feed.ingest(answers)
    del answers[workers.address(1)]
    feed.ingest(answers)
    assert list(feed.workers) == [workers.address(0)]


def test_ring_buffer_keeps_the_retention_window_and_the_row_cap() -> None:
    buffer = RingBuffer(retention_seconds=10.0, max_rows=1000)
    for t in range(30):
        buffer.append(columns_from_rows([_cpu_row(float(t), 1.0)], "w", "0", "h"))
    kept = buffer.columns()["time"]
    assert kept.min() >= 29 - 10 and kept.max() == 29
    capped = RingBuffer(retention_seconds=1e9, max_rows=5)
    for t in range(30):
        capped.append(columns_from_rows([_cpu_row(float(t), 1.0)], "w", "0", "h"))
    assert len(capped) == 5 and capped.columns()["time"].tolist() == [25.0, 26.0, 27.0, 28.0, 29.0]


def test_ring_buffer_since_gives_only_new_batches_and_a_window_filter() -> None:
    buffer = RingBuffer()
    buffer.append(columns_from_rows([_cpu_row(1.0, 1.0)], "w", "0", "h"))
    seq, first = buffer.since(0)
    buffer.append(columns_from_rows([_cpu_row(2.0, 1.0), _cpu_row(3.0, 1.0)], "w", "0", "h"))
    seq2, second = buffer.since(seq)
    assert first["time"].tolist() == [1.0] and second["time"].tolist() == [2.0, 3.0] and seq2 == seq + 1
    assert buffer.columns(start=1.5, end=2.5)["time"].tolist() == [2.0]
    assert not buffer.wait_newer(seq2, timeout=0.01)


def test_dataframe_has_no_gpu_as_na_utc_times_and_the_reason() -> None:
    columns = columns_from_rows([_cpu_row(1_800_000_000.0, 12.5)], "tcp://w:1", "0", "host-a")
    frame = to_frame(columns)
    assert frame["gpu"].dtype == "Int64" and frame["gpu"].isna().all()
    assert frame["time"].iloc[0] == pd.Timestamp(1_800_000_000.0, unit="s", tz="UTC")
    assert frame["no_gpu_reason"].iloc[0].startswith("NVML library not found")
    assert frame["cpu_pct"].iloc[0] == 12.5


def test_job_summary_gives_mean_and_peak_sm_and_peak_memory_of_the_window() -> None:
    rows = [_gpu_row(float(t), gpu, sm=10.0 * gpu + t, used=1e9 * (t + 1)) for t in range(10) for gpu in range(2)]
    columns = columns_from_rows(rows, "w", "0", "h")
    summary = summarize(columns, 0.0, 9.0)
    sm = np.array([10.0 * g + t for t in range(10) for g in range(2)])
    assert summary["sm_util_mean_pct"] == pytest.approx(sm.mean())
    assert summary["sm_util_peak_pct"] == 19.0
    assert summary["mem_used_peak_bytes"] == 10e9 and summary["mem_total_bytes"] == 80e9
    assert summary["gpus"] == 2 and summary["workers"] == 1 and summary["no_gpu_reason"] is None
    assert 0 < len(summary["timeline"]["t"]) <= TIMELINE_POINTS
    import json

    json.dumps(summary)  # ready for the registry


def test_job_summary_without_gpus_reports_cpu_and_the_reason() -> None:
    columns = columns_from_rows([_cpu_row(float(t), 50.0 + t) for t in range(5)], "w", "0", "h")
    summary = summarize(columns, 0.0, 5.0)
    assert summary["sm_util_mean_pct"] is None and summary["gpus"] == 0
    assert summary["cpu_peak_pct"] == 54.0 and "NVML library not found" in summary["no_gpu_reason"]
    assert summary["timeline"]["util_pct"]  # CPU % when there is no GPU


def test_timeline_is_downsampled_to_at_most_sixty_points() -> None:
    columns = columns_from_rows([_gpu_row(t * 0.1, 0, sm=50.0, used=1.0) for t in range(3600)], "w", "0", "h")
    timeline = summarize(columns, 0.0, 360.0)["timeline"]
    assert len(timeline["t"]) == TIMELINE_POINTS and set(timeline["util_pct"]) == {50.0}


def test_latest_rows_are_each_workers_newest_sample_in_rank_order() -> None:
    from gpugeek_jupyter.telemetry._schema import concat_columns

    a = columns_from_rows(
        [
            _cpu_row(0.5, 1.0),
            _gpu_row(1.0, 1, 5.0, 1.0),
            _gpu_row(1.0, 0, 4.0, 1.0),
            _gpu_row(2.0, 1, 7.0, 1.0),
            _gpu_row(2.0, 0, 9.0, 1.0),
        ],
        "wb",
        "10",
        "h",
    )
    b = columns_from_rows([_gpu_row(1.5, 0, 3.0, 1.0)], "wa", "2", "h")
    latest = latest_rows(concat_columns([a, b]))
    assert list(zip(latest["worker_name"], latest["gpu"].tolist(), latest["sm_util_pct"].tolist())) == [
        ("2", 0, 3.0),
        ("10", 0, 9.0),
        ("10", 1, 7.0),
    ]
