"""What a built wheel and sdist must contain: the package, the prebuilt labextension, the server config.

``make dist`` runs it on ``dist/``; the wheel smoke test runs it on the wheel it installs.

Usage: python tests/packaging/dist_contents.py dist/
"""

from __future__ import annotations

import json
import sys
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

LABEXTENSION = "share/jupyter/labextensions/gpugeek-jupyter"
SERVER_CONFIG = "etc/jupyter/jupyter_server_config.d"
# never in a wheel: development trees and bytecode
FORBIDDEN_PARTS = {"node_modules", "tests", ".venv", "__pycache__", ".ipynb_checkpoints"}


def wheel_problems(wheel: Path) -> list[str]:
    """Everything missing from (or wrongly in) ``wheel``, one sentence each; empty when it is complete."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        data = _wheel_data_dir(names)
        problems = []
        for required in ("gpugeek_jupyter/__init__.py", "gpugeek_jupyter/data/catalog.toml"):
            if required not in names:
                problems.append(f"{wheel.name} lacks {required}")
        if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
            problems.append(f"{wheel.name} lacks the LICENSE file in its .dist-info/licenses/")
        problems += _labextension_problems(archive, names, f"{data}/{LABEXTENSION}", wheel.name)
        problems += _server_config_problems(archive, names, f"{data}/{SERVER_CONFIG}", wheel.name)
        for name in names:
            if FORBIDDEN_PARTS & set(PurePosixPath(name).parts) or name.endswith(".pyc"):
                problems.append(f"{wheel.name} should not contain {name}")
        return problems


def sdist_problems(sdist: Path) -> list[str]:
    """What an sdist needs to build the same wheel without Node: the prebuilt labextension, sources, LICENSE."""
    with tarfile.open(sdist) as archive:
        names = {PurePosixPath(n).relative_to(PurePosixPath(n).parts[0]).as_posix() for n in archive.getnames()}
    required = [
        "pyproject.toml",
        "LICENSE",
        "README.md",
        "gpugeek_jupyter/__init__.py",
        "gpugeek_jupyter/labextension/package.json",
        "gpugeek_jupyter/labextension/static/style.js",
        "labextension/install.json",
        "labextension/package.json",
        "jupyter-config/server-config/gpugeek_jupyter.json",
    ]
    problems = [f"{sdist.name} lacks {r}" for r in required if r not in names]
    problems += [
        f"{sdist.name} should not contain {n}" for n in names if n.startswith(("labextension/node_modules/", ".venv/"))
    ]
    return problems


def _wheel_data_dir(names: list[str]) -> str:
    data_dirs = {n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".data")}
    return data_dirs.pop() + "/data" if len(data_dirs) == 1 else "<no .data directory>"


def _labextension_problems(archive: zipfile.ZipFile, names: list[str], root: str, wheel: str) -> list[str]:
    problems = [f"{wheel} lacks {root}/{f}" for f in ("package.json", "install.json") if f"{root}/{f}" not in names]
    static = [n for n in names if n.startswith(f"{root}/static/")]
    if not static:
        return [*problems, f"{wheel} has no built labextension files under {root}/static/"]
    if f"{root}/package.json" in names:
        # JupyterLab loads the extension from the remote entry its package.json names
        load = json.loads(archive.read(f"{root}/package.json")).get("jupyterlab", {}).get("_build", {}).get("load")
        if not load:
            problems.append(f"{wheel}: {root}/package.json has no jupyterlab._build.load (not a built labextension)")
        elif f"{root}/{PurePosixPath(load)}" not in names:
            problems.append(f"{wheel}: {root}/package.json loads {load}, which is not in the wheel")
    return problems


def _server_config_problems(archive: zipfile.ZipFile, names: list[str], root: str, wheel: str) -> list[str]:
    configs = [n for n in names if n.startswith(f"{root}/") and n.endswith(".json")]
    if not configs:
        return [f"{wheel} lacks a server config {root}/*.json"]
    enabled = any(
        json.loads(archive.read(c)).get("ServerApp", {}).get("jpserver_extensions", {}).get("gpugeek_jupyter") is True
        for c in configs
    )
    return [] if enabled else [f"{wheel}: no {root}/*.json enables the gpugeek_jupyter server extension"]


def main(argv: list[str]) -> int:
    folder = Path(argv[1] if len(argv) > 1 else "dist")
    wheels, sdists = sorted(folder.glob("*.whl")), sorted(folder.glob("*.tar.gz"))
    problems = [] if len(wheels) == 1 and len(sdists) == 1 else [f"{folder}/ should hold one wheel and one sdist"]
    for wheel in wheels:
        problems += wheel_problems(wheel)
    for sdist in sdists:
        problems += sdist_problems(sdist)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"{', '.join(p.name for p in wheels + sdists)}: complete (labextension, server config, LICENSE)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
