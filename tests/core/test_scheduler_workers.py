"""A pool's workers, read while the client refreshes its cached identity as often as it can.

``Client.scheduler_info(n_workers=-1)`` returns the client's cache, which the client's periodic
refresh (``n_workers=0``: no workers) may overwrite between the fetch and the return; with a 2 ms
refresh about one read in 15 finds no workers. ``connected_workers`` reads the scheduler's answer
itself: every read finds both workers.
"""

from __future__ import annotations

import time

import dask
import pytest
from distributed import Client, LocalCluster

from gpugeek_jupyter.pools.scheduler_workers import connected_workers


@pytest.fixture
def often_refreshed_client():
    with dask.config.set({"distributed.client.scheduler-info-interval": "2ms"}):
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
            Client(cluster) as client,
        ):
            client.wait_for_workers(2, timeout=30)
            yield client


def test_every_read_finds_every_worker_while_the_client_refreshes_its_cache(often_refreshed_client) -> None:
    reads, short = 0, []
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        workers = connected_workers(often_refreshed_client)
        reads += 1
        if len(workers) != 2:
            short.append(len(workers))
    assert reads > 200, reads  # enough reads to meet the refresh many times
    assert not short, f"{len(short)} of {reads} reads found fewer than 2 workers: {short[:10]}"


def test_an_entry_is_the_scheduler_s_view_of_the_worker(often_refreshed_client) -> None:
    workers = connected_workers(often_refreshed_client, timeout=10)
    assert sorted(workers) == sorted(often_refreshed_client.cluster.scheduler.workers)
    assert {"name", "host", "nthreads", "metrics"} <= set(next(iter(workers.values())))
