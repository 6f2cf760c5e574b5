"""A team on a real JupyterHub: two OS users made by this test, the hub's LocalProcessSpawner, the
single-user servers in an environment built from the system's Python (every user can execute it)
with this checkout on its path, and the team's ledger service, managed by the hub, over a real
PostgreSQL (the users' servers get the service's URL, never the database's).

Each user launches through their own server's REST API, as the side panel does, with a token of the
hub's: each sees only their own pools; the owner's dashboard opens through her server's route and
neither another user's login, nor his /proxy/<port>/ to any port of hers, nor her dashboard's socket
reaches it; a launch past the GPU quota, past the worker quota, past a hub group's quota and
past the team budget are refused with the limit named, the limits being the ledger service's (the
admin's settings), not the looser ones the users' own settings say; the ledger holds both users' pools under
their hub names; the team view is every user's for an admin and her own for a user; a user's token
cannot close another's row at the service; a pool stopped while the service is stopped has its row
closed once it is back; stopping a user's server stops their pool, closes its ledger row and
removes their temporary folders. Chromium, logged in to the hub, shows the service's quota line in
a user's side panel.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.postgres import postgres_server, postgres_unavailable
from support.processes import kill, wait_until_gone

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"
USERS = ("gpugeek-hub-a", "gpugeek-hub-b")
HUB_PACKAGES = [
    "jupyterhub>=6,<7",
    "jupyter_server>=2.4,<3",
    "jupyterlab>=4,<5",
    "jupyter-server-proxy>=4.1",
    "dask",
    "distributed",
    "cloudpickle",
    "tqdm",
    "traitlets",
    "psutil",
    "nvidia-ml-py",
    "ipython",
    "ipywidgets",
    "bokeh",
    "jupyter_bokeh",
    "cryptography",
    "ipykernel",
    "pandas",
    "numpy",
    "fsspec",
    "cronsim",
    "SQLAlchemy>=2",
    "psycopg[binary]>=3.1",
]
ENVIRONMENT = Path(tempfile.gettempdir()) / "gpugeek-hub-environment"  # kept between runs: ~1 min to make


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root, to make OS users and run JupyterHub's LocalProcessSpawner"
    if not Path(SYSTEM_PYTHON).exists() or shutil.which("useradd") is None or shutil.which("npm") is None:
        return f"needs {SYSTEM_PYTHON}, useradd and npm"
    if any(os.stat(p).st_mode & 0o005 != 0o005 for p in [REPO, *REPO.parents] if p != Path("/")):
        return f"{REPO} is not readable by other users"
    return postgres_unavailable()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def environment() -> Path:
    """A venv of the system's Python with JupyterHub, the package's dependencies (not torch: no job
    runs here) and this checkout on its path; configurable-http-proxy beside it."""
    why = _unavailable()
    if why:
        pytest.skip(why)
    venv = ENVIRONMENT / "venv"
    ready = ENVIRONMENT / "ready"
    if not ready.exists():
        shutil.rmtree(ENVIRONMENT, ignore_errors=True)
        ENVIRONMENT.mkdir(mode=0o755)
        subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(venv)], check=True, timeout=120)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *HUB_PACKAGES], check=True, timeout=600)
        subprocess.run(
            ["npm", "install", "-g", "--prefix", str(ENVIRONMENT / "proxy"), "configurable-http-proxy"],
            check=True,
            capture_output=True,
            timeout=300,
        )
        ready.write_text("ok")
    built = REPO / "gpugeek_jupyter" / "labextension"  # the side panel, as `make setup` built it
    labextensions = venv / "share" / "jupyter" / "labextensions"
    labextensions.mkdir(parents=True, exist_ok=True)
    link = labextensions / "gpugeek-jupyter"
    if built.joinpath("package.json").exists() and not link.exists():
        link.symlink_to(built)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "gpugeek_checkout.pth").write_text(f"{REPO}\n")
    enable = venv / "etc" / "jupyter" / "jupyter_server_config.d"
    enable.mkdir(parents=True, exist_ok=True)
    (enable / "gpugeek_jupyter.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"gpugeek_jupyter": True}}})
    )
    for path in [ENVIRONMENT, *ENVIRONMENT.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o005 | (0o050 if path.is_dir() else 0o040))
    return venv


@pytest.fixture(scope="module")
def users() -> Iterator[dict[str, int]]:
    """Two OS users with homes, removed (with everything they ran) afterwards."""
    made: dict[str, int] = {}
    try:
        for name in USERS:
            subprocess.run(["userdel", "-r", name], capture_output=True)
            subprocess.run(["useradd", "-m", "-s", "/bin/bash", name], check=True, capture_output=True)
            made[name] = pwd.getpwnam(name).pw_uid
        yield made
    finally:
        for name in made:
            subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)  # only this user's processes
            time.sleep(0.5)
            subprocess.run(["userdel", "-r", name], capture_output=True)


@pytest.fixture(scope="module")
def ledger_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


class Hub:
    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token
        self.process: subprocess.Popen[bytes] | None = None

    def ledger_service_pids(self) -> list[int]:
        """The team's ledger service, a managed service: the hub's child processes that run it."""
        import psutil

        assert self.process is not None
        pids = []
        for child in psutil.Process(self.process.pid).children(recursive=True):
            try:
                if "gpugeek_jupyter.hub.ledger_service" in " ".join(child.cmdline()):
                    pids.append(int(child.pid))
            except psutil.Error:
                continue  # a process that ended meanwhile
        assert pids, "the hub runs no gpugeek-ledger service"
        return pids

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else (b"" if method in ("POST", "PUT") else None)
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                text = response.read()
                if not text:
                    return response.status, None
                try:
                    return response.status, json.loads(text)
                except ValueError:  # a page, not JSON (the dashboard's)
                    return response.status, text.decode(errors="replace")
        except urllib.error.HTTPError as e:
            text = e.read()
            try:
                return e.code, json.loads(text)
            except ValueError:
                return e.code, text.decode(errors="replace")

    def start_server(self, user: str) -> None:
        status, body = self.call("POST", f"/hub/api/users/{user}/server")
        assert status in (201, 202), (status, body)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            status, body = self.call("GET", f"/hub/api/users/{user}")
            server = (body or {}).get("servers", {}).get("", {})
            if server.get("ready"):
                return
            time.sleep(0.5)
        raise AssertionError(f"{user}'s server did not become ready: {body}")

    def stop_server(self, user: str) -> None:
        status, body = self.call("DELETE", f"/hub/api/users/{user}/server")
        assert status in (202, 204), (status, body)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            status, body = self.call("GET", f"/hub/api/users/{user}")
            if not (body or {}).get("servers"):
                return
            time.sleep(0.5)
        raise AssertionError(f"{user}'s server did not stop: {body}")


@pytest.fixture(scope="module")
def hub(environment: Path, users: dict[str, int], ledger_url: str) -> Iterator[Hub]:
    """JupyterHub on loopback with the two users allowed, a service token that may start their servers
    and reach them, and the team's settings (quotas, ledger) in a config directory every user reads."""
    work = Path(tempfile.mkdtemp(prefix="gpugeek-hub-"))
    work.chmod(0o755)
    # the admin's settings: read by the team's ledger service only (a folder of root's alone)
    admin_settings = work / "admin-settings"
    admin_settings.mkdir(mode=0o700)
    (admin_settings / "jupyter_gpugeek_config.json").write_text(
        json.dumps(
            {
                "GpugeekConfig": {
                    "quota_max_workers": 2,
                    "quota_max_gpus": 2,
                    "team_budget_usd_per_month": 1000.0,
                    "group_quotas": {"small": {"max_workers": 1}},
                }
            }
        )
    )
    # what every user's processes read: limits a user could write into their own ~/.jupyter too,
    # looser than the admin's; they do not count while the service answers
    settings = work / "settings"
    settings.mkdir(mode=0o755)
    (settings / "jupyter_gpugeek_config.json").write_text(json.dumps({"GpugeekConfig": {"quota_max_workers": 100}}))
    (settings / "jupyter_gpugeek_config.json").chmod(0o644)
    token = secrets.token_hex(16)
    port, hub_port, proxy_api, ledger_port = _free_port(), _free_port(), _free_port(), _free_port()
    config = work / "jupyterhub_config.py"
    config.write_text(
        f"""
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api}"
c.ConfigurableHTTPProxy.command = [{str(environment.parent / "proxy" / "bin" / "configurable-http-proxy")!r}]
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = {set(USERS)!r}
c.JupyterHub.services = [
    {{"name": "gpugeek-test", "api_token": {token!r}}},
    {{"name": "gpugeek-ledger", "url": "http://127.0.0.1:{ledger_port}",
      "command": [{str(environment / "bin" / "python")!r}, "-m", "gpugeek_jupyter.hub.ledger_service"],
      "environment": {{"GPUGEEK_TEAM_LEDGER": {ledger_url!r}, "PYTHONDONTWRITEBYTECODE": "1",
                       "JUPYTER_CONFIG_PATH": {str(admin_settings)!r}}}}},
]
c.JupyterHub.load_roles = [{{"name": "gpugeek-test", "services": ["gpugeek-test"],
    "scopes": ["admin:users", "admin:servers", "access:servers", "list:users", "read:users", "tokens"]}},
    {{"name": "server", "scopes": ["users:activity!user", "access:servers!server", "read:users:groups!user"]}}]
c.JupyterHub.load_groups = {{"small": {{"users": [{USERS[1]!r}]}}}}
c.Spawner.cmd = [{str(environment / "bin" / "jupyterhub-singleuser")!r}]
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180
c.Spawner.environment = {{
    "GPUGEEK_TEAM_SERVICE": "http://127.0.0.1:{ledger_port}/services/gpugeek-ledger/",
    "GPUGEEK_PRELOAD_TORCH": "0",
    "JUPYTER_CONFIG_PATH": {str(settings)!r},
    "PYTHONDONTWRITEBYTECODE": "1",
}}
c.JupyterHub.cleanup_servers = True
"""
    )
    log = open(work / "hub.log", "wb")
    process = subprocess.Popen(
        [str(environment / "bin" / "jupyterhub"), "-f", str(config)],
        cwd=work,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PATH": f"{environment / 'bin'}:{os.environ['PATH']}"},
    )
    hub = Hub(f"http://127.0.0.1:{port}", token)
    hub.process = process
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError((work / "hub.log").read_text()[-3000:])
            try:
                if hub.call("GET", "/hub/api/")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        for user in USERS:
            hub.start_server(user)
        yield hub
    finally:
        for user in USERS:
            try:
                hub.call("DELETE", f"/hub/api/users/{user}/server")
            except OSError:
                pass
        process.terminate()
        if wait_until_gone([process.pid], 30):
            kill([process.pid])
        log.close()
        if os.environ.get("GPUGEEK_KEEP_HUB_LOG"):
            sys.stderr.write((work / "hub.log").read_text()[-5000:])
        shutil.rmtree(work, ignore_errors=True)


def _pools(hub: Hub, user: str) -> list[str]:
    status, body = hub.call("GET", f"/user/{user}/gpugeek/pools")
    assert status == 200, (status, body)
    return sorted(p["name"] for p in body["pools"] if p["status"] in ("starting", "ready"))


def _wait_until_ready(hub: Hub, user: str, name: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status, body = hub.call("GET", f"/user/{user}/gpugeek/pools")
        states = {p["name"]: p["status"] for p in body["pools"]}
        if states.get(name) == "ready":
            return
        assert states.get(name) == "starting", (name, states)
        time.sleep(0.5)
    raise AssertionError(f"{user}'s pool {name} did not become ready")


def _listening_ports(uid: int) -> set[int]:
    """The TCP ports that processes of ``uid`` listen on."""
    import psutil

    ports = set()
    for process in psutil.process_iter(["uids"]):
        try:
            if process.info["uids"] is None or process.info["uids"].real != uid:
                continue
            for connection in process.net_connections(kind="tcp"):
                if connection.status == psutil.CONN_LISTEN:
                    ports.add(int(connection.laddr.port))
        except psutil.Error:
            continue  # a process that ended meanwhile
    return ports


def _dashboards_reach_their_owner_only(hub: Hub, alice: str, bob: str) -> None:
    """alice's dashboard through her own server's route (the hub login in front); not for bob's login,
    not through bob's /proxy/<port>/ to any port alice's processes listen on, not by her socket."""
    status, page = hub.call("GET", f"/user/{alice}/gpugeek/pools/alice-1/dashboard/status")
    assert status == 200 and "Dask" in str(page), (status, str(page)[:300])
    status, made = hub.call("POST", f"/hub/api/users/{bob}/tokens", {"note": "his own"})
    assert status == 201, (status, made)
    as_bob = Hub(hub.url, made["token"])
    status, _ = as_bob.call("GET", f"/user/{alice}/gpugeek/pools/alice-1/dashboard/status")
    assert status == 403, status
    # bob's /proxy/<port>/ does reach loopback ports: the hub's own API through it answers him
    hub_port = int(hub.url.rsplit(":", 1)[1])
    status, body = as_bob.call("GET", f"/user/{bob}/proxy/{hub_port}/hub/api/")
    assert status == 200 and "version" in body, (status, body)
    alice_uid = pwd.getpwnam(alice).pw_uid
    ports = _listening_ports(alice_uid)
    assert ports, "alice's server and pool listen on no TCP port?"
    for port in sorted(ports):
        status, page = as_bob.call("GET", f"/user/{bob}/proxy/{port}/status")
        assert status != 200 or "Dask" not in str(page), (port, status, str(page)[:300])
    [path] = list(Path(pwd.getpwnam(alice).pw_dir).rglob("*.sock"))
    tried = subprocess.run(
        ["runuser", "-u", bob, "--", SYSTEM_PYTHON, "-c",
         "import socket\nclient = socket.socket(socket.AF_UNIX)\ntry:\n"
         f"    client.connect({str(path)!r})\n    print('connected')\n"
         "except OSError as e:\n    print(type(e).__name__)\n"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert tried.stdout.strip() == "PermissionError", (tried.stdout, tried.stderr)


def test_the_side_panel_through_the_hub_shows_the_services_quota_line(
    hub: Hub, page: Any, screenshot_on_failure: None
) -> None:
    """Chromium logs in to the hub as bob and opens his JupyterLab: the panel's quota line is the
    service's (his group's one worker, the admin's two GPUs and the team budget), not the hundred
    workers his own settings say."""
    from support.panel import PANEL, READY_TIMEOUT_MS, TAB, expect

    if not (REPO / "gpugeek_jupyter" / "labextension" / "package.json").exists():
        pytest.skip("the labextension is not built (make setup builds it)")
    bob = USERS[1]
    page.goto(f"{hub.url}/hub/login")
    page.locator('input[name="username"]').fill(bob)
    page.locator('input[name="password"]').fill("any")  # the hub's dummy authenticator
    page.locator('input[type="submit"], button[type="submit"]').first.click()
    page.wait_for_load_state()
    page.goto(f"{hub.url}/user/{bob}/lab")
    page.locator(TAB).wait_for(timeout=READY_TIMEOUT_MS)
    page.locator("#jupyterlab-splash").wait_for(state="detached")
    panel = page.locator(PANEL)
    if not panel.is_visible():
        page.locator(TAB).click()
    quota = panel.locator(".gpugeek-panel-header .gpugeek-quota")
    expect(quota).to_have_text(
        re.compile(r"^quota 0/2 GPUs · 0/1 workers · team \$[0-9.,]+ of \$1000\.00 this month$"),
        timeout=READY_TIMEOUT_MS,
    )


def test_two_users_quotas_team_budget_and_ledger_on_a_real_jupyterhub(
    hub: Hub, users: dict[str, int], ledger_url: str
) -> None:
    alice, bob = USERS
    launch = {"gpu_type": "cpu", "count": 1, "backend": "local"}
    status, body = hub.call("POST", f"/user/{alice}/gpugeek/pools", {**launch, "name": "alice-1"})
    assert status == 201, (status, body)
    status, body = hub.call("POST", f"/user/{alice}/gpugeek/pools", {**launch, "count": 2, "name": "alice-2"})
    assert status == 403, (status, body)
    assert body["message"] == (
        f'"count": 2 would give "{alice}" 3 workers at once, past the quota of 2 '
        "(GpugeekConfig.quota_max_workers; 1 held now); stop one of your pools or ask your admin"
    )
    status, body = hub.call("POST", f"/user/{bob}/gpugeek/pools", {**launch, "name": "bob-1"})
    assert status == 201, (status, body)
    _wait_until_ready(hub, alice, "alice-1")
    _wait_until_ready(hub, bob, "bob-1")
    assert _pools(hub, alice) == ["alice-1"] and _pools(hub, bob) == ["bob-1"]  # each sees their own only
    # GPUs: a pool on a GPU cluster by address, past the service's two-GPU quota, refused before anything
    gpus = {"backend": "address", "address": "tcp://127.0.0.1:9", "gpu_type": "A100-80GB", "count": 4}
    status, body = hub.call("POST", f"/user/{alice}/gpugeek/pools", {**gpus, "name": "alice-gpus"})
    assert status == 403, (status, body)
    assert body["message"] == (
        f'"count": 4 would give "{alice}" 4 GPUs at once, past the quota of 2 '
        "(GpugeekConfig.quota_max_gpus; 0 held now); stop one of your pools or ask your admin"
    )
    _dashboards_reach_their_owner_only(hub, alice, bob)
    # bob is in the hub's group "small", whose quota is one worker; alice, in no group, may hold two
    status, body = hub.call("POST", f"/user/{bob}/gpugeek/pools", {**launch, "name": "bob-extra"})
    assert status == 403, (status, body)
    assert body["message"] == (
        f'"count": 1 would give "{bob}" 2 workers at once, past the quota of 1 '
        "(GpugeekConfig.group_quotas['small']['max_workers']; 1 held now); stop one of your pools or ask your admin"
    )

    from gpugeek_jupyter.cost.team import POOLS, TeamLedger

    ledger = TeamLedger(ledger_url)
    assert {(r.user_name, r.pool_name) for r in ledger.open_pools(alice) + ledger.open_pools(bob)} == {
        (alice, "alice-1"),
        (bob, "bob-1"),
    }
    status, made = hub.call("POST", f"/hub/api/users/{alice}/tokens", {"note": "her own"})
    assert status == 201, (status, made)
    as_alice = Hub(hub.url, made["token"])

    # a user cannot write another's rows: alice's own token, straight to the service, closing bob's pool
    [bob_row] = ledger.open_pools(bob)
    close_bobs = {"reports": [{"op": "close", "key": bob_row.pool_key, "ended_at": time.time()}]}
    status, body = as_alice.call("POST", "/services/gpugeek-ledger/api/reports", close_bobs)
    assert status == 200 and body["results"][0].startswith(
        f"pool {bob_row.pool_key!r} belongs to '{bob}', not to '{alice}'"
    )
    assert [r.pool_name for r in ledger.open_pools(bob)] == ["bob-1"]
    status, body = Hub(hub.url, "not-a-token").call("POST", "/services/gpugeek-ledger/api/reports", close_bobs)
    assert status == 403, (status, body)

    # the service stopped mid-pool: bob's pool stops meanwhile, and its row closes once it is back
    import psutil

    service = hub.ledger_service_pids()
    for pid in service:
        os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 5  # a signal takes effect when the process next runs
        while time.monotonic() < deadline and any(psutil.Process(p).status() != psutil.STATUS_STOPPED for p in service):
            time.sleep(0.05)
        assert all(psutil.Process(pid).status() == psutil.STATUS_STOPPED for pid in service), service
        status, body = hub.call("DELETE", f"/user/{bob}/gpugeek/pools/bob-1")
        assert status == 200, (status, body)
        assert [r.pool_name for r in ledger.open_pools(bob)] == ["bob-1"]  # not written: it waits in his registry
    finally:
        for pid in service:
            os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + 40  # the server sends its outbox every 10 s
    while time.monotonic() < deadline and ledger.open_pools(bob):
        time.sleep(0.5)
    assert ledger.open_pools(bob) == []
    ended = [r for r in ledger.report(0.0, user=bob)]
    assert [(r["user"], r["pools"]) for r in ended] == [(bob, 1)]  # the one row, closed: nothing lost

    # the team budget last: it also stops running pools (within TEAM_BUDGET_CHECK_S), and bob's had
    # to run until here
    from sqlalchemy import insert

    now = time.time()
    with ledger.engine.begin() as db:  # someone else of the team spent the budget this month
        db.execute(
            insert(POOLS).values(
                pool_key="elsewhere:1", user_name="carol", host="elsewhere", pool_name="big", backend="slurm",
                gpu_type="H100-80GB", gpus=8, workers=8, usd_per_hour=10_000_000.0, started_at=now - 1, ended_at=now,
            )
        )  # fmt: skip
    status, body = hub.call("POST", f"/user/{alice}/gpugeek/pools", {**launch, "name": "alice-3"})  # within her quota
    assert status == 403 and "(GpugeekConfig.team_budget_usd_per_month)" in body["message"], (status, body)
    assert body["message"].startswith("the team has spent $")

    # the team's spend: this service's token holds the hub's admin:users, so it sees every user; alice,
    # no hub admin, sees her own row on her own server and may not ask for bob's
    status, body = hub.call("GET", f"/user/{alice}/gpugeek/team")
    assert status == 200 and body["admin"] is True, (status, body)
    assert {r["user"] for r in body["rows"]} == {alice, bob, "carol"}
    status, body = hub.call("GET", f"/user/{alice}/gpugeek/team?by=group")  # the groups as the hub said them
    assert status == 200, (status, body)
    assert {(r["group"], r["gpu_type"], r["users"]) for r in body["rows"]} == {
        ("small", "cpu", 1),  # bob's
        ("", "cpu", 1),  # alice's, in no group
        ("", "H100-80GB", 1),  # carol's, written straight into the ledger
    }, body
    status, body = as_alice.call("GET", f"/user/{alice}/gpugeek/team")
    assert status == 200 and (body["viewer"], body["admin"]) == (alice, False), (status, body)
    assert [(r["user"], r["pools"]) for r in body["rows"]] == [(alice, 1)]
    status, body = as_alice.call("GET", f"/user/{alice}/gpugeek/team?user={bob}")
    assert status == 403 and body["message"].startswith(f'"user": "{bob}": only a hub admin sees'), (status, body)

    scratch = Path(tempfile.gettempdir()) / f"gpugeek-jobs-{users[alice]}"
    assert scratch.is_dir()
    hub.stop_server(alice)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (ledger.open_pools(alice) or scratch.exists()):
        time.sleep(0.5)
    assert ledger.open_pools(alice) == []  # her server's stop stopped her pool and closed its row
    assert not scratch.exists()  # and her temporary folders went with it
    ledger.engine.dispose()
