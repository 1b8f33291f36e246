"""The ``local`` backend: each simulated node is one torchrun agent (with its ranks) on this
machine, all on loopback.

The controller hosts the rendezvous store itself (like an etcd outside the cluster), so that
any node, the first one included, can die without taking the rendezvous down. Spares are
agents beyond the job's node count: torchrun's c10d rendezvous parks them in its redundancy
list and lets them join the next round when a node is lost. Each agent runs in its own
session; every process carries ``TRAINCHAOS_RUN_ID`` in its environment, which is how a node
kill finds torchrun's workers (they run in sessions of their own) and how ``trainchaos
cleanup`` finds what a crashed controller left, without touching anything else. Each node
gets a node-local directory (its "local disk", a run-scoped resource) exported as
``TRAINCHAOS_NODE_LOCAL_DIR``, and a short temp dir of its own as ``TMPDIR``; both are
run-scoped resources.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field

from chaos import contract
from chaos.cluster import register_backend
from chaos.cluster.base import (
    FATAL_SIGNALS,
    AgentProcess,
    ClusterBackend,
    Launcher,
    LiveRank,
    NodeStatus,
)
from chaos.cluster.capabilities import LocalDisk, PowerControl, PowerCut, PowerReturn, StorageLayer
from chaos.cluster.cgroups import cgroup_path, move_to, own_cgroup
from chaos.cluster.mounts import acquire_storage_mounts, control_dir, tier_label
from chaos.cluster.rdzv_store import RendezvousStore
from chaos.errors import ToolError
from chaos.model.targets import TargetUnavailable
from chaos.model.types import StrictModel
from chaos.runfiles.resources import OWNER_FILE, scratch_base, tmp_dir_for
from chaos.runfiles.rundir import RunDir
from chaos.storage.control import MountControl
from chaos.util.procs import controller_tag, find_run_processes, kill_pids, process_state

__all__ = ["LocalCluster", "LocalOptions"]

LOOPBACK = "127.0.0.1"


@dataclass
class _Node:
    node: int
    proc: subprocess.Popen | AgentProcess
    log_path: str
    lost: bool = False
    returncode: int | None = None


class LocalOptions(StrictModel):
    """``backend: {local: {...}}``."""

    memory_mb: int | None = Field(None, ge=64, le=1 << 22)
    """Memory limit of each node (its agent, its ranks and their children), MiB, swap
    included: a run-scoped memory cgroup per node (cgroup v1). A rank that needs more is
    killed by the kernel's OOM killer, and the kill is reported as ``oom`` from the cgroup's
    OOM notification (``chaos.cluster.oomwatch``), as a kubelet reports OOMKilled. Null: none."""


@register_backend
class LocalCluster(ClusterBackend):
    """Starts, watches and stops the agents of one run on this machine."""

    name: ClassVar[str] = "local"
    summary: ClassVar[str] = ("every node is a torchrun agent on this machine, on loopback; no "
                              "privileges needed")
    capabilities: ClassVar[tuple[type, ...]] = (PowerControl, PowerReturn, LocalDisk, StorageLayer)
    options_model: ClassVar[type[StrictModel]] = LocalOptions
    forks_agents: ClassVar[bool] = True
    """The launcher may start a node's agent its own way (a warm node's agent forked by this
    controller's agent zygote): the agent is a plain process of this machine here (a backend
    that wraps it, a namespace's ``ip netns exec``, starts it as a new interpreter)."""

    @classmethod
    def preflight(cls, scenario) -> list[str]:  # noqa: ANN001 (Scenario)
        if scenario is not None and cls.options_model is LocalOptions and (scenario.backend.options or {}).get("memory_mb") \
                and own_cgroup("memory") is None:
            return ["local.memory_mb: no cgroup v1 memory hierarchy is mounted under /sys/fs/cgroup "
                    "(a node's memory limit is a memory cgroup of its own)"]
        return []

    def __init__(self, spec, resources) -> None:  # noqa: ANN001 (see ClusterBackend)
        super().__init__(spec, resources)
        self.nodes: dict[int, _Node] = {}
        self._memory_cgroups: dict[int, str] = {}
        self.rdzv_port = 0
        self._store: RendezvousStore | None = None

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        os.makedirs(RunDir(self.spec.run_dir).logs, exist_ok=True)
        for node in range(self.topology.total_nodes):
            self.acquire_node_dirs(node)
            self.acquire_memory_limit(node)
        # The storage fault layer over the checkpoint tiers, when the scenario has storage faults.
        acquire_storage_mounts(self, self.node_local_dir)
        self.serve_rendezvous(LOOPBACK)
        for node in range(self.topology.nodes):
            self.start_node(node)

    def acquire_node_dirs(self, node: int) -> None:
        """The node's local disk and its short temp dir (``TMPDIR``), as run-scoped resources:
        a TMPDIR that does not exist sends torchrun's and the job's temp files loose into
        the machine's /tmp."""
        self.resources.acquire("scratch_dir", {"path": self.node_local_dir(node)})
        self.resources.acquire("scratch_dir", {"path": tmp_dir_for(self.spec.run_id, node)})

    def acquire_memory_limit(self, node: int) -> None:
        """With ``memory_mb``: the node's memory cgroup and the watcher of its OOM
        notifications, both run-scoped (the watcher first goes, then the cgroup)."""
        limit_mb = self.spec.options.get("memory_mb")
        if not limit_mb:
            return
        path = cgroup_path("memory", f"{self.spec.run_id}-node-{node}")
        size = int(limit_mb) << 20
        settings = {"memory.limit_in_bytes": size}
        if os.path.exists(os.path.join(os.path.dirname(path), "memory.memsw.limit_in_bytes")):
            settings["memory.memsw.limit_in_bytes"] = size  # no way out through swap
        self.resources.acquire("cgroup", {"path": path, "settings": settings})
        self.resources.acquire("helper_process", {
            "name": f"oomwatch-node-{node}", "log": RunDir(self.spec.run_dir).node_log(node) + ".oomwatch",
            "argv": [sys.executable, "-m", "chaos.cluster.oomwatch", "--cgroup", path, "--node", str(node),
                     "--events", RunDir(self.spec.run_dir).events]})
        self._memory_cgroups[node] = path

    def serve_rendezvous(self, host: str) -> None:
        """Host the agents' c10d store on ``host`` only (TCPStore alone would bind every
        interface): a socket bound here, its port the endpoint, served in this process
        (chaos.cluster.rdzv_store: the controller never imports torch for it)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        sock.listen(512)
        self._store = RendezvousStore(sock)
        self.rdzv_port = self._store.port

    def close_rendezvous(self) -> None:
        """The agents are gone: stop serving their store."""
        if self._store is not None:
            self._store.close()
            self._store = None

    def note_event(self, event: dict) -> None:
        """Spares start once the job's first round has formed: the rendezvous takes whichever
        agents come first, so a spare started with the others could take a node's place and
        leave that node idle. Started after, they are the nodes ``nodes..nodes+spares-1``."""
        super().note_event(event)
        if len(self.nodes) < self.topology.total_nodes and len(self._live) >= self.topology.world_size:
            for node in range(self.topology.nodes, self.topology.total_nodes):
                self.start_node(node)

    def node_local_dir(self, node: int) -> str:
        return os.path.join(scratch_base(), self.spec.run_id, f"node-{node}")

    def agent_command(self, node: int) -> list[str]:
        """The node's torchrun agent, as the workload's launcher writes it (RunSpec carries
        what the workload runs per rank); the backend says only where things are."""
        return self.launcher().agent_command(self.topology, run_id=self.spec.run_id,
                                             rdzv_endpoint=self.rdzv_endpoint(),
                                             local_addr=self.node_address(node), python=self.python(),
                                             node=node)

    def launcher(self) -> Launcher:
        """The workload's launcher: it writes each node's command line and its own env."""
        if self.spec.launcher is None:
            raise ToolError(f"run {self.spec.run_id}: its RunSpec carries no launcher (the "
                            "workload's Launch.launcher says what each node runs)")
        return self.spec.launcher

    def rdzv_endpoint(self) -> str:
        """Where the agents reach the rendezvous store the controller hosts."""
        return f"{LOOPBACK}:{self.rdzv_port}"

    def python(self) -> str:
        """The interpreter that runs the agent (and, through torchrun, the ranks)."""
        return sys.executable

    def node_env(self, node: int) -> dict[str, str]:
        env = dict(os.environ)
        local_dir = self.node_local_dir(node)
        tmp = tmp_dir_for(self.spec.run_id, node)
        env.update({
            contract.RUN_ID_ENV: self.spec.run_id,
            contract.CONTROLLER_ENV: controller_tag(),
            contract.EVENTS_DIR_ENV: RunDir(self.spec.run_dir).events,
            contract.NODE_ENV: str(node),
            contract.NODE_ADDR_ENV: self.node_address(node),
            # A rank that reaches no peer asks whether it still reaches the store (harness.health).
            contract.RDZV_ENDPOINT_ENV: self.rdzv_endpoint(),
            contract.NODE_LOCAL_DIR_ENV: local_dir,
            # Where a checkpoint replica must go to survive this node's outage (harness.ckpt_tiers).
            contract.FAILURE_DOMAIN_ENV: self.failure_domain(node),
            # A fresh store per rendezvous round: see harness/dist.py.
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
            # torchrun's and the job's temp files go to the node's own temp dir (a run-scoped
            # resource, removed with the run), never loose in /tmp.
            "TMPDIR": tmp,
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
            "LOGLEVEL": "INFO",
        })
        if self.spec.probe_faults_file:
            env[contract.PROBE_FAULTS_ENV] = self.spec.probe_faults_file
        env.update(self.launcher().node_env(node, self.topology, self.rdzv_endpoint()))
        env.update(self.spec.extra_env)
        return env

    def start_node(self, node: int) -> None:
        log_path = RunDir(self.spec.run_dir).node_log(node)
        log = open(log_path, "ab")  # noqa: SIM115 (owned by the child from here on)
        command, env = self.agent_command(node), self.node_env(node)
        proc: subprocess.Popen | AgentProcess | None = None
        if self.forks_agents:
            # The launcher's own way, where it has one (a warm node's agent is forked from
            # imports done once).
            proc = self.launcher().start_agent(command, env, cwd=self.spec.run_dir, log=log,
                                               cgroup=self._memory_cgroups.get(node))
        if proc is None:
            proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.spec.run_dir)
        log.close()
        if node in self._memory_cgroups:
            # Moved before torchrun starts a worker (it first parses, imports and meets the
            # rendezvous): every rank, and every restart of one, is the agent's child and
            # inherits the cgroup. A forked agent joined it itself, first thing: it forks the
            # node's zygote (the ranks' parent) within milliseconds, before this move.
            move_to(self._memory_cgroups[node], [proc.pid])
        self.nodes[node] = _Node(node=node, proc=proc, log_path=log_path)

    def poll(self) -> dict[int, NodeStatus]:
        for node in self.nodes.values():
            if node.returncode is None:
                node.returncode = node.proc.poll()
        return {n: NodeStatus(node.returncode, node.lost) for n, node in self.nodes.items()}

    def stop(self, grace_s: float = 3.0) -> list[int]:
        for node in self.nodes.values():
            if node.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.proc.pid, signal.SIGCONT)
                    os.killpg(node.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(n.proc.poll() is None for n in self.nodes.values()):
            time.sleep(0.05)
        # Whatever is left, agents, workers whose agent died, stopped ranks: by run id.
        killed = kill_pids([p.pid for p in find_run_processes(self.spec.run_id)])
        for node in self.nodes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(timeout=5)
        self.poll()
        self.close_rendezvous()
        return killed

    # -- nodes ----------------------------------------------------------------------------
    def node_address(self, node: int) -> str:
        return LOOPBACK

    def node_logs(self) -> dict[int, str]:
        return {n: node.log_path for n, node in self.nodes.items()}

    # -- processes ------------------------------------------------------------------------
    def process_alive(self, pid: int) -> bool:
        return process_state(pid) not in (None, "Z")

    def find_rank(self, rank: int) -> LiveRank | None:
        """A worker that never announced itself (a user command without the probe), by the
        RANK in its environment. Its children (DataLoader workers) inherit that environment:
        the rank is the process whose parent is not of the same rank (torchrun's agent)."""
        found = [p for p in find_run_processes(self.spec.run_id) if p.rank == rank]
        pids = {p.pid for p in found}
        ranks = [p for p in found if p.ppid not in pids]
        if len(ranks) > 1:
            # Two processes both look like the rank (a restart overlapping the old group):
            # hitting the wrong one would be measured as the right one. Say so instead.
            raise TargetUnavailable(
                f"cannot tell which process is rank {rank}: pids {sorted(p.pid for p in ranks)} "
                f"all carry RANK={rank} with no rank_start from the probe to tell them apart")
        if not ranks:
            return None
        return LiveRank(rank, ranks[0].node if ranks[0].node is not None else -1, ranks[0].pid)

    def signal_pid(self, pid: int, sig: int) -> bool:
        try:
            os.kill(pid, sig)
            return True
        except ProcessLookupError:
            return False

    def signal_node(self, node: int, sig: int) -> list[int]:
        """torchrun starts its workers in sessions of their own, so a process-group kill of
        the agent would leave them running: the node is found by its environment instead."""
        hit = [pid for pid in self._node_pids(node) if self.signal_pid(pid, sig)]
        if sig in FATAL_SIGNALS:
            self.nodes[node].lost = True
        return hit

    def _node_pids(self, node: int, found: list | None = None) -> list[int]:
        """The node's agent first, then every other process of the run on that node."""
        agent = self.nodes[node].proc.pid
        members = [p.pid for p in (found if found is not None else find_run_processes(self.spec.run_id))
                   if p.node == node and p.pid != agent]
        return [agent, *members]

    # -- power ----------------------------------------------------------------------------
    def power_off(self, nodes: tuple[int, ...]) -> PowerCut:
        """One scan of /proc for the whole domain, then one sweep of SIGKILLs: the nodes die
        within a millisecond of each other, as they do when their power goes."""
        found = find_run_processes(self.spec.run_id)
        victims = [pid for node in nodes if node in self.nodes for pid in self._node_pids(node, found)]
        for node in nodes:
            if node in self.nodes:
                self.nodes[node].lost = True
        t_first = time.perf_counter()
        hit = [pid for pid in victims if self.signal_pid(pid, signal.SIGKILL)]
        return PowerCut(hit, time.perf_counter() - t_first)

    def power_on(self, node: int) -> None:
        """A fresh agent on the node: it joins the rendezvous like any new node (a spare when
        the job is at full size, a grow back when it had shrunk)."""
        old = self.nodes.get(node)
        if old is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                old.proc.wait(timeout=5)  # reap the dead agent before its place is taken
        self.start_node(node)

    def storage_control_dir(self, label: str) -> str:
        return control_dir(self.spec.run_dir, label)

    def drop_unfsynced(self, node: int) -> int | None:
        """Through the storage fault layer mounted over the node's fast checkpoint tier (the
        runner mounts it for a power fault with ``local_data: unfsynced``), after its
        processes are dead: nothing writes any more."""
        control = MountControl(control_dir(self.spec.run_dir, tier_label("local", node)))
        if not control.state().get("ready"):
            return None
        return int(control.drop_unfsynced().get("dropped_files", 0))

    def wipe_local_data(self, node: int) -> int:
        root = self.node_local_dir(node)
        removed = 0
        for entry in os.scandir(root) if os.path.isdir(root) else []:
            if entry.name == OWNER_FILE:
                continue  # the resource's own marker: cleanup still needs it
            removed += _tree_bytes(entry.path)
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
        return removed


def _tree_bytes(path: str) -> int:
    if not os.path.isdir(path) or os.path.islink(path):
        return os.lstat(path).st_size if os.path.lexists(path) else 0
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total
