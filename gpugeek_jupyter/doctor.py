"""Is everything gpugeek-jupyter needs in place here? One check per line, with the fix when one fails.

``gpugeek-jupyter doctor`` (exit status 1 when a check fails) and ``%gpugeek_doctor`` run
:func:`run_checks`; each check is a plain function returning a :class:`CheckResult`:

========================  ======================================================================
check                     passes when
========================  ======================================================================
labextension              JupyterLab (in this Python) finds ``gpugeek-jupyter``, built and enabled
server extension          Jupyter's config enables ``gpugeek_jupyter`` and the package validates
registry                  the registry file (or the nearest existing folder above it) is writable
GPUs                      NVML loads and lists GPUs (no NVIDIA driver at all: skipped)
dask-cuda                 installed, when there are GPUs (local GPU pools need it)
kubernetes ...            only with ``default_backend = "kubernetes"``: credentials, the dask
                          operator's resource types, the namespace
torch                     its build (CPU or CUDA) suits the GPUs here
========================  ======================================================================

Example::

    $ gpugeek-jupyter doctor
    gpugeek-jupyter 0.1.0, Python 3.11.7 at /work/main/.venv
    pass  labextension           gpugeek-jupyter 0.1.0 installed and enabled in JupyterLab 4.6.6 (...)
    pass  server extension       gpugeek_jupyter 0.1.0 enabled (/work/main/.venv/etc/jupyter)
    fail  registry               /sys/gpugeek.sqlite cannot be created: /sys, the nearest existing folder, is not writable (Permission denied); fix: export GPUGEEK_REGISTRY=...
    skip  GPUs                   no NVIDIA GPU here (NVML library not found ...); local pools run with --gpu-type cpu, ...
    ...
    7 checks: 3 passed, 3 skipped, 1 failed

A check that breaks unexpectedly is reported as a failed check naming the exception, never hidden.
Imports of JupyterLab, jupyter_server, torch and kr8s stay inside the checks: importing this module
is cheap, and a missing package is a failed check, not an ImportError.
"""

from __future__ import annotations

import enum
import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import shlex
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._version import __version__
from .config import ENVIRONMENT, GpugeekConfig, get_config
from .errors import GpugeekError
from .nvml import GpuDiscovery, discover_gpus, nvml_failure_reason

log = logging.getLogger(__name__)

LABEXTENSION = "gpugeek-jupyter"
SERVER_EXTENSION = "gpugeek_jupyter"
REINSTALL = "pip install -e . in the repository (or pip install --force-reinstall gpugeek-jupyter)"
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
DASK_GROUP = "kubernetes.dask.org/v1"
DASK_OPERATOR_KINDS = ("daskcluster.kubernetes.dask.org", "daskworkergroup.kubernetes.dask.org")


class CheckState(enum.StrEnum):
    """How a check came out: ``skip`` when it does not apply here (no GPU, Kubernetes not configured)."""

    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class CheckResult:
    """One check: what was checked, how it came out, what was found and, when it failed, what to do."""

    name: str
    state: CheckState
    detail: str
    fix: str = ""

    def line(self) -> str:
        """The check as one line, e.g. ``fail  registry  /sys/gpugeek.sqlite cannot be created ...; fix: export ...``."""
        text = f"{self.state.value}  {self.name:22} {self.detail}"
        return f"{text}; fix: {self.fix}" if self.state is CheckState.FAIL and self.fix else text


def passed(name: str, detail: str) -> CheckResult:
    return CheckResult(name, CheckState.PASS, detail)


def failed(name: str, detail: str, fix: str) -> CheckResult:
    return CheckResult(name, CheckState.FAIL, detail, fix)


def skipped(name: str, detail: str) -> CheckResult:
    return CheckResult(name, CheckState.SKIP, detail)


# -- Jupyter ------------------------------------------------------------------------------------------
def _environment_hint() -> str:
    return f"(or, if JupyterLab runs from another environment than {sys.prefix}, run gpugeek-jupyter doctor there)"


def _is_disabled(name: str, disabled: dict[str, Any]) -> bool:
    # JupyterLab's rule (jupyterlab.commands._is_disabled): a key disables what it names or matches as
    # a regular expression, unless its value is False
    for pattern, value in disabled.items():
        if value is False:
            continue
        try:
            if name == pattern or re.match(pattern, name):
                return True
        except re.error:
            continue
    return False


def _same_version(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def check_labextension() -> CheckResult:
    """The JupyterLab of this Python finds the ``gpugeek-jupyter`` labextension, built and enabled.

    Reads what ``jupyter labextension list`` reads: LabApp's extension paths (its config included),
    ``jupyterlab.commands.get_app_info`` for the prebuilt extensions and the disabled ones.
    """
    name = "labextension"
    try:
        from jupyterlab import __version__ as lab_version
        from jupyterlab.commands import AppOptions, get_app_info
        from jupyterlab.labapp import LabApp
    except ImportError as e:
        return failed(
            name,
            f"JupyterLab is not installed in this Python ({sys.prefix}): {e}",
            f"pip install 'jupyterlab>=4,<5' {_environment_hint()}",
        )
    lab = LabApp()
    lab.load_config_file()
    paths = [*lab.labextensions_path, *lab.extra_labextensions_path]
    info = get_app_info(AppOptions(labextensions_path=paths, logger=log))
    found = info["federated_extensions"].get(LABEXTENSION)
    if found is None:
        return failed(
            name,
            f"JupyterLab {lab_version} does not find {LABEXTENSION} in its extension folders ({', '.join(paths)})",
            f"{REINSTALL}: it installs the extension into {Path(sys.prefix) / 'share/jupyter/labextensions'} "
            f"{_environment_hint()}",
        )
    where = found["ext_path"]
    load = found.get("jupyterlab", {}).get("_build", {}).get("load")
    if not load or not (Path(where) / load).is_file():
        return failed(
            name,
            f"{LABEXTENSION} in {where} is not built (no {load or 'jupyterlab._build.load'} there)",
            f"{REINSTALL}; from a source checkout the build needs Node >= 20.19 (jlpm build:prod in labextension/)",
        )
    disabled = info.get("disabled", {})
    if _is_disabled(LABEXTENSION, disabled):
        return failed(
            name, f"{LABEXTENSION} is installed in {where} but disabled", f"jupyter labextension enable {LABEXTENSION}"
        )
    plugins = sorted(p for p in disabled if p.startswith(LABEXTENSION + ":") and _is_disabled(p, disabled))
    if plugins:
        return failed(
            name,
            f"{LABEXTENSION} is installed in {where} but its plugin {', '.join(plugins)} is disabled",
            " && ".join(f"jupyter labextension enable {p}" for p in plugins),
        )
    if not _same_version(found["version"], __version__):
        return failed(
            name,
            f"JupyterLab loads {LABEXTENSION} {found['version']} from {where}, but the Python package is {__version__}",
            f"remove the stale copy ({where}), then {REINSTALL}",
        )
    return passed(
        name, f"{LABEXTENSION} {found['version']} installed and enabled in JupyterLab {lab_version} ({where})"
    )


def _enable_command(config_dir: str) -> str:
    from jupyter_core.paths import ENV_CONFIG_PATH, jupyter_config_dir

    if config_dir == jupyter_config_dir():
        level = " --user"
    elif config_dir in ENV_CONFIG_PATH[:1]:
        level = " --sys-prefix"
    else:
        level = ""
    return f"jupyter server extension enable{level} {SERVER_EXTENSION}"


def check_server_extension() -> CheckResult:
    """Jupyter's config enables the ``gpugeek_jupyter`` server extension, and it validates.

    Merges the ``jpserver_extensions`` of every Jupyter config directory, highest priority first,
    as the server does (``ServerApp.find_server_extensions``), then loads the extension's points.
    """
    name = "server extension"
    try:
        from jupyter_core.paths import jupyter_config_path
        from jupyter_server.extension.config import ExtensionConfigManager
        from jupyter_server.extension.manager import ExtensionPackage
    except ImportError as e:
        return failed(
            name,
            f"jupyter_server is not installed in this Python ({sys.prefix}): {e}",
            f"pip install 'jupyterlab>=4,<5' {_environment_hint()}",
        )
    directories = jupyter_config_path()
    enabled = ExtensionConfigManager(read_config_path=directories).get_jpserver_extensions().get(SERVER_EXTENSION)
    setters = [
        d
        for d in directories
        if SERVER_EXTENSION in ExtensionConfigManager(read_config_path=[d]).get_jpserver_extensions()
    ]
    if enabled is None:
        return failed(
            name,
            f"no Jupyter config directory enables {SERVER_EXTENSION} (looked in {', '.join(directories)})",
            f"{REINSTALL}: it installs etc/jupyter/jupyter_server_config.d/{SERVER_EXTENSION}.json; "
            f"or jupyter server extension enable --sys-prefix {SERVER_EXTENSION}",
        )
    where = setters[0] if setters else "the server's config"
    if not enabled:
        return failed(name, f"{SERVER_EXTENSION} is disabled in {where}", _enable_command(where))
    try:
        valid = ExtensionPackage(name=SERVER_EXTENSION, enabled=True).validate()
    except Exception as e:  # an import error in the extension: what the server would log and skip
        return failed(
            name, f"{SERVER_EXTENSION} is enabled in {where} but cannot load: {type(e).__name__}: {e}", REINSTALL
        )
    if not valid:
        return failed(
            name, f"{SERVER_EXTENSION} is enabled in {where} but its extension points do not validate", REINSTALL
        )
    return passed(name, f"{SERVER_EXTENSION} {__version__} enabled ({where})")


# -- the registry -------------------------------------------------------------------------------------
def _nearest_existing(path: Path) -> Path:
    for candidate in path.parents:
        try:
            if candidate.exists():
                return candidate
        except OSError:  # e.g. a parent that cannot be searched: report it as the blocking one
            return candidate
    return Path(path.anchor or "/")


def _write_probe(folder: Path) -> str | None:
    """Why a file cannot be created in ``folder``, or None. Creates and removes one empty file: a
    permission check alone says yes to root on a read-only or virtual file system."""
    try:
        descriptor, probe = tempfile.mkstemp(prefix=".gpugeek-doctor-", dir=folder)
    except OSError as e:
        return e.strerror or type(e).__name__
    os.close(descriptor)
    os.unlink(probe)
    return None


def _schema_version(path: Path) -> int:
    connection = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return int(connection.execute("PRAGMA user_version").fetchone()[0])
    finally:
        connection.close()


def check_registry(path: str | os.PathLike[str] | None = None) -> CheckResult:
    """The registry file can be written, or created: the nearest existing folder above it is writable.

    Nothing is created but one probe file, removed at once; an existing registry is only read.
    """
    from .errors import RegistryFolderOpenError
    from .store import SCHEMA_VERSION, refuse_open_registry_directory

    name = "registry"
    variable = ENVIRONMENT["registry_path"]
    target = Path(os.path.abspath(Path(get_config().registry_path if path is None else path).expanduser()))
    fix = (
        f"export {variable}=/a/folder/you/can/write/gpugeek.sqlite (every kernel and the server must see the "
        f"same value), or set c.GpugeekConfig.registry_path in jupyter_gpugeek_config.py"
    )
    if target.is_dir():
        return failed(name, f"{target} is a folder; the registry is a file", fix)
    try:
        refuse_open_registry_directory(target.parent)
    except RegistryFolderOpenError as e:
        return failed(name, str(e), f"chmod 700 {shlex.quote(str(target.parent))}")
    if target.exists():
        try:
            with open(target, "r+b"):
                pass
        except OSError as e:
            return failed(name, f"{target} exists but cannot be opened for writing ({e.strerror})", fix)
        why = _write_probe(target.parent)
        if why:
            return failed(
                name,
                f"{target} is writable but its folder is not ({why}); SQLite writes -wal and -shm files there",
                fix,
            )
        try:
            version = _schema_version(target)
        except sqlite3.Error as e:
            return failed(name, f"{target} is not a readable SQLite registry ({e})", f"move it aside, or {fix}")
        if version > SCHEMA_VERSION:
            return failed(
                name,
                f"{target} was written by a newer gpugeek-jupyter (schema {version}, this one knows {SCHEMA_VERSION})",
                f"pip install -U gpugeek-jupyter, or {fix}",
            )
        return passed(name, f"{target} is writable (schema version {version})")
    folder = _nearest_existing(target)
    if not folder.is_dir():
        return failed(name, f"{target} cannot be created: {folder} is a file, not a folder", fix)
    why = _write_probe(folder)
    if why:
        return failed(
            name, f"{target} cannot be created: {folder}, the nearest existing folder, is not writable ({why})", fix
        )
    if folder == target.parent:
        return passed(name, f"{target} does not exist yet; {folder} is writable, it is created there on first use")
    return passed(
        name,
        f"{target} does not exist yet; it and its folders are created under {folder}, which is writable, on first use",
    )


# -- GPUs and torch -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuFacts:
    """What NVML says here: the GPUs (or why none) and, when it loads, the driver and its CUDA version."""

    discovery: GpuDiscovery
    driver_version: str | None = None
    cuda_version: str | None = None  # the newest CUDA the driver supports, e.g. "12.4"

    @property
    def has_gpus(self) -> bool:
        return bool(self.discovery.devices)


def gpu_facts() -> GpuFacts:
    """NVML's view of this machine; never raises."""
    discovery = discover_gpus()
    if not discovery.devices:
        return GpuFacts(discovery)
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as e:  # the GPUs were just listed; a second open failing is only a missing detail
        log.debug("NVML did not open again for the driver version: %s", nvml_failure_reason(e))
        return GpuFacts(discovery)
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion())
        return GpuFacts(
            discovery,
            driver.decode() if isinstance(driver, bytes) else str(driver),
            f"{cuda // 1000}.{cuda % 1000 // 10}",
        )
    except Exception as e:
        log.debug("NVML gave no driver version: %s", nvml_failure_reason(e))
        return GpuFacts(discovery)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception as e:
            log.debug("nvmlShutdown failed: %s", e)


def _no_gpu_is_normal(reason: str) -> bool:
    # no driver at all, or a driver without devices: a CPU machine, not a broken one
    return "library not found" in reason.lower() or "no devices" in reason.lower()


def check_gpus(facts: GpuFacts | None = None) -> CheckResult:
    """NVML loads and sees GPUs; a machine without an NVIDIA driver is a skip, not a failure."""
    facts = gpu_facts() if facts is None else facts
    name = "GPUs"
    discovery = facts.discovery
    if discovery.devices:
        driver = f"NVIDIA driver {facts.driver_version or '?'} (CUDA {facts.cuda_version or '?'})"
        return passed(name, f"{driver}: {discovery.describe()}")
    reason = discovery.reason or "no reason given"
    if _no_gpu_is_normal(reason):
        return skipped(
            name,
            f"no NVIDIA GPU here ({reason}); local pools run with --gpu-type cpu, GPU pools need "
            f"--backend kubernetes or --backend address",
        )
    if "not installed" in reason:
        return failed(name, f"cannot ask NVML: {reason}", "pip install nvidia-ml-py")
    return failed(
        name,
        f"NVML does not work: {reason}",
        "check the driver with nvidia-smi; reload it (or reinstall the NVIDIA driver) until nvidia-smi lists the GPUs",
    )


def check_dask_cuda(facts: GpuFacts | None = None) -> CheckResult:
    """dask-cuda is installed when there are GPUs: local GPU pools run on its ``LocalCUDACluster``."""
    facts = gpu_facts() if facts is None else facts
    name = "dask-cuda"
    if not facts.has_gpus:
        return skipped(name, "no GPU here: local pools need dask-cuda only on GPUs")
    if importlib.util.find_spec("dask_cuda") is None:
        return failed(
            name,
            f"not installed, and local pools on the {facts.discovery.describe()} here need its LocalCUDACluster",
            "pip install 'gpugeek-jupyter[gpu]' (or pip install dask-cuda)",
        )
    try:
        version = importlib.metadata.version("dask-cuda")
    except importlib.metadata.PackageNotFoundError:
        version = "(version unknown)"
    return passed(name, f"dask-cuda {version} installed, for local pools on {facts.discovery.describe()}")


@dataclass(frozen=True)
class TorchBuild:
    """The installed torch: its version and the CUDA (or ROCm) it was built for, None for a CPU build."""

    version: str
    cuda: str | None
    hip: str | None = None

    @property
    def kind(self) -> str:
        if self.cuda:
            return f"CUDA {self.cuda} build"
        return f"ROCm {self.hip} build" if self.hip else "CPU build"


def installed_torch() -> TorchBuild | None:
    """The torch this Python imports, or None when there is none (importing it takes a second or two)."""
    try:
        import torch
    except ImportError:
        return None
    return TorchBuild(str(torch.__version__), torch.version.cuda, getattr(torch.version, "hip", None))


def _major(version: str) -> int | None:
    try:
        return int(version.split(".")[0])
    except ValueError:
        return None


def torch_verdict(build: TorchBuild | None, facts: GpuFacts) -> CheckResult:
    """Does this torch build suit these GPUs? Pure: :func:`check_torch` gives it what is installed."""
    name = "torch"
    if build is None:
        command = (
            "pip install torch"
            if facts.has_gpus
            else "pip install torch --index-url https://download.pytorch.org/whl/cpu"
        )
        return failed(name, "torch is not installed in this Python; jobs run torch.distributed", command)
    release = build.version.split("+")[0]
    if facts.has_gpus and not build.cuda:
        cuda = facts.cuda_version
        index = f"cu{cuda.replace('.', '')}" if cuda else "cu126"
        limit = f"no newer than the driver's CUDA {cuda}" if cuda else "matching the driver (see nvidia-smi)"
        return failed(
            name,
            f"torch {build.version} is a {build.kind}, but this machine has {facts.discovery.describe()}: "
            f"jobs would not use them",
            f"pip install --force-reinstall torch=={release} --index-url https://download.pytorch.org/whl/{index} "
            f"(a CUDA build {limit}; see https://pytorch.org/get-started/locally/)",
        )
    if facts.has_gpus and build.cuda:
        built, driver = _major(build.cuda), _major(facts.cuda_version or "")
        if built is not None and driver is not None and built > driver:
            return failed(
                name,
                f"torch {build.version} is a {build.kind}, newer than this driver's CUDA {facts.cuda_version}",
                f"upgrade the NVIDIA driver, or pip install --force-reinstall torch=={release} --index-url "
                f"https://download.pytorch.org/whl/cu{(facts.cuda_version or '').replace('.', '')}",
            )
        return passed(
            name, f"torch {build.version}, a {build.kind}; the driver supports CUDA {facts.cuda_version or '?'}"
        )
    if build.cuda or build.hip:
        return passed(
            name,
            f"torch {build.version}, a {build.kind}; note: no NVIDIA GPU here, so it runs on CPU "
            f"(the CPU wheel is smaller: pip install torch=={release} --index-url https://download.pytorch.org/whl/cpu)",
        )
    return passed(name, f"torch {build.version}, a CPU build, as suits this machine (no NVIDIA GPU)")


def check_torch(facts: GpuFacts | None = None) -> CheckResult:
    """The installed torch build (CPU or CUDA) matches the GPUs NVML sees."""
    return torch_verdict(installed_torch(), gpu_facts() if facts is None else facts)


# -- Kubernetes ---------------------------------------------------------------------------------------
def _missing_credentials() -> str | None:
    """Why kr8s will find no credentials (KUBECONFIG, ~/.kube/config, a pod's service account), or None."""
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        files = [f for f in kubeconfig.split(os.pathsep) if f]
        if any(Path(f).expanduser().is_file() for f in files):
            return None
        where = f"KUBECONFIG={kubeconfig} names no existing file"
    else:
        if Path("~/.kube/config").expanduser().is_file():
            return None
        where = f"KUBECONFIG is not set and {Path('~/.kube/config').expanduser()} does not exist"
    if os.environ.get("KUBERNETES_SERVICE_HOST") and Path(SERVICE_ACCOUNT, "token").is_file():
        return None
    return f"{where}, and this is not a pod with a service account (no {SERVICE_ACCOUNT}/token)"


def _credentials_source() -> str:
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        return f"KUBECONFIG={kubeconfig}"
    if Path("~/.kube/config").expanduser().is_file():
        return str(Path("~/.kube/config").expanduser())
    return "the pod's service account"


def _kubernetes_operator(api: Any) -> CheckResult:
    from .pools.k8s_errors import OPERATOR_INSTALL, translate_api_error

    name = "dask operator"
    missing = []
    for kind in DASK_OPERATOR_KINDS:
        try:
            api.lookup_kind(kind)
        except ValueError:  # kr8s: "Kind ... not found."
            missing.append(kind)
        except Exception as e:
            return failed(name, str(translate_api_error(e, "", "list the cluster's resource types")), OPERATOR_INSTALL)
    if missing:
        plural = ", ".join(k.split(".", 1)[0] + "s." + k.split(".", 1)[1] for k in missing)
        return failed(
            name, f"the dask-kubernetes operator's resource types are not in this cluster ({plural})", OPERATOR_INSTALL
        )
    return passed(
        name, f"the dask-kubernetes operator's DaskCluster and DaskWorkerGroup types are installed ({DASK_GROUP})"
    )


def _kubernetes_namespace(api: Any, namespace: str, operator: bool) -> CheckResult:
    import kr8s

    from .pools.k8s_errors import translate_api_error

    name = "kubernetes namespace"
    fix = (
        f"kubectl create namespace {namespace} (or ask an admin), or use your team's namespace: "
        f"export {ENVIRONMENT['kubernetes_namespace']}=<namespace>"
    )
    try:
        found = list(api.get("namespaces", namespace, raw=True))
    except kr8s.ServerError as e:  # listing namespaces is often forbidden to users; try what pools need
        found = None
        log.debug("cannot read namespace %s: %s", namespace, e)
    if found == []:
        return failed(name, f"namespace {namespace!r} does not exist in this cluster", fix)
    if not operator:
        return passed(name, f"namespace {namespace!r} exists")
    try:
        pools = list(api.get("daskclusters.kubernetes.dask.org", namespace=namespace, raw=True))
    except kr8s.ServerError as e:
        return failed(
            name,
            str(translate_api_error(e, namespace, f"list DaskClusters in namespace '{namespace}'")),
            f"ask an admin for a RoleBinding in {namespace!r} that allows DaskClusters, or use a namespace you may "
            f"use: export {ENVIRONMENT['kubernetes_namespace']}=<namespace>",
        )
    if found:
        return passed(name, f"namespace {namespace!r} exists and you may list its DaskClusters ({len(pools)} now)")
    return passed(
        name,
        f"you may list DaskClusters in namespace {namespace!r} ({len(pools)} now); listing namespaces is forbidden "
        f"to you, so whether it exists is not confirmed",
    )


def check_kubernetes(config: GpugeekConfig | None = None) -> list[CheckResult]:
    """Only with the kubernetes backend configured: credentials and an answering API server, the dask
    operator's resource types, and the namespace pools go to (skipped, saying how to enable it, otherwise)."""
    config = get_config() if config is None else config
    if config.default_backend != "kubernetes":
        return [
            skipped(
                "kubernetes",
                f"the default backend is {config.default_backend!r}, not 'kubernetes' (to check it: export "
                f"{ENVIRONMENT['default_backend']}=kubernetes, or c.GpugeekConfig.default_backend = 'kubernetes' "
                f"in jupyter_gpugeek_config.py)",
            )
        ]
    name = "kubernetes credentials"
    fix = (
        "export KUBECONFIG=/path/to/your/kubeconfig (e.g. from gcloud container clusters get-credentials or "
        "aws eks update-kubeconfig), then check with kubectl get nodes; see docs/kubernetes.md"
    )
    after = "needs a Kubernetes API that answers (see kubernetes credentials)"
    unchecked = [skipped("dask operator", after), skipped("kubernetes namespace", after)]
    missing = _missing_credentials()
    if missing:
        return [failed(name, f"no Kubernetes credentials: {missing}", fix), *unchecked]
    try:
        from .pools.kubernetes import connect

        api = connect()
        version = api.version().get("gitVersion", "?")
    except Exception as e:  # a GpugeekError phrased for people, or kr8s failing on a malformed file
        detail = (
            str(e) if isinstance(e, GpugeekError) else f"cannot use {_credentials_source()}: {type(e).__name__}: {e}"
        )
        return [failed(name, detail, f"{fix}; kubectl cluster-info should answer"), *unchecked]
    credentials = passed(
        name, f"{_credentials_source()}: the API server {api.auth.server} answers (Kubernetes {version})"
    )
    operator = _kubernetes_operator(api)
    namespace = _kubernetes_namespace(api, config.kubernetes_namespace, operator.state is CheckState.PASS)
    return [credentials, operator, namespace]


# -- all of them --------------------------------------------------------------------------------------
def _guarded(name: str, check: Callable[[], CheckResult | list[CheckResult]]) -> list[CheckResult]:
    try:
        result = check()
    except Exception as e:  # a broken check must not hide the others; it is reported as a failure
        log.debug("check %s raised", name, exc_info=True)
        return [
            failed(
                name,
                f"the check itself failed: {type(e).__name__}: {e}",
                "report it with this line (python -m gpugeek_jupyter doctor --json shows every check)",
            )
        ]
    return result if isinstance(result, list) else [result]


def run_checks() -> list[CheckResult]:
    """Every check, in the order a user fixes them: Jupyter, the registry, GPUs, Kubernetes, torch."""
    results: list[CheckResult] = []
    results += _guarded("labextension", check_labextension)
    results += _guarded("server extension", check_server_extension)
    results += _guarded("registry", check_registry)
    facts = gpu_facts()
    results += _guarded("GPUs", lambda: check_gpus(facts))
    results += _guarded("dask-cuda", lambda: check_dask_cuda(facts))
    results += _guarded("kubernetes", check_kubernetes)
    results += _guarded("torch", lambda: check_torch(facts))
    return results


def header() -> str:
    """Which gpugeek-jupyter and which Python the checks are about."""
    return f"gpugeek-jupyter {__version__}, Python {sys.version.split()[0]} at {sys.prefix}"


def summary(results: Iterable[CheckResult]) -> str:
    """E.g. ``7 checks: 4 passed, 3 skipped, 0 failed``."""
    results = list(results)
    count = {state: sum(r.state is state for r in results) for state in CheckState}
    return (
        f"{len(results)} checks: {count[CheckState.PASS]} passed, {count[CheckState.SKIP]} skipped, "
        f"{count[CheckState.FAIL]} failed"
    )


def report(results: Iterable[CheckResult]) -> str:
    """The header, one line per check and the summary."""
    results = list(results)
    return "\n".join([header(), *(r.line() for r in results), summary(results)])


def as_json(results: Iterable[CheckResult]) -> str:
    """The checks as JSON: ``{"version", "python", "checks": [{name, state, detail, fix}], "failed"}``."""
    results = list(results)
    return json.dumps(
        {
            "version": __version__,
            "python": sys.prefix,
            "checks": [{**asdict(r), "state": r.state.value} for r in results],
            "failed": sum(r.state is CheckState.FAIL for r in results),
        },
        indent=2,
    )


def any_failed(results: Iterable[CheckResult]) -> bool:
    return any(r.state is CheckState.FAIL for r in results)
