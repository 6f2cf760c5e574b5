"""The slurm options on every surface and what they make of a job script (no Slurm needed)."""

from __future__ import annotations

import pytest

from gpugeek_jupyter.errors import SpecError


def test_options_default_to_the_configured_site_settings() -> None:
    from gpugeek_jupyter import config
    from gpugeek_jupyter.spec import PoolSpec

    config.set_config(
        config.GpugeekConfig(
            slurm_partition="gpu",
            slurm_account="proj42",
            slurm_walltime="1-00:00:00",
            slurm_sbatch_directives=["--exclusive"],
            slurm_prologue="module load cuda/12.4",
        )
    )
    spec = PoolSpec.create(backend="slurm", walltime="30")
    assert (spec.partition, spec.account, spec.walltime, spec.qos) == ("gpu", "proj42", "30", None)
    assert (spec.sbatch_directives, spec.prologue) == (("--exclusive",), "module load cuda/12.4")
    assert PoolSpec.from_dict(spec.to_dict()) == spec  # as the registry stores it
    assert PoolSpec.create(backend="local").partition is None  # other backends take none of them


@pytest.mark.parametrize("walltime", ["30", "30:00", "04:00:00", "2-00", "2-12:30", "7-00:00:00", 90])
def test_every_time_format_slurm_reads_is_accepted(walltime: object) -> None:
    from gpugeek_jupyter.spec import PoolSpec

    assert PoolSpec.create(backend="slurm", walltime=walltime).walltime == str(walltime)


@pytest.mark.parametrize("walltime", ["2h", "1:2:3:4", "-5", "soon", True, "04:00:00 "])
def test_a_time_slurm_cannot_read_is_refused(walltime: object) -> None:
    from gpugeek_jupyter.spec import PoolSpec

    if walltime == "04:00:00 ":  # surrounding blanks are only trimmed
        assert PoolSpec.create(backend="slurm", walltime=walltime).walltime == "04:00:00"
        return
    with pytest.raises(SpecError, match="is not a Slurm time limit"):
        PoolSpec.create(backend="slurm", walltime=walltime)


def test_sbatch_directives_are_lines_without_their_prefix_and_dashes_are_added() -> None:
    from gpugeek_jupyter.spec import PoolSpec

    spec = PoolSpec.create(backend="slurm", sbatch_directives=["exclusive", "#SBATCH --mail-type=END", "-C a100", ""])
    assert spec.sbatch_directives == ("--exclusive", "--mail-type=END", "-C a100")
    with pytest.raises(SpecError, match="one sbatch option per item"):
        PoolSpec.create(backend="slurm", sbatch_directives=["--exclusive\n--mem=0"])


def test_the_launch_request_takes_the_slurm_fields_with_json_types() -> None:
    from gpugeek_jupyter.server.launch_request import parse_launch_body

    body = (
        b'{"backend": "slurm", "partition": "gpu", "walltime": "04:00:00", '
        b'"sbatch_directives": ["--exclusive"], "prologue": "module load cuda/12.4\\nsource venv/bin/activate"}'
    )
    assert parse_launch_body(body)["prologue"] == "module load cuda/12.4\nsource venv/bin/activate"
    with pytest.raises(SpecError) as caught:
        parse_launch_body(b'{"backend": "slurm", "sbatch_directives": "--exclusive"}')
    assert str(caught.value) == (
        '"sbatch_directives" must be a list or null, got "--exclusive" (a string) (e.g. "sbatch_directives": ["--exclusive"])'
    )
    with pytest.raises(SpecError, match='"walltime" "2h" is not a Slurm time limit'):
        parse_launch_body(b'{"backend": "slurm", "walltime": "2h"}')


def test_cpu_workers_ask_one_core_and_gpu_workers_one_gpu_of_the_sites_type() -> None:
    from gpugeek_jupyter import config
    from gpugeek_jupyter.pools.slurm import gres_directive, job_script_options
    from gpugeek_jupyter.spec import PoolSpec

    cpu = job_script_options(PoolSpec.create(backend="slurm", count=4))
    assert (cpu["job_cpu"], cpu["cores"], cpu["processes"]) == (1, 1, 1)
    assert "--cpus-per-task" not in cpu["job_directives_skip"] and "--mem=" in cpu["job_directives_skip"]
    gpu_spec = PoolSpec.create(backend="slurm", gpu_type="H100-80GB", count=4)
    assert gres_directive(gpu_spec) == "--gres=gpu:h100:1"  # the catalog's slurm_gres
    assert "--cpus-per-task" in job_script_options(gpu_spec)["job_directives_skip"]  # the site's default per GPU
    config.set_config(config.GpugeekConfig(slurm_gres={"h100-80gb": "h100_sxm"}))
    assert gres_directive(gpu_spec) == "--gres=gpu:h100_sxm:1"
    config.set_config(config.GpugeekConfig(slurm_gres={"H100-80GB": ""}))
    assert gres_directive(gpu_spec) == "--gres=gpu:1"  # any GPU


def test_a_pools_slurm_job_ids_are_read_back_from_its_events(isolated_registry: object) -> None:
    from gpugeek_jupyter.pools.slurm import EVENT_ENDED, EVENT_JOB, slurm_job_ids
    from gpugeek_jupyter.store import get_registry

    registry = get_registry()
    record = registry.add_pool("p", "slurm", {"gpu_type": "cpu", "count": 2}, {}, owner="test")
    registry.add_event(record.id, EVENT_JOB, "Slurm job 41 for worker 'p-0'")
    registry.add_event(record.id, EVENT_JOB, "Slurm job 42 for worker 'p-1'")
    registry.add_event(record.id, EVENT_ENDED, "worker 'p-1' is gone: its Slurm job 42 ended (CANCELLED)")
    registry.add_event(record.id, EVENT_JOB, "Slurm job 43 for worker 'p-1'")
    assert slurm_job_ids(registry, record.id) == ["41", "42", "43"]


def test_the_cost_report_names_the_slurm_jobs_of_the_pool_and_of_each_job(tmp_path: object) -> None:
    from pathlib import Path

    from gpugeek_jupyter.cost import ledger, tco
    from gpugeek_jupyter.pools.slurm import EVENT_ENDED, EVENT_JOB
    from gpugeek_jupyter.store import JobStatus, Registry

    now = [1000.0]
    registry = Registry(Path(str(tmp_path)) / "r.sqlite", clock=lambda: now[0])
    record = registry.add_pool("p", "slurm", {"gpu_type": "cpu", "count": 2, "backend": "slurm"}, {}, owner="test")
    registry.add_event(record.id, EVENT_JOB, "Slurm job 41 for worker 'p-0'")
    registry.add_event(record.id, EVENT_JOB, "Slurm job 42 for worker 'p-1'")
    now[0] = 1100.0
    registry.add_event(record.id, EVENT_ENDED, "worker 'p-1' is gone: its Slurm job 42 ended (TIMEOUT)")
    registry.add_event(record.id, EVENT_JOB, "Slurm job 43 for worker 'p-1'")
    now[0] = 1200.0
    registry.add_job("job-1", record.id, "p", "cell", code_sha256="0" * 64, ranks=2)
    now[0] = 1300.0
    registry.set_job_status("job-1", JobStatus.SUCCEEDED, ended_at=1300.0)
    now[0] = 1400.0
    registry.add_event(record.id, EVENT_JOB, "Slurm job 44 for worker 'p-0'")  # after the job ended

    assert ledger.pool_cost(registry, record.id).slurm_job_ids == ("41", "42", "43", "44")
    assert ledger.job_cost(registry, "job-1").slurm_job_ids == ("41", "43")  # 42 ended before, 44 came after
    rows = tco.report_rows([ledger.job_cost(registry, "job-1")])
    assert rows[0]["slurm_job_ids"] == "41,43"  # as sacct -j takes them
    local = registry.add_pool("q", "local", {"gpu_type": "cpu", "count": 1, "backend": "local"}, {}, owner="test")
    assert ledger.pool_cost(registry, local.id).slurm_job_ids == ()


def test_pruning_removes_credentials_copies_of_ended_pools_and_old_folders(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import time
    from pathlib import Path

    from gpugeek_jupyter.pools.slurm import KEEP_LOGS_DAYS, prune_pool_folders

    root = Path(str(tmp_path)) / "shared"
    monkeypatch.setenv("GPUGEEK_SLURM_SHARED_DIRECTORY", str(root))
    live_source = Path(str(tmp_path)) / "credentials" / "7"
    live_source.mkdir(parents=True)

    def pool_folder(name: str, source: Path | None, age_days: float = 0) -> Path:
        folder = root / name
        (folder / "logs").mkdir(parents=True)
        (folder / "logs" / "gpugeek-x-1.err").write_text("")
        if source is not None:
            (folder / "tls").mkdir()
            (folder / "tls" / "source").write_text(str(source))
        when = time.time() - age_days * 86400
        for path in (folder / "logs" / "gpugeek-x-1.err", folder / "logs", folder):
            os.utime(path, (when, when))
        return folder

    live = pool_folder("live", live_source, age_days=30)
    ended = pool_folder("ended", live_source.parent / "8")
    old = pool_folder("old", None, age_days=KEEP_LOGS_DAYS + 1)
    recent = pool_folder("recent", None, age_days=1)
    prune_pool_folders()
    assert (live / "tls").exists()  # its pool's credentials still exist: it is live
    assert ended.exists() and not (ended / "tls").exists()  # logs kept, credentials' copy gone
    assert not old.exists() and recent.exists()


@pytest.mark.parametrize("value", ["40000", "40000-40100", "80:90", "40000:40001", "40100:40000", "40000:70000"])
def test_a_port_range_that_cannot_serve_a_pool_is_named_with_an_example(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugeek_jupyter import config
    from gpugeek_jupyter.errors import BackendUnavailableError
    from gpugeek_jupyter.pools.slurm import port_range

    monkeypatch.setenv("GPUGEEK_SLURM_PORTS", value)
    config.set_config(None)
    with pytest.raises(BackendUnavailableError) as raised:
        port_range()
    assert str(raised.value) == (
        "GpugeekConfig.slurm_ports (GPUGEEK_SLURM_PORTS) must be FIRST:LAST, ports from 1024 to 65535, "
        f"at least 3 of them, got {value!r} (e.g. '40000:40100')"
    )


def test_the_job_script_starts_a_worker_whose_http_server_does_not_listen() -> None:
    from gpugeek_jupyter.pools.slurm import render_job_script
    from gpugeek_jupyter.spec import PoolSpec

    script = render_job_script(PoolSpec.create(gpu_type="cpu", count=1, backend="slurm", name="quiet"))
    assert "--worker-class gpugeek_jupyter.pools.private_http.PoolWorker --no-dashboard" in script


def test_a_port_range_reaches_the_workers_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpugeek_jupyter import config
    from gpugeek_jupyter.pools.slurm import render_job_script
    from gpugeek_jupyter.spec import PoolSpec

    spec = PoolSpec.create(gpu_type="cpu", count=2, backend="slurm", name="ranged")
    assert "--worker-port" not in render_job_script(spec)
    monkeypatch.setenv("GPUGEEK_SLURM_PORTS", "40000:40100")
    config.set_config(None)
    assert "--worker-port 40000:40100 --nanny-port 40000:40100" in render_job_script(spec)


def test_worker_memory_is_the_jobs_mem_in_mib_and_the_workers_limit() -> None:
    from gpugeek_jupyter import config
    from gpugeek_jupyter.pools.slurm import job_script_options, render_job_script
    from gpugeek_jupyter.spec import PoolSpec

    options = job_script_options(PoolSpec.create(backend="slurm", worker_memory="2GiB", name="m"))
    assert options["job_mem"] == "2048M" and options["memory"] == str(2 * 2**30)
    assert "--mem=" not in options["job_directives_skip"]
    script = render_job_script(PoolSpec.create(backend="slurm", worker_memory="2GiB", name="m"))
    assert "#SBATCH --mem=2048M" in script and "--memory-limit 2.00GiB" in script, script
    config.set_config(config.GpugeekConfig(slurm_memory_per_worker="8G"))
    assert job_script_options(PoolSpec.create(backend="slurm", worker_memory="2GiB"))["job_mem"] == "2048M"
    assert job_script_options(PoolSpec.create(backend="slurm"))["job_mem"] == "8G"  # the site's setting
