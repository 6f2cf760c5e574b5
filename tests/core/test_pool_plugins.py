"""Pool-manager plugins and the split of liveness from housekeeping, without dask.

The pools here are registry rows with a cluster that does nothing, adopted by a real
:class:`PoolManager`; real pools and frozen workers are in tests/faults/test_frozen_workers.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpugeek_jupyter.pools import Pool, PoolLifecyclePlugin, PoolManager
from gpugeek_jupyter.pools._backend import RunningCluster
from gpugeek_jupyter.spec import PoolSpec
from gpugeek_jupyter.store import PoolRecord, PoolStatus, Registry
from support.waiting import wait_for


class IdleCluster(RunningCluster):
    def close(self, timeout: float = 30.0) -> None:
        pass


@pytest.fixture
def manager(isolated_registry: Path) -> Iterator[PoolManager]:
    manager = PoolManager(registry=Registry(isolated_registry), owner="plugin tests")
    yield manager
    manager.shutdown()


def adopt(manager: PoolManager, name: str) -> Pool:
    """A ready pool owned by ``manager``, as ``launch`` leaves it (no workers, no dask)."""
    spec = PoolSpec.create(gpu_type="cpu", count=1, name=name)
    record = manager.registry.add_pool(name, "local", spec.to_dict(), {"on_demand": 1.0}, owner=manager.owner)
    manager.registry.set_pool_status(record.id, PoolStatus.READY)
    cluster = IdleCluster(client=None, scheduler_address="", dashboard_link=None)  # type: ignore[arg-type]
    pool = Pool(record, cluster, manager, owned=True)
    with manager._lock:
        manager._kept_alive.add(record.id)
        manager._pools[name] = pool
    manager._ensure_threads()
    return pool


class Notices(PoolLifecyclePlugin):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def notice(self, manager: Any, pool: Any, kind: str, message: str) -> None:
        self.seen.append((kind, message))


def test_registering_a_name_again_replaces_the_plugin_and_unregistering_removes_it(manager: PoolManager) -> None:
    first, second = Notices(), Notices()
    assert manager.register_plugin(first, name="notices") == "notices"
    manager.register_plugin(second, name="notices")
    assert manager.plugins == {"notices": second}
    pool = adopt(manager, "p")
    manager.post_notice(pool, "budget-warning", "80 %")
    assert (first.seen, second.seen) == ([], [("budget-warning", "80 %")])
    assert manager.unregister_plugin("notices") is second
    assert manager.unregister_plugin("notices") is None
    assert manager.plugins == {}


def test_a_backends_own_plugins_run_for_its_pools_only(manager: PoolManager) -> None:
    """A plugin registered for a backend sees none of another backend's pools; the Slurm and
    Kubernetes backends' own plugins are registered that way, once, when the manager first uses them."""
    everyone, slurm_only = Notices(), Notices()
    manager.register_plugin(everyone, name="everyone")
    manager.register_plugin(slurm_only, name="slurm-only", backend="slurm")
    local_pool = adopt(manager, "local-pool")
    manager.post_notice(local_pool, "idle-stop", "stopping")
    assert (everyone.seen, slurm_only.seen) == ([("idle-stop", "stopping")], [])
    assert set(manager.plugins_for("local")) == {"everyone"}
    assert set(manager.plugins_for("slurm")) == {"everyone", "slurm-only"}

    manager.backend("local")
    assert set(manager.plugins) == {"everyone", "slurm-only"}  # the local backend has no plugins of its own
    manager.backend("slurm")
    manager.backend("slurm")
    manager.backend("kubernetes")
    assert set(manager.plugins_for("slurm")) == {"everyone", "slurm-only", "gpugeek-slurm-jobs"}
    assert set(manager.plugins_for("kubernetes")) == {"everyone", "gpugeek-kubernetes-disruptions"}
    assert set(manager.plugins_for("local")) == {"everyone"}


def test_a_plugin_without_a_name_is_registered_under_its_name_attribute_or_class(manager: PoolManager) -> None:
    class Named(PoolLifecyclePlugin):
        name = "named"

    assert manager.register_plugin(Named()) == "named"
    assert manager.register_plugin(Notices()) == f"{__name__}.Notices"


def test_an_object_without_any_hook_is_refused_with_the_hooks_named(manager: PoolManager) -> None:
    with pytest.raises(TypeError, match="has none of the hooks ready, heartbeat, before_stop, stopped, notice"):
        manager.register_plugin(object(), name="nothing")  # type: ignore[arg-type]


def test_a_failing_hook_is_logged_with_its_plugin_name_and_the_others_still_run(
    manager: PoolManager, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(PoolLifecyclePlugin):
        def notice(self, manager: Any, pool: Any, kind: str, message: str) -> None:
            raise RuntimeError("printer on fire")

    after = Notices()
    manager.register_plugin(Broken(), name="broken")
    manager.register_plugin(after, name="after")
    with caplog.at_level(logging.WARNING):
        manager.post_notice(adopt(manager, "p"), "idle-stop", "stopped itself")
    assert after.seen == [("idle-stop", "stopped itself")]
    assert "plugin 'broken': notice hook failed for pool p: RuntimeError: printer on fire" in caplog.text


def test_a_pool_whose_housekeeping_hangs_is_skipped_while_other_pools_and_every_heartbeat_go_on(
    manager: PoolManager, caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()
    calls: dict[str, int] = {"stuck": 0, "fine": 0}

    class Housekeeping(PoolLifecyclePlugin):
        def heartbeat(self, manager: Any, pool: Pool) -> None:
            calls[pool.name] += 1
            if pool.name == "stuck":
                release.wait(30)  # a worker that never answers

    manager.register_plugin(Housekeeping(), name="housekeeping")
    with caplog.at_level(logging.INFO):
        stuck = adopt(manager, "stuck")
        adopt(manager, "fine")
        beat_before = manager.registry.pool_by_id(stuck.id).heartbeat_at
        try:
            wait_for(lambda: calls["fine"] >= 5, 10, "five housekeeping periods of the fine pool")
            assert calls["stuck"] == 1
            assert manager.registry.pool_by_id(stuck.id).heartbeat_at > beat_before  # the beat never waited
            assert manager.registry.mark_lost_pools(lost_after_seconds=2 * manager.heartbeat_seconds) == []
        finally:
            release.set()
    skipped = [r.message for r in caplog.records if "skipping it until it ends" in r.message]
    assert len(skipped) == 1 and skipped[0].startswith("pool stuck: housekeeping still running after ")
    wait_for(lambda: calls["stuck"] >= 2, 10, "the stuck pool's housekeeping resuming")


def test_housekeeping_runs_on_a_few_reused_threads_not_a_new_thread_per_pool_per_period(manager: PoolManager) -> None:
    from gpugeek_jupyter.pools._manager import HOUSEKEEPING_WORKERS

    ran_on: list[threading.Thread] = []  # the thread objects themselves: a new thread is a new object

    class Housekeeping(PoolLifecyclePlugin):
        def heartbeat(self, manager: Any, pool: Pool) -> None:
            ran_on.append(threading.current_thread())

    manager.register_plugin(Housekeeping(), name="housekeeping")
    adopt(manager, "one")
    adopt(manager, "two")
    periods = 3 * HOUSEKEEPING_WORKERS
    wait_for(lambda: len(ran_on) >= 2 * periods, 30, f"{periods} housekeeping periods of two pools")
    threads = set(ran_on)
    assert len(threads) <= HOUSEKEEPING_WORKERS, sorted(t.name for t in threads)
    assert all(t.daemon for t in threads)  # a stuck hook never holds up the interpreter's exit


def test_a_stop_request_is_carried_out_off_the_beat_and_the_pool_stays_beaten_while_it_stops(
    manager: PoolManager,
) -> None:
    checkpointing = threading.Event()
    release = threading.Event()
    stopped: list[PoolRecord] = []

    class SlowCheckpoint(PoolLifecyclePlugin):
        def before_stop(self, manager: Any, pool: Pool, reason: str) -> None:
            checkpointing.set()
            release.wait(30)

        def stopped(self, manager: Any, record: PoolRecord) -> None:
            stopped.append(record)

    manager.register_plugin(SlowCheckpoint(), name="checkpoint")
    pool = adopt(manager, "asked")
    manager.registry.request_stop("asked")  # as the server or another kernel does
    try:
        assert checkpointing.wait(10)
        beat = manager.registry.pool_by_id(pool.id).heartbeat_at
        wait_for(lambda: manager.registry.pool_by_id(pool.id).heartbeat_at > beat, 10, "a heartbeat while stopping")
        assert manager.registry.pool_by_id(pool.id).status is PoolStatus.STOPPING
    finally:
        release.set()
    wait_for(lambda: stopped, 10, "the stopped hook")
    assert (stopped[0].id, stopped[0].status, stopped[0].reason) == (
        pool.id,
        PoolStatus.STOPPED,
        "stop requested from another process",
    )
    beat = manager.registry.pool_by_id(pool.id).heartbeat_at
    time.sleep(3 * manager.heartbeat_seconds)
    assert manager.registry.pool_by_id(pool.id).heartbeat_at == beat  # a final pool is no longer beaten
