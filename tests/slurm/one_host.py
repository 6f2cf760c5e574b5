"""A one-host Slurm for the tests: munged, slurmctld and slurmd under one temporary directory.

Everything the daemons write (key, sockets, state, spool, logs, pid files) lives under the
directory, the ports are free ones, and each daemon is started in the foreground as our own child
and stopped by its pid, so two test runs on one machine, or a Slurm the machine already runs, do
not meet. The configuration follows what worked on this machine kind (Debian's slurm-wlm 22.05):
``proctrack/linuxproc`` and ``task/none`` (no cgroups needed), ``select/cons_tres`` by core, a
partition that oversubscribes each core 4 times, and two fake GPUs (``gpu:test``, backed by
``/dev/null`` and ``/dev/zero``) so that ``--gres`` requests are scheduled and ``CUDA_VISIBLE_DEVICES``
is set as on a GPU node.

>>> cluster = OneHostSlurm.start(Path("/tmp/slurm-x"))      # doctest: +SKIP
>>> cluster.environ["SLURM_CONF"]                           # doctest: +SKIP
'/tmp/slurm-x/slurm.conf'
>>> cluster.stop()                                          # doctest: +SKIP
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

PARTITION = "debug"
SECOND_PARTITION = "long"
FAKE_GPU_TYPE = "test"
FAKE_GPU_FILES = ("/dev/null", "/dev/zero")
DAEMONS = ("munged", "slurmctld", "slurmd")


class SlurmUnavailable(Exception):
    """Why a one-host Slurm cannot run here (the tests are skipped with this reason)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def missing_programs() -> list[str]:
    return [p for p in (*DAEMONS, "sbatch", "squeue", "sinfo", "scancel") if shutil.which(p) is None]


def daemon_conf(
    directory: Path, controller: str, controller_port: int, node_port: int, cluster: str = "gpugeek-test"
) -> str:
    """What every test cluster's ``slurm.conf`` says of its daemons, before its nodes and partitions:
    everything in ``directory`` (each node's spool, pid and log files named by ``%n``)."""
    return f"""\
ClusterName={cluster}
SlurmctldHost={controller}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={directory}/munge.socket
SlurmctldPort={controller_port}
SlurmdPort={node_port}
StateSaveLocation={directory}/state
SlurmdSpoolDir={directory}/spool-%n
SlurmctldPidFile={directory}/slurmctld.pid
SlurmdPidFile={directory}/slurmd-%n.pid
SlurmctldLogFile={directory}/slurmctld.log
SlurmdLogFile={directory}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MinJobAge=300
EnforcePartLimits=ALL
KillWait=5
InactiveLimit=0
"""


def slurm_conf(directory: Path, node: str, cpus: int, controller_port: int, node_port: int) -> str:
    """The ``slurm.conf`` of a one-host cluster whose files all live in ``directory``."""
    return (
        daemon_conf(directory, f"{node}(127.0.0.1)", controller_port, node_port)
        + f"""\
GresTypes=gpu
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=8000 Gres=gpu:{FAKE_GPU_TYPE}:{len(FAKE_GPU_FILES)} State=UNKNOWN
PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
PartitionName={SECOND_PARTITION} Nodes={node} Default=NO MaxTime=60 State=UP OverSubscribe=FORCE:4
"""
    )


def gres_conf(node: str) -> str:
    lines = [f"NodeName={node} Name=gpu Type={FAKE_GPU_TYPE} File={path}" for path in FAKE_GPU_FILES]
    return "AutoDetect=off\n" + "\n".join(lines) + "\n"


@dataclass
class OneHostSlurm:
    directory: Path
    node: str
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    programs: dict[str, str] = field(default_factory=dict)  # command -> its path

    @property
    def conf(self) -> Path:
        return self.directory / "slurm.conf"

    @property
    def environ(self) -> dict[str, str]:
        """What Slurm's client commands (sbatch, squeue, scancel) need to find this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    @classmethod
    def start(cls, directory: Path, ready_within: float = 30.0) -> OneHostSlurm:
        """Start munged, slurmctld and slurmd; SlurmUnavailable (with the daemons' last log lines) if
        the node is not idle within ``ready_within`` seconds. Whatever started is stopped again."""
        missing = missing_programs()
        if missing:
            raise SlurmUnavailable(f"{', '.join(missing)} not on PATH (apt-get install -y slurm-wlm munge)")
        node = socket.gethostname().split(".")[0]
        programs = {p: shutil.which(p) or p for p in ("sbatch", "squeue", "sinfo", "scancel")}
        cluster = cls(directory, node, programs=programs)
        try:
            cluster._start(ready_within)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _start(self, ready_within: float) -> None:
        d = self.directory
        (d / "state").mkdir(parents=True, exist_ok=True)
        self.conf.write_text(slurm_conf(d, self.node, os.cpu_count() or 2, free_port(), free_port()))
        (d / "gres.conf").write_text(gres_conf(self.node))
        self._start_munge()
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", self.node])
        self._wait_for(self.node_idle, ready_within, f"node {self.node} idle in sinfo")

    def _start_munge(self) -> None:
        """munged with a fresh key and a socket of this cluster's (slurm.conf's AuthInfo names it)."""
        d = self.directory
        (d / "munge").mkdir(parents=True, exist_ok=True)
        os.chmod(d / "munge", 0o700)
        key = d / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--key-file={key}",
                f"--socket={d}/munge.socket",
                f"--pid-file={d}/munge/munged.pid",
                f"--seed-file={d}/munge/munged.seed",
                f"--log-file={d}/munge/munged.log",
            ],
        )
        self._wait_for(lambda: (d / "munge.socket").exists(), 10, "munged's socket")

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.directory / f"{name}.out", "wb")
        env = {**os.environ, **self.environ}
        self.processes[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()

    def _wait_for(self, condition, seconds: float, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise SlurmUnavailable(f"{name} exited with {process.returncode}: {self.log_tail(name)}")
            if condition():
                return
            time.sleep(0.2)
        raise SlurmUnavailable(
            f"no {what} within {seconds:.0f} s: {self.log_tail('slurmctld')} {self.log_tail('slurmd')}"
        )

    def log_tail(self, name: str, lines: int = 3) -> str:
        logs = [
            self.directory / f"{name}.log",
            self.directory / f"{name}-{self.node}.log",
            self.directory / f"{name}.out",
        ]
        for path in logs:
            if path.exists() and path.stat().st_size:
                return f"{name}: " + " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
        return f"{name}: (no log)"

    def run(self, *argv: str, timeout: float = 15) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster (found where it was at the start, whatever PATH is now)."""
        program = self.programs.setdefault(argv[0], shutil.which(argv[0]) or argv[0])
        return subprocess.run(
            [program, *argv[1:]], capture_output=True, text=True, timeout=timeout, env={**os.environ, **self.environ}
        )

    def node_idle(self) -> bool:
        answer = self.run("sinfo", "-h", "-N", "-o", "%t", "-p", PARTITION)
        return answer.returncode == 0 and answer.stdout.strip().startswith("idle")

    def job_ids(self) -> list[str]:
        """Every job Slurm still has pending or running (any user)."""
        answer = self.run("squeue", "-h", "-o", "%i")
        return answer.stdout.split()

    def wait_for_no_jobs(self, seconds: float) -> list[str]:
        """Wait up to ``seconds`` until ``squeue`` lists no job; returns those still listed then."""
        deadline = time.monotonic() + seconds
        left = self.job_ids()
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = self.job_ids()
        return left

    def fail_if_jobs_left(self, seconds: float = 30) -> None:
        """After a test: every job gone within ``seconds``, else cancel them and fail the test."""
        import pytest

        left = self.wait_for_no_jobs(seconds)
        if left:
            self.run("scancel", *left)
            pytest.fail(f"the test left Slurm jobs {left} behind (cancelled now)")

    def stop(self, grace: float = 10.0) -> None:
        """Stop the daemons by their pids, slurmd first (it ends its jobs' processes), munged last."""
        for name in reversed(DAEMONS):
            process = self.processes.get(name)
            if process is None or process.poll() is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
