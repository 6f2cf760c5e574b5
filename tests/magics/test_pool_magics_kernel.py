"""Pool magics in a real IPython kernel started with jupyter_client, as a notebook user meets them."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpugeek_jupyter.store import PoolStatus, Registry
from support.kernel import KernelSession, magics_kernel
from support.processes import wait_until_gone

pytestmark = pytest.mark.slow


@pytest.fixture
def kernel(isolated_registry: Path) -> Iterator[KernelSession]:
    with magics_kernel({"GPUGEEK_REGISTRY": str(isolated_registry), "GPUGEEK_HEARTBEAT": "0.5"}) as session:
        yield session


def _worker_pids(registry: Registry, pool_name: str) -> list[int]:
    pool = registry.latest_pool(pool_name)
    return [w.pid for w in registry.worker_intervals(pool.id) if w.pid]


def test_launch_list_use_stop_leaves_no_worker_process(kernel: KernelSession, isolated_registry: Path) -> None:
    launched = kernel.run("pool = %gpugeek_launch --gpu-type cpu --count 2 --name dev\nprint(pool.status.value)")
    assert launched.error is None, launched.text
    assert "ready" in launched.stdout
    assert any(
        "2/2 workers ready" in d.get("text/plain", "") or "application/vnd.jupyter.widget-view+json" in d
        for d in launched.displays
    )
    registry = Registry(isolated_registry)
    pids = _worker_pids(registry, "dev")
    assert len(pids) == 2 and all(psutil.pid_exists(p) for p in pids)

    listed = kernel.run("%gpugeek_pools")
    assert "dev" in listed.text and "ready" in listed.text

    used = kernel.run("%gpugeek_use dev\nimport gpugeek_jupyter; print(gpugeek_jupyter.current_pool().name)")
    assert used.error is None and used.stdout.strip().endswith("dev")

    stopped = kernel.run("%gpugeek_stop dev")
    assert "stopped pool 'dev'" in stopped.stdout
    assert registry.latest_pool("dev").status is PoolStatus.STOPPED
    assert wait_until_gone(pids, 10) == []


def test_python_surface_matches_the_magics(kernel: KernelSession) -> None:
    result = kernel.run(
        "import gpugeek_jupyter as gg\n"
        "p = gg.launch(gpu_type='cpu', count=1, name='api')\n"
        "print(p.client.submit(sum, [1, 2]).result())\n"
        "print([(r.name, r.status.value, r.spec['count']) for r in gg.list_pools()])\n"
        "p.stop(); print(p.status.value)"
    )
    assert result.error is None, result.text
    assert result.stdout.split("\n")[:3] == ["3", "[('api', 'ready', 1)]", "stopped"]


@pytest.mark.parametrize(
    "line",
    [
        "%gpugeek_launch --count 0",
        "%gpugeek_launch --count -3 --gpu-type cpu",
        "%gpugeek_launch --gpu-type V100",
        "%gpugeek_launch --gpu-type A100-80GB --count 4",
        "%gpugeek_launch --spot-fraction 2",
        "%gpugeek_launch --budget lots",
        "%gpugeek_launch --name 'Not Valid'",
        "%gpugeek_launch --framework 'PyTorch",
        "%gpugeek_launch --bogus 1",
        "%gpugeek_launch --backend address --address nowhere",
        "%gpugeek_launch --dry-run",
        "%gpugeek_use ghost",
        "%gpugeek_stop",
        "%gpugeek_stop ghost",
    ],
)
def test_invalid_option_is_one_line_usage_error_and_creates_nothing(
    kernel: KernelSession, isolated_registry: Path, line: str
) -> None:
    # the forkserver's warm-up (from %load_ext) forks a probe of its own: done before counting
    warmed = kernel.run("from gpugeek_jupyter.pools.worker_origin import warm_up\nwarm_up().join(120)", timeout=150)
    assert warmed.error is None, warmed.text
    children_before = {p.pid for p in psutil.Process(kernel.pid).children(recursive=True)}
    result = kernel.run(line)
    assert result.error is None, f"a traceback reached the user: {result.error}"
    assert result.stderr.startswith("UsageError: "), result.text
    assert result.stderr.strip().count("\n") == 0
    assert Registry(isolated_registry).list_pools() == []
    children_after = {p.pid for p in psutil.Process(kernel.pid).children(recursive=True)}
    assert children_after <= children_before


def test_killed_kernel_leaves_no_pool_process_and_the_pool_is_lost(isolated_registry: Path) -> None:
    session = KernelSession(env={"GPUGEEK_REGISTRY": str(isolated_registry), "GPUGEEK_HEARTBEAT": "0.5"})
    try:
        result = session.run(
            "%load_ext gpugeek_jupyter\n%gpugeek_launch --gpu-type cpu --count 2 --name doomed --quiet"
        )
        assert result.error is None, result.text
        registry = Registry(isolated_registry)
        pids = _worker_pids(registry, "doomed")
        assert len(pids) == 2
        os.kill(session.pid, signal.SIGKILL)
        assert wait_until_gone(pids, 30) == []
        lost = registry.mark_lost_pools(lost_after_seconds=15)
        assert [p.name for p in lost] == ["doomed"]
        assert registry.latest_pool("doomed").status is PoolStatus.LOST
    finally:
        session.client.stop_channels()
        session.manager.cleanup_resources()


def test_kernel_shutdown_stops_its_pools_cleanly(isolated_registry: Path) -> None:
    session = KernelSession(env={"GPUGEEK_REGISTRY": str(isolated_registry), "GPUGEEK_HEARTBEAT": "0.5"})
    try:
        result = session.run("%load_ext gpugeek_jupyter\n%gpugeek_launch --gpu-type cpu --count 1 --name short --quiet")
        assert result.error is None, result.text
        registry = Registry(isolated_registry)
        pids = _worker_pids(registry, "short")
    finally:
        session.shutdown()
    record = registry.latest_pool("short")
    assert (record.status, record.reason) == (PoolStatus.STOPPED, "its owner exited")
    assert wait_until_gone(pids, 10) == []


def test_a_pool_card_shows_its_pool_stopped_and_leaves_no_plugin_behind(kernel: KernelSession) -> None:
    cards = "sorted(n for n in get_pool_manager().plugins if n.startswith('gpugeek-pool-card'))"
    launched = kernel.run(
        "from gpugeek_jupyter.runtime import get_pool_manager\n"
        "%gpugeek_launch --gpu-type cpu --count 1 --name card-a\n"
        "%gpugeek_launch --gpu-type cpu --count 1 --name card-b\n"
        f"updaters = [get_pool_manager().plugins[n] for n in {cards}]\n"
        "print(len(updaters))"
    )
    assert launched.error is None, launched.text
    assert launched.stdout.strip().endswith("2")  # one plugin per card, whatever else launched before
    stopped = kernel.run(
        f"%gpugeek_stop card-a\n%gpugeek_stop card-b\nprint({cards})\n"
        "print([u.card.text.split()[:2] for u in updaters])"
    )
    assert stopped.error is None, stopped.text
    assert stopped.stdout.strip().splitlines()[-2:] == ["[]", "[['card-a', 'stopped'], ['card-b', 'stopped']]"]
    texts = kernel.run("print(['workers ready' in u.card.text or 'dashboard' in u.card.text for u in updaters])")
    assert texts.stdout.strip() == "[False, False]", texts.text  # nothing on the card reads as still running
