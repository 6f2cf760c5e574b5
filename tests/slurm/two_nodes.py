"""A two-node Slurm on one machine: the second node is a network namespace with a host name of its own.

The first node is this host, reached by the controller and the second node through one end of a
veth pair; the second node's slurmd runs in a network namespace (its own address at the other end,
its own ``localhost``) and a UTS namespace (its own host name), so its workers have another address
than the first node's, as on two machines: ranks on two hosts, ``MASTER_ADDR`` on rank 0's node,
gloo across a network, the scheduler on the notebook's host reached from a node that is not it.
Both share the filesystem, as compute nodes share a home directory. Everything is created with
names of its own and removed again; the daemons are stopped by their pids.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from slurm.one_host import OneHostSlurm, SlurmUnavailable, daemon_conf, free_port

MULTI_PARTITION = "multi"
SECOND_NODE = "gpugeek-node2"


@dataclass
class TwoNodeSlurm(OneHostSlurm):
    namespace: str = ""
    host_end: str = ""
    host_address: str = ""
    node_address: str = ""

    @classmethod
    def start_two(cls, directory: Path, ready_within: float = 30.0) -> TwoNodeSlurm:
        if shutil.which("ip") is None or shutil.which("unshare") is None:
            raise SlurmUnavailable("needs ip (iproute2) and unshare (util-linux) for the second node's namespaces")
        cluster = cls(directory, node="", programs={})
        token = secrets.token_hex(3)
        cluster.namespace, cluster.host_end = f"gg-{token}", f"gg{token}h"
        octet = 16 + int(token, 16) % 200
        cluster.host_address, cluster.node_address = f"10.231.{octet}.1", f"10.231.{octet}.2"
        try:
            cluster._network()
            cluster._start_two(ready_within)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _network(self) -> None:
        """The veth pair and the second node's network namespace, with a route to this host's addresses."""
        node_end = f"{self.host_end[:-1]}n"
        for argv in (
            ["ip", "netns", "add", self.namespace],
            ["ip", "link", "add", self.host_end, "type", "veth", "peer", "name", node_end],
            ["ip", "link", "set", node_end, "netns", self.namespace],
            ["ip", "addr", "add", f"{self.host_address}/24", "dev", self.host_end],
            ["ip", "link", "set", self.host_end, "up"],
            ["ip", "netns", "exec", self.namespace, "ip", "addr", "add", f"{self.node_address}/24", "dev", node_end],
            ["ip", "netns", "exec", self.namespace, "ip", "link", "set", node_end, "up"],
            ["ip", "netns", "exec", self.namespace, "ip", "link", "set", "lo", "up"],
            ["ip", "netns", "exec", self.namespace, "ip", "route", "add", "default", "via", self.host_address],
        ):
            done = subprocess.run(argv, capture_output=True, text=True)
            if done.returncode != 0:
                raise SlurmUnavailable(
                    f"cannot make the second node's network ({' '.join(argv)}: {done.stderr.strip()})"
                )

    def _start_two(self, ready_within: float) -> None:
        from slurm.one_host import missing_programs

        missing = missing_programs()
        if missing:
            raise SlurmUnavailable(f"{', '.join(missing)} not on PATH (apt-get install -y slurm-wlm munge)")
        import socket

        self.node = socket.gethostname().split(".")[0]
        self.programs = {p: shutil.which(p) or p for p in ("sbatch", "squeue", "sinfo", "scancel")}
        d = self.directory
        (d / "state").mkdir(parents=True, exist_ok=True)
        self.conf.write_text(self._conf(free_port(), free_port()))
        (d / "gres.conf").write_text("AutoDetect=off\n")
        self._start_munge()
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", self.node])
        # the second node: its own network, its own host name; exec all the way, so the pid is slurmd's
        script = f"hostname {SECOND_NODE} && exec slurmd -D -f {self.conf} -N {SECOND_NODE}"
        # (nsenter, not "ip netns exec", which mounts a sysfs of its own: slurmd wants /sys/fs/cgroup)
        joined = ["nsenter", f"--net=/run/netns/{self.namespace}", "unshare", "--uts", "sh", "-c", script]
        self._spawn("slurmd-second", joined)
        self._wait_for(self.nodes_idle, ready_within, f"nodes {self.node} and {SECOND_NODE} idle in sinfo")

    def _conf(self, controller_port: int, node_port: int) -> str:
        controller = f"{self.node}({self.host_address})"
        return (
            daemon_conf(self.directory, controller, controller_port, node_port, cluster="gpugeek-two")
            + f"""\
NodeName={self.node} NodeAddr={self.host_address} CPUs=1 RealMemory=4000 State=UNKNOWN
NodeName={SECOND_NODE} NodeAddr={self.node_address} CPUs=1 RealMemory=4000 State=UNKNOWN
PartitionName={MULTI_PARTITION} Nodes={self.node},{SECOND_NODE} Default=YES MaxTime=INFINITE State=UP
"""
        )

    def nodes_idle(self) -> bool:
        answer = self.run("sinfo", "-h", "-N", "-o", "%N %t", "-p", MULTI_PARTITION)
        states = dict(line.split() for line in answer.stdout.splitlines() if line.strip())
        return answer.returncode == 0 and all(states.get(n, "").startswith("idle") for n in (self.node, SECOND_NODE))

    def stop(self, grace: float = 10.0) -> None:
        second = self.processes.pop("slurmd-second", None)
        if second is not None and second.poll() is None:
            second.terminate()
            try:
                second.wait(grace)
            except subprocess.TimeoutExpired:
                second.kill()
                second.wait(5)
        super().stop(grace)
        if self.namespace:
            subprocess.run(["ip", "netns", "del", self.namespace], capture_output=True)
        if self.host_end:
            subprocess.run(["ip", "link", "del", self.host_end], capture_output=True)
