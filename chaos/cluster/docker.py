"""The ``docker`` backend: every node is a container (one torchrun agent and its ranks) on
one or more Docker engines, driven through the Docker SDK for Python.

Per run, all of it run-scoped resources labelled ``trainchaos.run=<run id>`` (journaled
before they exist, removed newest first, found by ``trainchaos cleanup`` by their label):

    image      <run>-img           only without ``image:``: ``docker import`` of an empty
                                   tarball; the controller's Python, virtualenv and project
                                   are bind-mounted read-only (nothing is pulled)
    network    <run>-net           a bridge of its own per host (``tc-<short>-db``), subnet
                                   in 198.18.0.0/15, no masquerading; the controller's
                                   rendezvous store listens on its gateway address only.
                                   Routed hosts (``subnets``): each host's bridge has the
                                   host's own subnet, and the store listens on the
                                   controller's address every host routes to
                                   (``store_address``)
    container  <run>-n<i>          node i, ``trainchaos.node=<i>``, address .10+i, host name
                                   node<i> (its /etc/hosts names the store and the other
                                   nodes); the run directory, the node's local disk and its
                                   TMPDIR are bind-mounted at the controller's paths

Events reach the controller through the bind-mounted run directory (the probe appends to
``<run>/events`` as on ``local``); each node's output is streamed from the engine into
``<run>/logs/node-<i>.log``. A rank's process is named by a *handle*,
``node * 2**22 + pid inside its container`` (pid namespaces overlap, so the bare pid is
ambiguous); a rank is signalled inside its container (``docker exec``), a node with
``docker kill`` (the container's init and every process in it): that part is
``chaos.cluster.docker_procs``. The options and their preflight are
``chaos.cluster.docker_options``.

Remote hosts (``ssh://``, ``tcp://``) need a real image (``image:``) and the run directory
at the same path on that host (a shared filesystem, ``shared_run_dir: true``): the probe's
events are files. Each host's clock offset to the controller is estimated at start (the
container's clock read by a ``docker exec``, against the reply's arrival; the round trip
bounds the error) and written to
``<run>/docker/clocks.json``; events from a host are not rewritten (a shared directory is
the host's own file), so offsets larger than the detection targets must be fixed with NTP.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, ClassVar

from chaos import contract
from chaos.cluster import register_backend
from chaos.cluster.base import ClusterBackend, NodeStatus
from chaos.cluster.capabilities import (
    Attachable,
    ContainerHost,
    LocalDisk,
    NodeHandle,
    PacketFilter,
    PowerControl,
    PowerReturn,
)
from chaos.cluster.docker_engine import (
    DOCKER_HOSTS_ENV,
    LABEL_NODE,
    LABEL_RUN,
    client,
    container_of,
    default_host,
    is_local_host,
    owned,
)
from chaos.cluster.docker_options import DockerOptions, placed_host, preflight_problems
from chaos.cluster.docker_procs import PID_STRIDE, ContainerProcesses, handle
from chaos.cluster.local import LocalCluster
from chaos.errors import ToolError
from chaos.model.types import StrictModel
from chaos.runfiles.resources import scratch_base, tmp_dir_for
from chaos.runfiles.rundir import RunDir

if TYPE_CHECKING:
    import ipaddress

    from chaos.model.scenario import Scenario

__all__ = ["DockerCluster", "STORE_HOST"]

NODE_HOST_OFFSET = 10
STORE_HOST = "trainchaos-store"
"""The name of the controller's rendezvous store (the bridge's gateway) inside the nodes."""
_POLL_EVERY_S = 0.2


@register_backend
class DockerCluster(ContainerProcesses, LocalCluster):
    """The run's nodes as containers. Shares ``local``'s agent command, node environment,
    node-local directories and rendezvous store; the nodes are started, watched, signalled
    and stopped through the engine."""

    name: ClassVar[str] = "docker"
    summary: ClassVar[str] = ("every node is a container on a docker engine (local or remote "
                              "hosts), on a bridge network of the run; container faults: "
                              "docker kill, pause (freezer), disconnect, live limits")
    options_model: ClassVar[type[StrictModel]] = DockerOptions
    capabilities: ClassVar[tuple[type, ...]] = (ContainerHost, PacketFilter, PowerControl, PowerReturn, LocalDisk,
                                                Attachable)

    def __init__(self, spec, resources) -> None:  # noqa: ANN001 (see ClusterBackend)
        super().__init__(spec, resources)
        self.options = DockerOptions.model_validate(spec.options or {})
        self.hosts = list(self.options.hosts) or [default_host()]
        self.subnet: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
        """The run's one subnet, the same on every host (without ``subnets``)."""
        self.subnets = {host: _network(text) for host, text in self.options.subnets.items()}
        """Routed hosts: each host's own container subnet."""
        self.gateway = self.options.store_address or ""
        """Where the nodes reach the controller's rendezvous store (``trainchaos-store``)."""
        self._containers: dict[int, str] = {}
        self._status: dict[int, NodeStatus] = {}
        self._lost: set[int] = set()
        self._last_poll = 0.0
        self._log_threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._attached = False

    # -- before anything starts -------------------------------------------------------------
    @classmethod
    def preflight(cls, scenario: Scenario) -> list[str]:
        return preflight_problems(scenario)

    # -- names ------------------------------------------------------------------------------
    def host_of(self, node: int) -> str:
        return placed_host(self.hosts, node)

    def container_name(self, node: int) -> str:
        return f"{self.spec.run_id}-n{node}"

    def network_name(self) -> str:
        return f"{self.spec.run_id}-net"

    def image_name(self) -> str:
        return self.options.image or f"{self.spec.run_id}-img"

    def container(self, node: int) -> Any:
        """The node's container, checked to carry the run's label (the blast-radius guard)."""
        return container_of(self.host_of(node), self.container_name(node), self.spec.run_id)

    # -- the engine from a journal record alone (container faults' revert) ------------------
    @classmethod
    def find_container(cls, host: str, name: str, run_id: str) -> Any:
        return container_of(host, name, run_id)

    @classmethod
    def run_network(cls, host: str, name: str, run_id: str) -> Any:
        return owned(client(host).networks.get(name), run_id, "network")

    @classmethod
    def engine_memory(cls, host: str) -> int:
        return int(client(host).info()["MemTotal"])

    @classmethod
    def shares_this_machine(cls, host: str) -> bool:
        return is_local_host(host)

    # -- a live run another controller started (``trainchaos gameday``) --------------------
    @classmethod
    def attach(cls, spec: Any) -> DockerCluster:
        """The backend of a live run started by another controller, bound to the node
        containers its hosts list under the run's label (``rescan``): faults act on them as
        within the run; nothing of the run's is created, started (no spares) or removed here."""
        cluster = cls(spec, None)
        cluster._attached = True
        cluster.rescan()
        return cluster

    def rescan(self) -> dict[int, str]:
        """The run's node containers as the engines list them now (the run's label and
        name): node -> state (``running``, ``paused``, ``exited``...). An attached backend
        binds to them."""
        states: dict[int, str] = {}
        for host in self.hosts:
            for cont in client(host).containers.list(all=True, filters={"label": f"{LABEL_RUN}={self.spec.run_id}"}):
                node = int(cont.labels.get(LABEL_NODE, -1))
                if node >= 0 and cont.name == self.container_name(node):
                    states[node] = cont.status
        if self._attached:
            self._containers.update({n: self.container_name(n) for n in states})
            for node in states:
                self._status.setdefault(node, NodeStatus(None))
            if self.subnet is None and not self.subnets and states:
                import ipaddress

                with contextlib.suppress(Exception):
                    net = client(self.host_of(min(states))).networks.get(self.network_name())
                    self.subnet = ipaddress.ip_network(net.attrs["IPAM"]["Config"][0]["Subnet"])
        return states

    def node_handle(self, node: int) -> NodeHandle:
        name = self.container_name(node)
        return NodeHandle("container", name, f"it has no container (no {name} on {', '.join(self.hosts)})")

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        from chaos.net import fabric

        run_id = self.spec.run_id
        os.makedirs(RunDir(self.spec.run_dir).logs, exist_ok=True)
        os.makedirs(os.path.join(self.spec.run_dir, "docker"), exist_ok=True)
        if not self.subnets:
            self.subnet = fabric.pick_subnet(run_id)
            self.gateway = self.gateway or str(next(self.subnet.hosts()))
        for host in dict.fromkeys(self.hosts):
            if self.options.image is None:
                self.resources.acquire("docker_image", {"host": host, "name": self.image_name(),
                                                        "run_id": run_id})
            subnet = self._subnet_of(host)
            self.resources.acquire("docker_network", {
                "host": host, "name": self.network_name(), "run_id": run_id,
                "subnet": str(subnet), "gateway": str(next(subnet.hosts())),
                "bridge": f"{fabric.NAME_PREFIX}{fabric.short_id(run_id)}-db"})
        for node in range(self.topology.total_nodes):
            self.acquire_node_dirs(node)
        # The store listens on the bridge's gateway only: reachable from the run's containers
        # (and this host), from nowhere beyond the run's network. Routed hosts: on the
        # controller's address their routes lead to (store_address).
        self.serve_rendezvous(self.gateway)
        for node in range(self.topology.nodes):
            self.start_node(node)
        self._write_clocks()

    def rdzv_endpoint(self) -> str:
        return f"{self.gateway}:{self.rdzv_port}"

    def python(self) -> str:
        return self.options.python or (sys.executable if self.options.image is None else "python")

    def node_env(self, node: int) -> dict[str, str]:
        """What the node's processes need, not the controller's whole environment (a user's
        image has its own PATH, HOME, libraries)."""
        env = super().node_env(node)
        keep = {k: v for k, v in env.items() if os.environ.get(k) != v or k.startswith(contract.ENV_PREFIX)}
        if self.options.image is None:
            keep["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/sbin",
                                            "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"])
            keep["HOME"] = keep["TMPDIR"]
        # No GLOO_SOCKET_IFNAME: gloo resolves the container's hostname, which its /etc/hosts
        # maps to the node's run address (peer_hosts). Pinned to an interface name, a rank
        # restarted after container_disconnect's revert found no "eth0": the engine never
        # reuses an interface's number, and the reconnected one is eth1.
        if self.options.image is None and env.get("PYTHONPATH"):
            # The controller's import path (a worktree of the project: mounted at its path)
            # comes first here too, or the nodes import the editable install's tree instead.
            keep["PYTHONPATH"] = env["PYTHONPATH"]
        keep.pop("DOCKER_HOST", None)
        keep.pop(DOCKER_HOSTS_ENV, None)  # the controller's cleanup scan, not the node's
        return keep

    def _mounts(self, node: int) -> list[Any]:
        from docker.types import Mount

        ro: list[str] = []
        if self.options.image is None:
            # The controller's Python where it really lives (a pyenv or conda tree outside
            # /usr), its virtualenv, and the project (an editable install points there).
            import chaos

            project = os.path.dirname(os.path.dirname(os.path.abspath(chaos.__file__)))
            # Not /sbin: the engine mounts its init (docker-init) at /sbin/docker-init.
            ro += ["/usr", "/lib", "/lib64", "/bin", "/etc", sys.base_prefix,
                   os.path.dirname(os.path.realpath(sys.executable)), sys.prefix, project]
        ro += list(self.options.mounts)
        rw = [self.spec.run_dir, self.node_local_dir(node), tmp_dir_for(self.spec.run_id, node)]
        mounts: list[Mount] = []
        seen: set[str] = set()
        for path in ro:
            # Mounted where it is named (/lib stays /lib when it links to /usr/lib), from
            # where it really is; one already inside a mounted tree comes with it.
            target = os.path.abspath(path)
            if os.path.exists(target) and target not in seen and not any(
                    target.startswith(s.rstrip("/") + "/") for s in seen):
                seen.add(target)
                mounts.append(Mount(target, os.path.realpath(target), type="bind", read_only=True))
        mounts += [Mount(p, p, type="bind", read_only=False) for p in rw]
        return mounts

    def start_node(self, node: int) -> None:
        from docker.types import EndpointConfig

        host = self.host_of(node)
        name = self.container_name(node)
        log_path = RunDir(self.spec.run_dir).node_log(node)
        api = client(host).api
        endpoint = EndpointConfig(api._version, ipv4_address=self.node_address(node))
        create: dict[str, Any] = {
            "image": self.image_name(), "command": self.agent_command(node),
            "environment": self.node_env(node), "labels": {LABEL_NODE: str(node)},
            "hostname": self.hostname(node), "working_dir": self.spec.run_dir, "init": True,
            "network": self.network_name(), "mounts": self._mounts(node),
            "extra_hosts": self.peer_hosts(node),
            "shm_size": self.options.shm_size, "stdin_open": False,
            "networking_config": {self.network_name(): endpoint},
        }
        if self.options.cpus:
            create["nano_cpus"] = int(self.options.cpus * 1e9)
        if self.options.memory:
            create["mem_limit"] = self.options.memory
        self.resources.acquire("docker_container", {"host": host, "name": name, "run_id": self.spec.run_id,
                                                    "node": node, "create": _jsonable(create)})
        self._containers[node] = name
        self._status[node] = NodeStatus(None)
        # Logs are streamed through the engine (works for remote hosts too).
        thread = threading.Thread(target=self._stream_logs, args=(node, log_path), daemon=True,
                                  name=f"trainchaos-docker-log-{node}")
        thread.start()
        self._log_threads.append(thread)
        # LocalCluster counts the started nodes (spares) in ``nodes``; here a container is the node.
        self.nodes[node] = None  # type: ignore[assignment]  # a placeholder: no _Node is read of it here

    @staticmethod
    def hostname(node: int) -> str:
        return f"node{node}"

    def peer_hosts(self, node: int) -> dict[str, str]:
        """Names for the run's addresses in the node's /etc/hosts: the store (the bridge's
        gateway) and every node, this one too (gloo binds what the hostname resolves to,
        whatever the interface is called). torch's c10d client looks up the name of the
        address it connects to; with only its own address in the file, that lookup goes to
        the engine's DNS, which forwards it to the host's resolver and, where none answers
        (a machine without a reachable name server), gives up after 2 x 5 s: 10 s of every
        agent's start went there."""
        nodes = {self.hostname(n): self.node_address(n) for n in range(self.topology.total_nodes)}
        return {STORE_HOST: self.gateway, **nodes}

    def _stream_logs(self, node: int, log_path: str) -> None:
        with contextlib.suppress(Exception), open(log_path, "ab") as log:
            for chunk in self.container(node).logs(stream=True, follow=True, stdout=True, stderr=True):
                log.write(chunk)
                log.flush()

    def _write_clocks(self) -> None:
        """Each host's clock offset to this controller (container clock - controller clock),
        from the midpoint of an exec that reads it; a record for the report, see the module
        docstring for what is (not) corrected."""
        offsets: dict[str, dict[str, Any]] = {}
        for node in sorted({self.hosts.index(self.host_of(n)) for n in self._containers}):
            host = self.hosts[node]
            sample_node = next(n for n in self._containers if self.host_of(n) == host)
            try:
                t0 = time.time()
                out = self.container(sample_node).exec_run(
                    [self.python(), "-c", "import time; print(repr(time.time()))"]).output
                t1 = time.time()
                # The clock is read as the exec ends (after the interpreter's start-up), so
                # it is compared with the reply's arrival; the round trip bounds the error.
                offsets[host] = {"offset_s": round(float(out.decode().strip().splitlines()[-1]) - t1, 6),
                                 "uncertainty_s": round(t1 - t0, 6)}
            except Exception as exc:  # a record, not a precondition
                offsets[host] = {"error": f"{type(exc).__name__}: {str(exc)[:100]}"}
        with open(os.path.join(self.spec.run_dir, "docker", "clocks.json"), "w", encoding="utf-8") as fh:
            json.dump({"hosts": offsets, "method": "container clock read at the end of a docker exec, "
                                                   "minus the controller's clock at its reply"}, fh, indent=1)

    def note_event(self, event: dict) -> None:
        """Ranks report the pid inside their container: named here by its handle."""
        if event.get("kind") == "rank_start" and isinstance(event.get("pid"), int) \
                and isinstance(event.get("node"), int) and event["pid"] < PID_STRIDE:
            event = {**event, "pid": handle(event["node"], event["pid"])}
        if self._attached:  # spares are started by the run's own controller, never here
            ClusterBackend.note_event(self, event)
        else:
            super().note_event(event)

    def poll(self) -> dict[int, NodeStatus]:
        now = time.monotonic()
        if now - self._last_poll >= _POLL_EVERY_S:
            self._last_poll = now
            for node in list(self._containers):
                if self._status[node].returncode is not None:
                    continue
                try:
                    attrs = client(self.host_of(node)).api.inspect_container(self._containers[node])
                except Exception:
                    self._status[node] = NodeStatus(-1, node in self._lost)
                    continue
                state = attrs.get("State", {})
                if state.get("Status") in ("exited", "dead"):
                    code = int(state.get("ExitCode", -1))
                    if state.get("OOMKilled"):
                        code = code or -int(signal.SIGKILL)
                    self._status[node] = NodeStatus(code, node in self._lost)
        return {n: NodeStatus(s.returncode, n in self._lost) for n, s in self._status.items()}

    def stop(self, grace_s: float = 3.0) -> list[int]:
        """SIGTERM to every node (torchrun stops its workers), SIGKILL after ``grace_s``; the
        containers themselves are removed with the run's resources."""
        killed: list[int] = []
        for node in list(self._containers):
            with contextlib.suppress(Exception):
                cont = self.container(node)
                if cont.status == "paused":
                    cont.unpause()
                cont.reload()
                if cont.status == "running":
                    cont.kill(signal="SIGTERM")
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(self._running(n) for n in self._containers):
            time.sleep(0.1)
        for node in list(self._containers):
            if self._running(node):
                with contextlib.suppress(Exception):
                    self.container(node).kill(signal="SIGKILL")
                    killed.append(handle(node, 1))
        self._last_poll = 0.0
        self.poll()
        for thread in self._log_threads:
            thread.join(timeout=2)
        self.close_rendezvous()
        return killed

    def _running(self, node: int) -> bool:
        try:
            self.container(node).reload()
            return self.container(node).status in ("running", "paused", "restarting")
        except Exception:
            return False

    # -- nodes ------------------------------------------------------------------------------
    def node_address(self, node: int) -> str:
        return str(self._subnet_of(self.host_of(node)).network_address + NODE_HOST_OFFSET + node)

    def _subnet_of(self, host: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        subnet = self.subnets.get(host) or self.subnet
        if subnet is None:
            raise RuntimeError("node_address before start(): the run's subnet is chosen there")
        return subnet

    def node_local_dir(self, node: int) -> str:
        return os.path.join(scratch_base(), self.spec.run_id, f"node-{node}")

    def node_logs(self) -> dict[int, str]:
        return {n: RunDir(self.spec.run_dir).node_log(n) for n in self._containers}

    def mark_lost(self, node: int) -> None:
        """Taken down by a fault (killed, frozen for good, cut off): its exit is not the job's."""
        self._lost.add(node)

    # -- packet filter --------------------------------------------------------------------
    def node_netns(self, node: int) -> int:
        """The container's init pid: its network namespace, reached through this machine's
        /proc. A remote engine's containers are out of reach (their pids are another
        kernel's): a partition there would need the hosts' own firewalls."""
        host = self.host_of(node)
        if not self.shares_this_machine(host):
            raise ToolError(f"drop rules go into each container's network namespace through this machine's "
                            f"/proc: node {node} is on remote engine {host}")
        pid = int(self.container(node).attrs.get("State", {}).get("Pid") or 0)
        if pid <= 0:
            raise ToolError(f"node {node}'s container {self.container_name(node)} is not running: "
                            "it has no network namespace to filter")
        return pid

    def rendezvous_address(self) -> str:
        return self.gateway

    # -- power ----------------------------------------------------------------------------
    def power_on(self, node: int) -> None:
        """A fresh container for the node (the old one removed): a new agent that joins the
        rendezvous like any new node; its local disk as the outage left it."""
        from chaos.cluster.docker_engine import DockerContainer

        DockerContainer.destroy({"host": self.host_of(node), "name": self.container_name(node),
                                 "run_id": self.spec.run_id}, {})
        self._lost.discard(node)
        self.start_node(node)


def _network(text: str) -> ipaddress.IPv4Network:
    import ipaddress

    return ipaddress.IPv4Network(text)


def _jsonable(create: dict[str, Any]) -> dict[str, Any]:
    """The create arguments as the resource journal stores them: Mount and EndpointConfig
    are dicts already; ``networking_config`` is rebuilt from them by the SDK."""
    return json.loads(json.dumps(create, default=dict))
