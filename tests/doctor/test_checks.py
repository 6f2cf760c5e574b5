"""Each doctor check on what this machine has and lacks, and on states made for real where it can't.

Jupyter's and the registry's states are made with real files (a page_config that disables the
labextension, a user-level config that disables the server extension, folders nobody may write);
Kubernetes answers from a loopback API server (``kube_api``) through kr8s; only the GPU cases of a
machine without GPUs are given as data to the pure verdicts.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpugeek_jupyter import __version__, doctor
from gpugeek_jupyter.config import GpugeekConfig
from gpugeek_jupyter.doctor import CheckState, GpuFacts, TorchBuild
from gpugeek_jupyter.nvml import GpuDevice, GpuDiscovery, discover_gpus, nvml_failure_reason
from gpugeek_jupyter.store import SCHEMA_VERSION, Registry

from .kube_api import Cluster, kubeconfig, serve

H100 = GpuDevice(0, "NVIDIA H100 80GB HBM3", "GPU-0", 80 * 2**30)
TWO_H100 = GpuFacts(
    GpuDiscovery((H100, GpuDevice(1, H100.name, "GPU-1", H100.memory_total_bytes)), None), "550.54.15", "12.4"
)
NO_DRIVER = GpuFacts(GpuDiscovery((), nvml_failure_reason(Exception("NVML Shared Library Not Found"))))


@pytest.fixture
def jupyter_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh user-level Jupyter config directory, the highest-priority one Jupyter reads."""
    directory = tmp_path / "jupyter-config"
    directory.mkdir()
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(directory))
    return directory


@pytest.fixture
def unwritable_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder in which this process really cannot create a file (root ignores mode bits, so /sys or
    /proc stand in then); which one is found by trying to create a file there."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        for candidate in (folder, Path("/sys"), Path("/proc")):
            probe = candidate / f"gpugeek-test-probe-{os.getpid()}"
            try:
                probe.open("x").close()
            except OSError:
                yield candidate
                return
            probe.unlink()
        pytest.skip("every folder tried accepts new files from this user")
    finally:
        folder.chmod(0o755)


@pytest.fixture
def no_kubernetes_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No KUBECONFIG file, no ~/.kube/config, not in a pod; returns the KUBECONFIG path that is missing."""
    missing = tmp_path / "kube" / "config"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return missing


KUBERNETES = GpugeekConfig(default_backend="kubernetes", kubernetes_namespace="default")


# -- the result ---------------------------------------------------------------------------------------
def test_a_failed_check_is_one_line_with_its_fix_and_a_passed_one_has_no_fix() -> None:
    bad = doctor.failed("registry", "/sys/x.sqlite cannot be created", "export GPUGEEK_REGISTRY=~/x.sqlite")
    good = doctor.passed("torch", "torch 2.13.0+cpu")
    assert bad.line().startswith("fail  registry ")
    assert bad.line().endswith("/sys/x.sqlite cannot be created; fix: export GPUGEEK_REGISTRY=~/x.sqlite")
    assert "\n" not in bad.line()
    assert good.line().startswith("pass  torch ") and "fix" not in good.line()


def test_summary_counts_each_state_and_any_failed_only_for_failures() -> None:
    results = [doctor.passed("a", "x"), doctor.skipped("b", "y"), doctor.skipped("c", "z")]
    assert doctor.summary(results) == "3 checks: 1 passed, 2 skipped, 0 failed"
    assert not doctor.any_failed(results)
    assert doctor.any_failed([*results, doctor.failed("d", "w", "v")])


def test_a_check_that_raises_becomes_a_failed_line_naming_the_exception() -> None:
    def broken() -> doctor.CheckResult:
        raise KeyError("jupyterlab")

    [result] = doctor._guarded("labextension", broken)
    assert result.state is CheckState.FAIL
    assert "the check itself failed: KeyError: 'jupyterlab'" in result.detail


def test_json_report_lists_every_check_and_counts_failures() -> None:
    results = [doctor.passed("a", "x"), doctor.failed("b", "y", "z")]
    data = json.loads(doctor.as_json(results))
    assert data["version"] == __version__ and data["failed"] == 1
    assert data["checks"][1] == {"name": "b", "state": "fail", "detail": "y", "fix": "z"}


# -- Jupyter ------------------------------------------------------------------------------------------
def test_labextension_of_this_install_is_found_built_and_enabled() -> None:
    result = doctor.check_labextension()
    assert result.state is CheckState.PASS, result.line()
    assert f"gpugeek-jupyter {__version__} installed and enabled in JupyterLab" in result.detail


def test_labextension_disabled_in_page_config_fails_with_the_enable_command(jupyter_config_dir: Path) -> None:
    (jupyter_config_dir / "labconfig").mkdir()
    (jupyter_config_dir / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {"gpugeek-jupyter": True}})
    )
    result = doctor.check_labextension()
    assert result.state is CheckState.FAIL, result.line()
    assert "disabled" in result.detail
    assert result.fix == "jupyter labextension enable gpugeek-jupyter"


def test_labextension_with_its_plugin_disabled_fails_naming_the_plugin(jupyter_config_dir: Path) -> None:
    (jupyter_config_dir / "labconfig").mkdir()
    (jupyter_config_dir / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {"gpugeek-jupyter:plugin": True}})
    )
    result = doctor.check_labextension()
    assert result.state is CheckState.FAIL, result.line()
    assert "gpugeek-jupyter:plugin is disabled" in result.detail
    assert result.fix == "jupyter labextension enable gpugeek-jupyter:plugin"


def test_server_extension_of_this_install_is_enabled_and_validates() -> None:
    result = doctor.check_server_extension()
    assert result.state is CheckState.PASS, result.line()
    assert result.detail.startswith(f"gpugeek_jupyter {__version__} enabled (")


def _disable_server_extension(config_dir: Path) -> None:
    (config_dir / "jupyter_server_config.d").mkdir()
    (config_dir / "jupyter_server_config.d" / "gpugeek_jupyter.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"gpugeek_jupyter": False}}})
    )


def test_server_extension_disabled_at_user_level_fails_with_the_user_level_enable(
    jupyter_config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "0")  # the user's config directory comes first
    _disable_server_extension(jupyter_config_dir)
    result = doctor.check_server_extension()
    assert result.state is CheckState.FAIL, result.line()
    assert result.detail == f"gpugeek_jupyter is disabled in {jupyter_config_dir}"
    assert result.fix == "jupyter server extension enable --user gpugeek_jupyter"


def test_server_extension_disabled_below_the_environment_config_is_still_enabled_as_the_server_sees_it(
    jupyter_config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_core.paths import ENV_CONFIG_PATH

    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "1")  # sys.prefix's config comes first, as in a venv
    _disable_server_extension(jupyter_config_dir)
    result = doctor.check_server_extension()
    assert result.state is CheckState.PASS, result.line()
    assert result.detail.endswith(f"enabled ({ENV_CONFIG_PATH[0]})")


# -- the registry -------------------------------------------------------------------------------------
def test_registry_is_the_configured_path_and_passes_when_its_folder_is_writable(isolated_registry: Path) -> None:
    result = doctor.check_registry()
    assert result.state is CheckState.PASS, result.line()
    assert result.detail.startswith(f"{isolated_registry} does not exist yet; {isolated_registry.parent} is writable")


def test_existing_registry_passes_with_its_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "gpugeek.sqlite"
    Registry(path)
    result = doctor.check_registry(path)
    assert result.state is CheckState.PASS, result.line()
    assert result.detail == f"{path} is writable (schema version {SCHEMA_VERSION})"


def test_missing_folders_pass_when_the_nearest_existing_one_is_writable_and_it_is_named(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "gpugeek.sqlite"
    result = doctor.check_registry(path)
    assert result.state is CheckState.PASS, result.line()
    assert f"under {tmp_path}, which is writable" in result.detail
    assert not (tmp_path / "a").exists()  # the doctor creates nothing


def test_registry_in_a_folder_nobody_may_write_fails_naming_the_folder_and_the_variable(
    unwritable_folder: Path,
) -> None:
    path = unwritable_folder / "gpugeek" / "gpugeek.sqlite"
    result = doctor.check_registry(path)
    assert result.state is CheckState.FAIL, result.line()
    assert (
        f"{path} cannot be created: {unwritable_folder}, the nearest existing folder, is not writable" in result.detail
    )
    assert result.fix.startswith("export GPUGEEK_REGISTRY=")


def test_registry_below_a_file_fails(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("")
    result = doctor.check_registry(tmp_path / "notes.txt" / "gpugeek.sqlite")
    assert result.state is CheckState.FAIL, result.line()
    assert f"{tmp_path / 'notes.txt'} is a file, not a folder" in result.detail
    assert "GPUGEEK_REGISTRY" in result.fix


def test_registry_in_a_folder_open_to_others_fails_with_the_chmod_and_leaves_it_open(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    folder.mkdir()
    folder.chmod(0o755)
    result = doctor.check_registry(folder / "gpugeek.sqlite")
    assert result.line().endswith(
        f"is mode 0o755, open to other users: run `chmod 700 {folder}`, or set "
        f"GPUGEEK_REGISTRY to a file in a private folder; fix: chmod 700 {folder}"
    )
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755


def test_registry_path_that_is_a_folder_fails(tmp_path: Path) -> None:
    result = doctor.check_registry(tmp_path)
    assert result.state is CheckState.FAIL and "is a folder" in result.detail


def test_registry_from_a_newer_release_fails_with_the_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "gpugeek.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    result = doctor.check_registry(path)
    assert result.state is CheckState.FAIL, result.line()
    assert f"schema {SCHEMA_VERSION + 1}, this one knows {SCHEMA_VERSION}" in result.detail
    assert result.fix.startswith("pip install -U gpugeek-jupyter")


def test_registry_that_is_not_sqlite_fails(tmp_path: Path) -> None:
    path = tmp_path / "gpugeek.sqlite"
    path.write_bytes(b"not a database, but long enough to have a header of sorts" * 20)
    result = doctor.check_registry(path)
    assert result.state is CheckState.FAIL and "not a readable SQLite registry" in result.detail


# -- GPUs, dask-cuda, torch ---------------------------------------------------------------------------
def test_no_nvidia_driver_here_is_a_skip_that_says_how_pools_run() -> None:
    if discover_gpus().devices:
        pytest.skip("this machine has GPUs")
    result = doctor.check_gpus()
    assert result.state is CheckState.SKIP, result.line()
    assert result.detail.startswith(f"no NVIDIA GPU here ({discover_gpus().reason})")
    assert "--gpu-type cpu" in result.detail


@pytest.mark.gpu
def test_gpus_here_are_listed_with_the_driver_and_its_cuda_version() -> None:
    facts = doctor.gpu_facts()
    result = doctor.check_gpus(facts)
    assert result.state is CheckState.PASS, result.line()
    assert facts.driver_version and f"NVIDIA driver {facts.driver_version} (CUDA {facts.cuda_version})" in result.detail
    assert facts.discovery.describe() in result.detail


def test_nvml_that_loads_but_fails_is_a_failure_pointing_at_nvidia_smi() -> None:
    broken = GpuFacts(GpuDiscovery((), nvml_failure_reason(Exception("Driver Not Loaded"))))
    result = doctor.check_gpus(broken)
    assert result.state is CheckState.FAIL and "NVIDIA driver not loaded" in result.detail
    assert "nvidia-smi" in result.fix


def test_gpus_listed_by_nvml_pass_with_driver_and_names() -> None:
    result = doctor.check_gpus(TWO_H100)
    assert result.state is CheckState.PASS
    assert result.detail == "NVIDIA driver 550.54.15 (CUDA 12.4): 2 x NVIDIA H100 80GB HBM3"


def test_dask_cuda_is_skipped_without_gpus() -> None:
    result = doctor.check_dask_cuda(NO_DRIVER)
    assert result.state is CheckState.SKIP and "no GPU here" in result.detail


def test_dask_cuda_with_gpus_passes_only_if_it_is_installed() -> None:
    import importlib.util

    result = doctor.check_dask_cuda(TWO_H100)
    if importlib.util.find_spec("dask_cuda") is None:
        assert result.state is CheckState.FAIL, result.line()
        assert result.fix.startswith("pip install 'gpugeek-jupyter[gpu]'")
    else:
        assert result.state is CheckState.PASS, result.line()


def test_the_torch_check_judges_the_installed_build_against_this_machines_gpus() -> None:
    build = doctor.installed_torch()
    assert build is not None
    facts = doctor.gpu_facts()
    result = doctor.check_torch(facts)
    assert build.version in result.detail, result.line()
    if not facts.has_gpus:  # here, and on any machine without an NVIDIA driver
        expected = "note: no NVIDIA GPU here" if build.cuda or build.hip else "a CPU build, as suits this machine"
        assert result.state is CheckState.PASS and expected in result.detail, result.line()
    elif not build.cuda:  # GPUs, but a CPU wheel: jobs would not use them
        assert result.state is CheckState.FAIL and "jobs would not use them" in result.detail, result.line()
        assert result.fix.startswith(f"pip install --force-reinstall torch=={build.version.split('+')[0]} ")
    else:  # a CUDA build passes unless it is newer than what the driver supports
        too_new = int(build.cuda.split(".")[0]) > int((facts.cuda_version or "0").split(".")[0])
        assert result.state is (CheckState.FAIL if too_new else CheckState.PASS), result.line()


def test_cpu_torch_with_gpus_fails_with_the_pip_command_for_a_cuda_build() -> None:
    result = doctor.torch_verdict(TorchBuild("2.13.0+cpu", None), TWO_H100)
    assert result.state is CheckState.FAIL, result.line()
    assert "jobs would not use them" in result.detail
    assert result.fix.startswith(
        "pip install --force-reinstall torch==2.13.0 --index-url https://download.pytorch.org/whl/cu124"
    )


def test_cuda_torch_without_gpus_passes_with_a_note_about_the_cpu_wheel() -> None:
    result = doctor.torch_verdict(TorchBuild("2.13.0+cu126", "12.6"), NO_DRIVER)
    assert result.state is CheckState.PASS
    assert "a CUDA 12.6 build; note: no NVIDIA GPU here" in result.detail
    assert "https://download.pytorch.org/whl/cpu" in result.detail


def test_cuda_torch_newer_than_the_driver_fails() -> None:
    result = doctor.torch_verdict(TorchBuild("2.13.0+cu130", "13.0"), TWO_H100)
    assert result.state is CheckState.FAIL and "newer than this driver's CUDA 12.4" in result.detail


def test_cuda_torch_the_driver_supports_passes() -> None:
    result = doctor.torch_verdict(TorchBuild("2.13.0+cu124", "12.4"), TWO_H100)
    assert result.state is CheckState.PASS and "the driver supports CUDA 12.4" in result.detail


def test_missing_torch_fails_with_the_install_command() -> None:
    result = doctor.torch_verdict(None, NO_DRIVER)
    assert result.state is CheckState.FAIL and result.fix.startswith("pip install torch")


# -- Kubernetes ---------------------------------------------------------------------------------------
def test_kubernetes_is_skipped_with_how_to_enable_it_when_the_backend_is_local(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUGEEK_BACKEND", raising=False)
    [result] = doctor.check_kubernetes(GpugeekConfig())
    assert result.state is CheckState.SKIP, result.line()
    assert "the default backend is 'local'" in result.detail
    assert "export GPUGEEK_BACKEND=kubernetes" in result.detail


def test_kubernetes_backend_without_kubeconfig_fails_naming_the_missing_credentials(
    no_kubernetes_credentials: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUGEEK_BACKEND", "kubernetes")
    credentials, operator, namespace = doctor.check_kubernetes(GpugeekConfig())
    assert credentials.state is CheckState.FAIL, credentials.line()
    assert credentials.detail.startswith(
        f"no Kubernetes credentials: KUBECONFIG={no_kubernetes_credentials} names no existing file"
    )
    assert "not a pod with a service account" in credentials.detail
    assert credentials.fix.startswith("export KUBECONFIG=")
    assert operator.state is namespace.state is CheckState.SKIP


def test_kubernetes_backend_without_kubeconfig_variable_names_the_default_file(
    no_kubernetes_credentials: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG")
    credentials, _, _ = doctor.check_kubernetes(KUBERNETES)
    assert credentials.state is CheckState.FAIL
    home_config = Path(os.environ["HOME"]) / ".kube" / "config"
    assert f"KUBECONFIG is not set and {home_config} does not exist" in credentials.detail


def test_kubernetes_api_that_does_not_answer_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "config", f"http://127.0.0.1:{port}")))
    credentials, operator, _ = doctor.check_kubernetes(KUBERNETES)
    assert credentials.state is CheckState.FAIL, credentials.line()
    assert f"the Kubernetes API server http://127.0.0.1:{port} does not answer" in credentials.detail
    assert operator.state is CheckState.SKIP


def test_kubernetes_cluster_with_the_operator_and_the_namespace_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(Cluster()) as url:
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "config", url)))
        results = doctor.check_kubernetes(KUBERNETES)
    assert [r.state for r in results] == [CheckState.PASS] * 3, [r.line() for r in results]
    assert f"the API server {url} answers (Kubernetes v1.31.2)" in results[0].detail
    assert results[2].detail == "namespace 'default' exists and you may list its DaskClusters (0 now)"


def test_kubernetes_cluster_without_the_operator_fails_with_the_helm_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(Cluster(operator=False)) as url:
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "config", url)))
        credentials, operator, namespace = doctor.check_kubernetes(KUBERNETES)
    assert credentials.state is CheckState.PASS
    assert operator.state is CheckState.FAIL, operator.line()
    assert "daskclusters.kubernetes.dask.org" in operator.detail
    assert operator.fix.startswith("helm install --repo https://helm.dask.org")
    assert namespace.state is CheckState.PASS


def test_kubernetes_namespace_that_does_not_exist_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with serve(Cluster(namespaces=["default"])) as url:
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "config", url)))
        *_, namespace = doctor.check_kubernetes(
            GpugeekConfig(default_backend="kubernetes", kubernetes_namespace="team-x")
        )
    assert namespace.state is CheckState.FAIL, namespace.line()
    assert namespace.detail == "namespace 'team-x' does not exist in this cluster"
    assert "GPUGEEK_NAMESPACE" in namespace.fix


def test_kubernetes_namespace_forbidden_to_the_user_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster(namespaces_forbidden=True, forbidden_namespaces=["default"])
    with serve(cluster) as url:
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "config", url)))
        *_, namespace = doctor.check_kubernetes(KUBERNETES)
    assert namespace.state is CheckState.FAIL, namespace.line()
    assert "namespace 'default' is forbidden to you" in namespace.detail
    assert "RoleBinding" in namespace.fix


def test_kubernetes_namespace_usable_though_namespaces_cannot_be_listed_passes_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(Cluster(namespaces_forbidden=True)) as url:
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "config", url)))
        *_, namespace = doctor.check_kubernetes(KUBERNETES)
    assert namespace.state is CheckState.PASS, namespace.line()
    assert "whether it exists is not confirmed" in namespace.detail
