"""No API key, server token or pool TLS key material in any repr, log line, widget state, error
message, REST answer or registry row.

The secrets are known values here (the pool's certificates and key are read from their files while
it runs); everything a user or an admin could read afterwards is searched for them: every message
the kernel sent (outputs, errors, widget and bokeh comm state), a DEBUG log of the kernel's Python
logging, the Jupyter server's log at DEBUG and its answers, and the registry's bytes (the database
and its write-ahead log).
"""

from __future__ import annotations

import json
import secrets
import textwrap
from pathlib import Path

import pytest

from support.kernel import KernelSession
from support.lab_server import LabServer, start_lab
from support.waiting import wait_for

pytestmark = pytest.mark.slow

API_KEY = "gpk-" + secrets.token_hex(20)


def _registry_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")) if p.is_file())


def _credential_material(registry: Path) -> list[str]:
    """The base64 lines of every pool credential file beside ``registry`` (certificates and keys),
    and the PEM marker of a private key: one of them anywhere else would be a leak. A file's short
    last line is left out: a few base64 characters turn up by chance in the megabytes of inline
    BokehJS and styles a kernel's messages carry (a PNG's "...AAAABJRU5ErkJggg==" did)."""
    lines = ["PRIVATE KEY-----"]
    for pem in sorted((registry.parent / "gpugeek-credentials").rglob("*.pem")):
        lines += [line for line in pem.read_text().splitlines() if len(line) >= 32 and not line.startswith("-----")]
    assert len(lines) > 3, "no pool credentials to look for: is the pool running with TLS?"
    return lines


def _pool_status(server: LabServer, name: str) -> str | None:
    _, body = server.call("GET", "gpugeek/pools")
    return next((pool["status"] for pool in body["pools"] if pool["name"] == name), None)


def _where(secret: str, text: str, width: int = 120) -> list[str]:
    found, start = [], text.find(secret)
    while start >= 0 and len(found) < 5:
        found.append(text[max(0, start - width) : start + len(secret) + 20])
        start = text.find(secret, start + 1)
    return found


@pytest.mark.timeout(300)
def test_the_api_key_never_appears_in_kernel_output_widgets_logs_or_the_registry(tmp_path: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    """Security: no api_key, token or TLS key in reprs, logs, widgets, db"""
    registry = tmp_path / "gpugeek.sqlite"
    log_file = tmp_path / "kernel-debug.log"
    script = tmp_path / "train.py"
    script.write_text("import sys\nraise SystemExit(f'bad hyperparameters: {sys.argv[1:]}')\n")
    session = KernelSession(
        env={"GPUGEEK_API_KEY": API_KEY, "GPUGEEK_REGISTRY": str(registry), "GPUGEEK_PRELOAD_TORCH": "0"}
    )
    cells = [
        f"import logging\nlogging.basicConfig(filename={str(log_file)!r}, level=logging.DEBUG, force=True)",
        "%load_ext gpugeek_jupyter",
        "%gpugeek_launch --gpu-type cpu --count 2 --name secrets",
        "from gpugeek_jupyter import ClusterClient\nclient = ClusterClient()\nclient",
        "print(repr(client), str(client), client.has_api_key)",
        "import os\nexplicit = ClusterClient(api_key=os.environ['GPUGEEK_API_KEY'])\nprint(explicit, [explicit])",
        "explicit.create_job(gpu_type='V100', count=2)",  # a bad value: the error must not carry the key
        "import pickle\npickle.dumps(client)",
        "job = client.job_on('secrets')\njob",
        f"result = job.run(script_path={str(script)!r}, hyperparams={{'lr': 0.1}})\nresult",
        "%gpugeek_pools",
        "%gpugeek_jobs",
        "%gpugeek_cost",
        "%gpugeek_monitor --pool secrets",
        "import gpugeek_jupyter\npool = gpugeek_jupyter.current_pool()\nprint(pool, pool.running, pool.security)\npool",
        "%gpugeek_stop secrets",
    ]
    material: list[str] = []
    try:
        for cell in cells:
            if cell.startswith("%gpugeek_stop"):  # the pool's credentials go with it
                material = _credential_material(registry)
            session.run(cell, timeout=120)
    finally:
        session.shutdown()

    messages = json.dumps(session.messages, default=str)
    places = {
        "kernel messages (outputs, errors, widget state)": messages,
        "kernel DEBUG log": log_file.read_text(errors="replace") if log_file.exists() else "",
        "registry": _registry_bytes(registry).decode("latin-1"),
    }
    leaks = {where: _where(API_KEY, text) for where, text in places.items() if API_KEY in text}
    leaks.update(
        {
            f"TLS key material in {where}": _where(line, text)
            for where, text in places.items()
            for line in material
            if line in text
        }
    )
    # the test looked at the right things: the widgets and the failed job are in what it searched
    assert '"comm_open"' in messages and "application/vnd.jupyter.widget-view+json" in messages
    assert "bad hyperparameters" in messages and "'***'" in messages
    assert "secrets" in places["registry"] and places["kernel DEBUG log"]
    scenario.record(survived=not leaks, data_lost=0)
    assert leaks == {}


@pytest.mark.timeout(300)
def test_the_server_token_and_api_key_never_appear_in_the_server_log_or_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scenario
) -> None:  # type: ignore[no-untyped-def]
    """Security: no api_key, token or TLS key in reprs, logs, widgets, db"""
    monkeypatch.setenv("GPUGEEK_API_KEY", API_KEY)
    registry = tmp_path / "gpugeek.sqlite"
    server = start_lab(tmp_path / "home", registry, extra_args=("--debug",))
    answers: list[str] = []
    material: list[str] = []
    try:
        for method, path, body in [
            ("POST", "pools", {"gpu_type": "cpu", "count": 1, "name": "from-panel"}),
            ("POST", "pools", {"gpu_type": "V100", "count": 2}),  # 400
            ("POST", "pools", "not json"),
            ("GET", "pools", None),
            ("GET", "pools/from-panel", None),
            ("GET", "pools/from-panel/metrics", None),
            ("GET", "jobs", None),
            ("GET", "catalog", None),
            ("DELETE", "pools/from-panel", None),
            ("DELETE", "pools/ghost", None),  # 404
        ]:
            if (method, path) == ("DELETE", "pools/from-panel"):  # the pool's credentials go with it
                # the panel's launch answers at once and the pool starts behind it: its certificates
                # exist once it is ready (a slow machine took longer than the requests above)
                wait_for(lambda: _pool_status(server, "from-panel") == "ready", 120, "the panel's pool ready")
                material = _credential_material(registry)
            _, answer = server.call(method, f"gpugeek/{path}", body)
            answers.append(json.dumps(answer))
        status, _ = server.call("GET", "gpugeek/pools", token="wrong-" + server.token)  # refused, and logged
        assert status == 403
    finally:
        server.stop()

    log_lines = server.log_path.read_text(errors="replace").splitlines()
    # Jupyter Server itself prints the token given on its command line in two places, for the person
    # who started it: the login URL of its start-up banner, and (at DEBUG) its "Config changed" dump
    jupyters_own = ("?token=", "DeferredConfigString(")
    ours = "\n".join(line for line in log_lines if not any(mark in line for mark in jupyters_own))
    places = {
        "server log": ours,
        "answers": "\n".join(answers),
        "registry": _registry_bytes(registry).decode("latin-1"),
    }
    secrets_ = [("api key", API_KEY), ("server token", server.token)] + [("TLS key material", m) for m in material]
    leaks = {
        f"{what} in {where}": _where(secret, text)
        for where, text in places.items()
        for what, secret in secrets_
        if secret in text
    }
    assert "from-panel" in places["registry"] and "gpugeek" in ours  # the searched places hold the requests
    scenario.record(survived=not leaks, data_lost=0)
    assert leaks == {}, textwrap.shorten(str(leaks), 2000)
