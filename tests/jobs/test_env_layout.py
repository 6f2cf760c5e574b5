"""Rank layout and the torchrun environment: pure functions, no processes."""

from __future__ import annotations

import pytest

from gpugeek_jupyter.jobs.env import TORCHRUN_VARIABLES, build_worker_env, error_file_path
from gpugeek_jupyter.jobs.layout import WorkerInfo, cuda_visible_devices, plan_layout, workers_from_scheduler_info
from gpugeek_jupyter.nvml import GpuLinks


def _workers(*specs: tuple[str, str]) -> list[WorkerInfo]:
    return [
        WorkerInfo(address=f"tcp://{host}:{9000 + i}", name=name, host=host) for i, (name, host) in enumerate(specs)
    ]


def test_one_rank_per_worker_with_local_ranks_grouped_by_host() -> None:
    layout = plan_layout(_workers(("0", "a"), ("1", "b"), ("2", "a"), ("3", "b")))
    assert [(s.rank, s.name, s.host, s.local_rank, s.group_rank) for s in layout.slots] == [
        (0, "0", "a", 0, 0),
        (1, "2", "a", 1, 0),
        (2, "1", "b", 0, 1),
        (3, "3", "b", 1, 1),
    ]
    assert {s.world_size for s in layout.slots} == {4}
    assert {s.local_world_size for s in layout.slots} == {2}
    assert {s.group_world_size for s in layout.slots} == {2}
    assert layout.master.host == "a"


def test_workers_are_ordered_by_numeric_name_not_text() -> None:
    layout = plan_layout(_workers(*[(str(n), "h") for n in (10, 2, 1, 0)]))
    assert [s.name for s in layout.slots] == ["0", "1", "2", "10"]


def test_uneven_hosts_get_their_own_local_world_size() -> None:
    layout = plan_layout(_workers(("0", "a"), ("1", "a"), ("2", "a"), ("3", "b")))
    assert [(s.host, s.local_world_size) for s in layout.slots] == [("a", 3), ("a", 3), ("a", 3), ("b", 1)]


def test_layout_from_scheduler_info_uses_worker_host_and_name() -> None:
    info = {"tcp://10.0.0.2:4000": {"name": 1, "host": "10.0.0.2"}, "tcp://10.0.0.1:4000": {"name": 0}}
    layout = plan_layout(workers_from_scheduler_info(info))
    assert [(s.rank, s.host) for s in layout.slots] == [(0, "10.0.0.1"), (1, "10.0.0.2")]


def _env(rank: int = 1, parent: dict[str, str] | None = None, **kwargs: object) -> dict[str, str]:
    slot = plan_layout(_workers(("0", "a"), ("1", "a"), ("2", "b"))).slots[rank]
    return build_worker_env(slot, master_addr="a", master_port=41234, run_id="job-1", parent_env=parent or {}, **kwargs)  # type: ignore[arg-type]


def test_worker_env_has_every_torchrun_variable() -> None:
    env = _env(rank=1, restart_count=2, max_restarts=3, error_file="/tmp/e/job-1/attempt_2/1/error.json")
    assert env == {
        "RANK": "1",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "3",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "0",
        "GROUP_WORLD_SIZE": "2",
        "ROLE_RANK": "1",
        "ROLE_NAME": "default",
        "ROLE_WORLD_SIZE": "3",
        "MASTER_ADDR": "a",
        "MASTER_PORT": "41234",
        "TORCHELASTIC_RESTART_COUNT": "2",
        "TORCHELASTIC_MAX_RESTARTS": "3",
        "TORCHELASTIC_RUN_ID": "job-1",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_ERROR_FILE": "/tmp/e/job-1/attempt_2/1/error.json",
        "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "OMP_NUM_THREADS": "1",
    }
    assert set(env) == set(TORCHRUN_VARIABLES)


def test_omp_num_threads_follows_torchrun() -> None:
    assert _env(rank=0, parent={"OMP_NUM_THREADS": "4"})["OMP_NUM_THREADS"] == "4"
    assert _env(rank=0)["OMP_NUM_THREADS"] == "1"  # several ranks on host a
    assert "OMP_NUM_THREADS" not in _env(rank=2)  # alone on host b, nothing inherited


def test_nccl_async_error_handling_is_inherited_else_one() -> None:
    assert _env(parent={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"})["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    assert _env()["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


def test_worker_env_reads_nothing_from_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "9")
    assert _env(rank=2) == _env(rank=2)
    assert "OMP_NUM_THREADS" not in _env(rank=2)
    assert _env()["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


@pytest.mark.parametrize("port", [0, 70000, -1])
def test_master_port_must_be_a_tcp_port(port: int) -> None:
    with pytest.raises(ValueError, match="master_port must be a TCP port"):
        _env(master_port=port) if False else build_worker_env(
            plan_layout(_workers(("0", "a"))).slots[0], master_addr="a", master_port=port, run_id="j"
        )


def test_error_file_follows_torchrun_layout() -> None:
    assert error_file_path("/tmp/x/", "job-1", 2, 3) == "/tmp/x/job-1/attempt_2/3/error.json"


def test_cuda_device_of_local_rank_is_the_workers_own_gpu() -> None:
    # dask-cuda gives worker k the list rotated so that its GPU comes first: its own GPU is the head
    own = ["4", "5", "6"]
    visible = cuda_visible_devices(own)
    assert visible == "4,5,6"
    assert [visible.split(",")[local_rank] for local_rank in range(3)] == own
    assert cuda_visible_devices([None, None]) is None


def test_importing_the_job_modules_imports_neither_torch_nor_dask() -> None:
    import subprocess
    import sys

    code = (
        "import sys, gpugeek_jupyter, gpugeek_jupyter.jobs, gpugeek_jupyter.jobs.agent, gpugeek_jupyter.client\n"
        "import gpugeek_jupyter.magics.run\n"
        "print(sorted(m for m in ('torch', 'dask', 'distributed') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_compile_cache_is_per_pool_under_the_cache_home_and_keeps_the_workers_own() -> None:
    from gpugeek_jupyter.jobs.env import compile_cache_env

    assert compile_cache_env("dev", {}, "/home/ada/") == {
        "TORCHINDUCTOR_CACHE_DIR": "/home/ada/.cache/gpugeek-jupyter/compile/dev/inductor",
        "TRITON_CACHE_DIR": "/home/ada/.cache/gpugeek-jupyter/compile/dev/triton",
    }
    assert compile_cache_env("dev", {"XDG_CACHE_HOME": "/scratch"}, "/h")["TRITON_CACHE_DIR"] == (
        "/scratch/gpugeek-jupyter/compile/dev/triton"
    )
    assert compile_cache_env("dev", {"TORCHINDUCTOR_CACHE_DIR": "/mine"}, "/h").keys() == {"TRITON_CACHE_DIR"}


def test_job_env_accepts_strings_and_numbers_and_refuses_launcher_variables() -> None:
    from gpugeek_jupyter.jobs.env import TORCHRUN_VARIABLES
    from gpugeek_jupyter.jobs.job_env import JobEnvError, check_job_env, parse_assignments

    assert check_job_env({"NCCL_DEBUG": "INFO", "SEED": 3}) == {"NCCL_DEBUG": "INFO", "SEED": "3"}
    assert parse_assignments(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    for name in (*TORCHRUN_VARIABLES, "CUDA_VISIBLE_DEVICES"):
        with pytest.raises(JobEnvError, match="torchrun's own variables"):
            check_job_env({name: "1"})
    with pytest.raises(JobEnvError, match="mapping"):
        check_job_env(["A=1"])  # type: ignore[arg-type]


def test_spot_workers_take_the_last_ranks_on_each_host_and_spot_heavy_hosts_go_last() -> None:
    workers = [
        WorkerInfo("tcp://a:1", "0", "a", "spot"),
        WorkerInfo("tcp://a:2", "1", "a", "reserved"),
        WorkerInfo("tcp://b:1", "2", "b", "reserved"),
        WorkerInfo("tcp://b:2", "3", "b", "reserved"),
        WorkerInfo("tcp://c:1", "4", "c", "spot"),
        WorkerInfo("tcp://c:2", "5", "c", "spot"),
    ]
    layout = plan_layout(workers)
    assert [(s.host, s.name) for s in layout.slots] == [
        ("b", "2"),
        ("b", "3"),
        ("a", "1"),
        ("a", "0"),
        ("c", "4"),
        ("c", "5"),
    ]
    assert [s.group_rank for s in layout.slots] == [0, 0, 1, 1, 2, 2]  # each host's ranks stay contiguous
    assert [s.local_rank for s in layout.slots] == [0, 1, 0, 1, 0, 1]


def test_a_pool_without_spot_workers_keeps_the_order_by_name() -> None:
    assert [s.name for s in plan_layout(_workers(("1", "a"), ("0", "a"), ("2", "a"))).slots] == ["0", "1", "2"]


def _wired(pairs: dict[int, set[int]], count: int, switch: bool = False) -> list[WorkerInfo]:
    """``count`` GPU workers on one host, worker i on the GPU with bus id i, linked as ``pairs`` says."""
    return [
        WorkerInfo(
            f"tcp://h:{i}",
            str(i),
            "h",
            links=GpuLinks(f"BUS{i}", frozenset(f"BUS{p}" for p in pairs.get(i, ())), switch),
        )
        for i in range(count)
    ]


def test_gpus_joined_by_nvlink_become_neighbouring_ranks() -> None:
    # 0-2 and 1-3 linked (reported by one side only): tp=2 groups of neighbours ride NVLink
    layout = plan_layout(_wired({0: {2}, 3: {1}}, 4))
    assert [s.name for s in layout.slots] == ["0", "2", "1", "3"]
    assert [s.local_rank for s in layout.slots] == [0, 1, 2, 3]  # cuda:LOCAL_RANK stays each rank's GPU
    assert cuda_visible_devices([s.name for s in layout.slots]) == "0,2,1,3"  # worker i owns GPU i


def test_a_chain_of_links_is_walked_and_an_unlinked_gpu_goes_last() -> None:
    assert [s.name for s in plan_layout(_wired({0: {3}, 3: {1}}, 5)).slots] == ["0", "3", "1", "2", "4"]


def test_the_order_by_name_stays_behind_an_nvswitch_without_nvlink_or_wiring_unknown() -> None:
    assert [s.name for s in plan_layout(_wired({}, 4, switch=True)).slots] == ["0", "1", "2", "3"]
    assert [s.name for s in plan_layout(_wired({}, 4)).slots] == ["0", "1", "2", "3"]
    unknown = _wired({0: {2}}, 4)[:3] + [WorkerInfo("tcp://h:3", "3", "h")]
    assert [s.name for s in plan_layout(unknown).slots] == ["0", "1", "2", "3"]
