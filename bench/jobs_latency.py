"""Warm job latency: a trivial ``%%gpugeek_run`` cell with a barrier, against raw dask round trips and ipyparallel.

Measured in one run, in interleaved rounds, on warm 2-worker cpu pools (gloo):

- raw ``client.run(f)`` on both workers: f does nothing / a gloo ``barrier`` / a gloo ``all_reduce``
  on the same warm process group (the baseline of the targets is the all_reduce one), and the
  all_reduce call typed in an IPython cell (``shell.run_cell``), as the magic is: IPython's own work
  around a cell is in both;
- a ``run_cell()`` barrier that names a 400 MB notebook tensor the ranks already hold (sent once,
  before the rounds), against the same cell without it;
- ``%%gpugeek_run`` with ``dist.barrier()`` through IPython (magic parsing, cell shipping, the job's
  registry rows, output channel, results), and the same through ``run_cell()``, on a pool whose
  registry and job-logs folder are empty;
- the same on a second pool whose registry holds history (ended pools, each with ended jobs) and
  whose job-logs folder holds ``job_logs_keep`` (500) kept jobs' folders: a job's cost must not grow
  with history; also a cell whose ranks print a line (its logs folder made, the oldest pruned). The
  history-vs-empty ratios are of each pool's figure over its own all_reduce baseline, so that a
  difference between the two pools' workers does not count as one of history;
- ipyparallel's ``%px pass`` on the 2 engines of an ``ipcluster`` this benchmark starts, and stops
  by its pid;
- what a job writes, alone (no pool, far less noise than the cells): its two registry rows (queued,
  ended) in the empty and in the history registry, and a printing job's logs (two ranks' files, the
  states, the pruning of the oldest folder, background work included) in the empty and in the full
  logs folder.

    PYTHONPATH=. .venv/bin/python bench/jobs_latency.py [--repeat 700] [--rounds 7] [--ended-pools 100000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _common import median_seconds

JOBS_PER_ENDED_POOL = 10
KEPT_LOGS = 500  # job_logs_keep's default
MAGIC = "%%gpugeek_run --pool {pool}\ndist.barrier()"


def median_ms_of(call: Callable[[], object], repeat: int) -> float:
    return median_seconds(call, repeat, warmup=10) * 1e3


def _noop() -> None:
    return None


def _barrier() -> None:
    import torch.distributed as dist

    dist.barrier()


def _all_reduce() -> None:
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.ones(1))


# -- history --------------------------------------------------------------------------------------
def fill_registry(path: Path, ended_pools: int) -> None:
    """``ended_pools`` stopped pools of a year, each with two worker intervals and
    ``JOBS_PER_ENDED_POOL`` ended jobs (rows written as the registry writes them, in bulk)."""
    from gpugeek_jupyter.pricing import prices_in_force
    from gpugeek_jupyter.spec import PoolSpec
    from gpugeek_jupyter.store import Registry

    Registry(path).close()  # the schema, by the registry's own migrations
    spec = PoolSpec.create(gpu_type="cpu", count=2, backend="local", name="old")
    spec_json, prices_json = json.dumps(spec.to_dict()), json.dumps(prices_in_force(spec))
    now, host, year = time.time(), socket.gethostname(), 365 * 86_400.0
    pools, workers, jobs = [], [], []
    for i in range(1, ended_pools + 1):
        end = now - year + i * year / ended_pools
        begin = end - 3_600.0
        pools.append(
            (
                i,
                f"old-{i}",
                "local",
                spec_json,
                prices_json,
                "stopped",
                "stopped by the user",
                "kernel 1",
                1,
                host,
                0.0,
                begin,
                begin + 1,
                end,
                end,
            )
        )
        workers += [(i, str(w), "on_demand", begin, end, "pool stopped") for w in range(2)]
        for j in range(JOBS_PER_ENDED_POOL):
            at = begin + 60 * j
            jobs.append(
                (f"job-old{i:06d}{j:02d}", i, f"old-{i}", "cell", "ab" * 32, 2, "succeeded", at, at + 1, "[0, 0]")
            )
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    db.executemany(
        "INSERT INTO pools (id, name, backend, spec_json, prices_json, status, reason, owner, owner_pid, owner_host,"
        " owner_started_at, created_at, ready_at, ended_at, heartbeat_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        pools,
    )
    db.executemany(
        "INSERT INTO workers (pool_id, worker_name, pricing, started_at, stopped_at, stop_reason) VALUES (?,?,?,?,?,?)",
        workers,
    )
    db.executemany(
        "INSERT INTO jobs (id, pool_id, pool_name, kind, code_sha256, ranks, status, started_at, ended_at,"
        " rank_exits_json) VALUES (?,?,?,?,?,?,?,?,?,?)",
        jobs,
    )
    db.execute("COMMIT")
    db.close()


def fill_job_logs(root: Path, count: int) -> None:
    """``count`` kept jobs' folders as jobs leave them: two ranks' logs and their states."""
    for n in range(count):
        folder = root / f"job-kept{n:04d}"
        folder.mkdir(parents=True, mode=0o700)
        for rank in range(2):
            (folder / f"rank-{rank}.log").write_text(f"epoch 0: loss 0.{n}\n" * 20)
        (folder / "ranks.json").write_text('{"0": "done", "1": "done"}')


# -- ipyparallel ----------------------------------------------------------------------------------
@contextlib.contextmanager
def ipcluster(engines: int) -> Iterator[Any]:
    """An ``ipcluster`` of ``engines`` engines, started here and stopped by its pid (SIGINT, then
    SIGKILL to its process group); yields a blocking DirectView with ``%px`` activated."""
    import ipyparallel as ipp

    profile = Path(tempfile.mkdtemp(prefix="bench-ipp-"))
    cluster_id = f"bench-{os.getpid()}"
    command = [str(Path(sys.executable).with_name("ipcluster")), "start", f"--n={engines}"]
    command += [f"--profile-dir={profile}", f"--cluster-id={cluster_id}", "--log-level=ERROR"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    client = None
    try:
        connection = profile / "security" / f"ipcontroller-{cluster_id}-client.json"
        deadline = time.monotonic() + 120
        while not connection.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ipcluster (pid {process.pid}) did not start (exit {process.poll()})")
            time.sleep(0.1)
        client = ipp.Client(str(connection))
        client.wait_for_engines(engines, timeout=120, interactive=False)
        view = client[:]
        view.block = True  # %px waits for the engines, as a notebook user sees it
        view.activate()
        yield view
    finally:
        if client is not None:
            client.close()
        os.kill(process.pid, signal.SIGINT)  # ipcluster stops its engines and controller
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


# -- the run --------------------------------------------------------------------------------------
@contextlib.contextmanager
def default_manager(manager: Any) -> Iterator[None]:
    """``manager`` as this process's pool manager for a while (the magic finds pools there)."""
    from gpugeek_jupyter import runtime

    saved, runtime._manager = runtime._manager, manager
    try:
        yield
    finally:
        runtime._manager = saved


def registry_rows(registry: Any, pool: Any) -> Callable[[], None]:
    """A job's two registry rows, as the agent writes them: queued (running at once), then ended (a
    brief job's end written behind: the next job's queue row carries it)."""
    from gpugeek_jupyter.jobs.pool_queue import this_submitter
    from gpugeek_jupyter.jobs.request import new_job_id

    def call() -> None:
        job_id = new_job_id()
        registry.queue_job(job_id, pool.id, pool.name, "cell", "ab" * 32, 2, this_submitter())
        registry.finish_job(
            job_id, "succeeded", 0, [0, 0], None, {"duration_s": 0.01, "failed_rank": None}, behind=True
        )

    return call


def printing_job_logs(config: Any, root: Path) -> Callable[[], None]:
    """A job whose two ranks print a line: its logs as the watch keeps them, until its
    housekeeping (pruning the oldest folder) is done."""
    from gpugeek_jupyter.jobs import logs as job_logs
    from gpugeek_jupyter.jobs.request import new_job_id

    settle = getattr(job_logs, "wait_for_housekeeping", lambda: None)  # releases before it pruned inline

    def call() -> None:
        config.job_logs_dir = str(root)
        logs = job_logs.JobLogs(new_job_id())
        logs.set_states({0: "running", 1: "running"})
        for rank in range(2):
            logs.write(rank, f"{rank}\n")
        logs.set_states({0: "done", 1: "done"})
        logs.close()
        settle()

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=700)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ended-pools", type=int, default=100_000)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    os.environ.setdefault("GPUGEEK_REGISTRY", str(scratch / "empty" / "gpugeek.sqlite"))
    (scratch / "empty").mkdir(mode=0o700)
    (scratch / "history").mkdir(mode=0o700)
    empty_logs, history_logs = scratch / "empty-logs", scratch / "history-logs"
    fill_registry(scratch / "history" / "gpugeek.sqlite", args.ended_pools)
    fill_job_logs(history_logs, KEPT_LOGS)

    from IPython.core.interactiveshell import InteractiveShell

    import gpugeek_jupyter
    from gpugeek_jupyter.config import get_config
    from gpugeek_jupyter.jobs import run_cell
    from gpugeek_jupyter.runtime import create_pool_manager
    from gpugeek_jupyter.spec import PoolSpec
    from gpugeek_jupyter.store import Registry

    config = get_config()
    shell = InteractiveShell.instance()
    shell.run_cell("%load_ext gpugeek_jupyter", store_history=False)
    history_manager = create_pool_manager(Registry(scratch / "history" / "gpugeek.sqlite"))
    empty = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name=f"bench-empty-{os.getpid()}")
    full = history_manager.launch(PoolSpec.create(gpu_type="cpu", count=2, name=f"bench-history-{os.getpid()}"))
    try:
        with ipcluster(2):
            for pool, logs in ((empty, empty_logs), (full, history_logs)):
                config.job_logs_dir = str(logs)
                assert run_cell(pool, "dist.barrier()", {}).ok  # builds the warm process group
            client = empty.client
            per_round = max(10, args.repeat // args.rounds)

            def magic(pool: Any, logs: Path, manager: Any = None) -> Callable[[], None]:
                def call() -> None:
                    config.job_logs_dir = str(logs)
                    with default_manager(manager) if manager is not None else contextlib.nullcontext():
                        result = shell.run_cell(MAGIC.format(pool=pool.name), store_history=False)
                    assert result.success, result.error_in_exec

                return call

            def api(pool: Any, logs: Path, cell: str = "dist.barrier()") -> Callable[[], None]:
                def call() -> None:
                    config.job_logs_dir = str(logs)
                    run_cell(pool, cell, {}).raise_for_status()

                return call

            import torch

            big = {"big": torch.zeros(100_000_000)}  # 400 MB: sent once, held by the ranks after
            assert run_cell(empty, "dist.barrier()\nbig.shape;", big).ok

            def px() -> None:
                result = shell.run_cell("%px pass", store_history=False)
                assert result.success, result.error_in_exec

            # the baseline as a notebook user types it: IPython's own work around a cell (transforming,
            # compiling, running it) is paid by the magic too
            shell.user_ns.update(bench_client=client, bench_all_reduce=_all_reduce)

            def all_reduce_cell() -> None:
                result = shell.run_cell("answers = bench_client.run(bench_all_reduce)", store_history=False)
                assert result.success, result.error_in_exec

            calls: dict[str, Callable[[], object]] = {
                "noop": lambda: client.run(_noop),
                "barrier": lambda: client.run(_barrier),
                "all_reduce": lambda: client.run(_all_reduce),
                "all_reduce history": lambda: full.client.run(_all_reduce),
                "all_reduce cell": all_reduce_cell,
                "magic": magic(empty, empty_logs),
                "api": api(empty, empty_logs),
                "magic history": magic(full, history_logs, history_manager),
                "api history": api(full, history_logs),
                "print": api(empty, empty_logs, "print(rank)"),
                "big": lambda: run_cell(empty, "dist.barrier()\nbig.shape;", big).raise_for_status(),
                "print history": api(full, history_logs, "print(rank)"),
                "px": px,
                "rows": registry_rows(empty.registry, empty),
                "rows history": registry_rows(full.registry, full),
                "logs": printing_job_logs(config, scratch / "logs-alone"),
                "logs history": printing_job_logs(config, scratch / "logs-alone-history"),
            }
            fill_job_logs(scratch / "logs-alone-history", KEPT_LOGS)
            # interleaved, so that drift on a shared machine hits every figure alike
            samples: dict[str, list[float]] = {name: [] for name in calls}
            for _ in range(args.rounds):
                for name, call in calls.items():
                    samples[name].append(median_ms_of(call, per_round))
            ms = {name: statistics.median(values) for name, values in samples.items()}
            kept = len([p for p in history_logs.iterdir() if p.is_dir()])
    finally:
        full.stop()
        empty.stop()
        history_manager.shutdown()
    baseline, own = ms["all_reduce"], ms["all_reduce history"] / ms["all_reduce"]  # pool B's baseline over A's
    history = f"{args.ended_pools:,} ended pools, {args.ended_pools * JOBS_PER_ENDED_POOL:,} ended jobs, {KEPT_LOGS} kept job logs"
    rows = [
        ("dask client.run, no-op", ms["noop"]),
        ("dask client.run, gloo barrier", ms["barrier"]),
        ("dask client.run, gloo all_reduce (baseline)", baseline),
        ("dask client.run, gloo all_reduce, typed in an IPython cell", ms["all_reduce cell"]),
        ("%%gpugeek_run: dist.barrier()", ms["magic"]),
        ("run_cell(): dist.barrier()", ms["api"]),
        ("run_cell(): print(rank)", ms["print"]),
        ("run_cell(): dist.barrier() naming a 400 MB notebook tensor", ms["big"]),
        ("%%gpugeek_run: dist.barrier(), with history", ms["magic history"]),
        ("run_cell(): dist.barrier(), with history", ms["api history"]),
        ("run_cell(): print(rank), with history", ms["print history"]),
        ("ipyparallel %px pass, 2 engines", ms["px"]),
        ("dask client.run, gloo all_reduce, the history pool", ms["all_reduce history"]),
        ("a job's registry rows alone (queued, ended)", ms["rows"]),
        ("a job's registry rows alone, with history", ms["rows history"]),
        ("a printing job's logs alone, housekeeping included", ms["logs"]),
        ("a printing job's logs alone, 500 kept", ms["logs history"]),
    ]
    print(
        f"\nWarm job latency, 2 cpu workers (gloo): median over {args.rounds} interleaved rounds of "
        f"{per_round} calls each; history: {history}\n"
    )
    print("| what | ms | vs baseline |")
    print("|---|---:|---:|")
    for label, figure in rows:
        print(f"| {label} | {figure:.2f} | {figure / baseline:.2f}x |")
    print("\n| ratio | figure |")
    print("|---|---:|")
    for label, ours, theirs in (
        ("%%gpugeek_run vs ipyparallel %px", ms["magic"], ms["px"]),
        ("%%gpugeek_run vs the baseline typed in an IPython cell", ms["magic"], ms["all_reduce cell"]),
        ("a cell naming a 400 MB tensor the ranks hold vs one without", ms["big"], ms["api"]),
        ("with history vs empty: %%gpugeek_run", ms["magic history"], ms["magic"] * own),
        ("with history vs empty: run_cell()", ms["api history"], ms["api"] * own),
        ("with history vs empty: run_cell() printing", ms["print history"], ms["print"] * own),
        ("with history vs empty: a job's registry rows alone", ms["rows history"], ms["rows"]),
        ("with history vs empty: a printing job's logs alone", ms["logs history"], ms["logs"]),
    ):
        print(f"| {label} | {ours / theirs:.2f}x |")
    print(
        f"\ntargets: %%gpugeek_run <= 1.25x baseline and <= 0.5x %px; run_cell() <= 1.15x; a cell naming a 400 MB "
        f"tensor the ranks hold <= 1.1x one without; with history within 5% "
        f"of empty ({kept} job folders kept of the history's {KEPT_LOGS} and the run's printing jobs)"
    )


if __name__ == "__main__":
    main()
