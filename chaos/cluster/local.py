"""Local backend: each simulated node is one torchrun agent (with its ranks) on this machine.

The controller hosts the rendezvous store itself (like an etcd outside the cluster), so that
any node, the first one included, can die without taking the rendezvous down. Each agent
runs in its own session: a node kill is one ``killpg``, and nothing of the node survives it.
Every process carries ``TRAINCHAOS_RUN_ID`` in its environment, which is how
``trainchaos cleanup`` finds what a crashed controller left, without touching anything else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta

from chaos import probe
from chaos.model import Topology
from chaos.procs import find_run_processes, kill_pids, process_state

__all__ = ["LocalCluster", "NodeProcess", "free_port"]

RUN_ID_ENV = "TRAINCHAOS_RUN_ID"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class NodeProcess:
    node: int
    proc: subprocess.Popen
    log_path: str
    alive: bool = True
    killed: bool = False
    returncode: int | None = None


@dataclass
class LocalCluster:
    """Starts, watches and stops the agents of one run."""

    run_id: str
    run_dir: str
    topology: Topology
    worker_argv: list[str]
    """What each agent runs per rank (after torchrun's own options), e.g. ``-m harness ...``."""
    probe_faults_file: str | None = None
    tee_worker_output: bool = False
    """Prefix each worker line with ``[default<local_rank>]:`` in the node log (for
    progress read from a user command's log lines)."""
    extra_env: dict[str, str] = field(default_factory=dict)
    nodes: dict[int, NodeProcess] = field(default_factory=dict)
    rank_pids: dict[int, int] = field(default_factory=dict)
    _store: object | None = None
    rdzv_port: int = 0

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        from torch.distributed import TCPStore

        self.rdzv_port = free_port()
        # multi_tenant: the agents' rendezvous and nothing else shares this server.
        self._store = TCPStore("127.0.0.1", self.rdzv_port, is_master=True, wait_for_workers=False,
                               multi_tenant=True, timeout=timedelta(seconds=30))
        os.makedirs(os.path.join(self.run_dir, "logs"), exist_ok=True)
        for node in range(self.topology.nodes):
            self.start_node(node)

    def agent_command(self, node: int) -> list[str]:
        topo = self.topology
        nnodes = f"{topo.min_nodes}:{topo.nodes}" if topo.min_nodes and topo.min_nodes < topo.nodes else str(topo.nodes)
        return [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes", nnodes,
            "--nproc-per-node", str(topo.ranks_per_node),
            "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{self.rdzv_port}",
            "--rdzv-id", self.run_id,
            # is_host=false: the controller hosts the store. last_call_timeout: how long a
            # shrunken group waits for stragglers before going on with fewer nodes.
            "--rdzv-conf", "is_host=false,join_timeout=60,last_call_timeout=2,read_timeout=30,"
            # A dead node leaves the rendezvous when its keep-alives stop: 3 x 1 s here
            # instead of torch's 3 x 5 s, so a shrunken group re-forms within seconds.
            "keep_alive_interval=1,keep_alive_max_attempt=3",
            "--max-restarts", str(topo.max_restarts),
            "--monitor-interval", "0.1",
            "--local-addr", "127.0.0.1",
            *(["--tee", "3"] if self.tee_worker_output else []),
            *self.worker_argv,
        ]

    def node_env(self, node: int) -> dict[str, str]:
        env = dict(os.environ)
        tmp = os.path.join(self.run_dir, "tmp", f"node-{node}")
        os.makedirs(tmp, exist_ok=True)
        env.update({
            RUN_ID_ENV: self.run_id,
            probe.ENV_EVENTS_DIR: os.path.join(self.run_dir, "events"),
            probe.ENV_NODE: str(node),
            "TRAINCHAOS_NODE_ADDR": "127.0.0.1",
            # A fresh store per rendezvous round: see harness/dist.py.
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
            # torchrun's own scratch files live in the run dir, never in /tmp.
            "TMPDIR": tmp,
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
            "LOGLEVEL": "INFO",
        })
        if self.probe_faults_file:
            env[probe.ENV_FAULTS_FILE] = self.probe_faults_file
        env.update(self.extra_env)
        return env

    def start_node(self, node: int) -> None:
        log_path = os.path.join(self.run_dir, "logs", f"node-{node}.log")
        log = open(log_path, "ab")  # noqa: SIM115 (owned by the child from here on)
        proc = subprocess.Popen(
            self.agent_command(node), env=self.node_env(node), stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.run_dir,
        )
        log.close()
        self.nodes[node] = NodeProcess(node=node, proc=proc, log_path=log_path)

    def poll(self) -> dict[int, int | None]:
        """Return code per node (None while running)."""
        for node in self.nodes.values():
            if node.alive:
                rc = node.proc.poll()
                if rc is not None:
                    node.alive = False
                    node.returncode = rc
        return {n: node.returncode for n, node in self.nodes.items()}

    def all_exited(self) -> bool:
        return all(rc is not None for rc in self.poll().values())

    # -- fault hooks ----------------------------------------------------------------------
    def note_rank_start(self, rank: int, pid: int) -> None:
        self.rank_pids[rank] = pid

    def rank_pid(self, rank: int) -> int | None:
        """The live worker of ``rank``: from its rank_start event, else (a user command
        without the probe) found by the RANK in its environment."""
        pid = self.rank_pids.get(rank)
        if pid is not None and process_state(pid) not in (None, "Z"):
            return pid
        found = [p.pid for p in find_run_processes(self.run_id) if p.rank == rank]
        return max(found) if found else None

    def kill_node(self, node: int, sig: int) -> list[int]:
        """Signal the node's agent and every rank it started, all at once.

        torchrun starts its workers in sessions of their own, so a process-group kill of
        the agent would leave them running; the node is found by its environment instead.
        """
        proc = self.nodes[node]
        members = [p.pid for p in find_run_processes(self.run_id) if p.node == node]
        agent_first = [proc.proc.pid] + [p for p in members if p != proc.proc.pid]
        hit = []
        for pid in agent_first:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
                hit.append(pid)
        proc.killed = True
        return hit

    # -- teardown -----------------------------------------------------------------------
    def stop(self, grace_s: float = 3.0) -> list[int]:
        """Stop every process of the run; returns the pids that needed SIGKILL."""
        for node in self.nodes.values():
            if node.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.proc.pid, signal.SIGCONT)
                    os.killpg(node.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(n.proc.poll() is None for n in self.nodes.values()):
            time.sleep(0.05)
        # Whatever is left, agents, workers whose agent died, stopped ranks: by run id.
        leftovers = find_run_processes(self.run_id)
        killed = kill_pids([p.pid for p in leftovers])
        for node in self.nodes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(timeout=5)
        self.poll()
        self._store = None
        return killed
