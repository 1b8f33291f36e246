"""The ``netns`` backend: the ``local`` backend with every node in a network namespace of its
own, so that the job's real traffic (gloo collectives, the c10d rendezvous, the harness's
liveness pings) crosses an emulated fabric that network faults can cut, slow down or thin.

Per run (all of it run-scoped resources, journaled before they exist, torn down newest
first, found by ``trainchaos cleanup``; ``chaos.net.fabric`` names and owns them):

    root namespace                          tc-<short>-n<i> (one per node, spares included)
    tc-<short>-br  198.18.X.1/24  <-veth->  tc-<short>-p<i>  198.18.X.(10+i)/24
      (the controller's rendezvous store
       listens on 198.18.X.1 only)

The agent and its ranks run in the node's namespace (``ip netns exec``); everything else
(processes found by run id, signals, node-local directories, spares joining late) is the
``local`` backend's. Needs root, or CAP_NET_ADMIN and CAP_SYS_ADMIN, and the ``ip`` and
``nft`` commands (``preflight`` makes and removes a throwaway namespace).

Host firewalls: bridged frames between nodes pass the root namespace's netfilter hooks when
``br_netfilter`` is loaded with ``net.bridge.bridge-nf-call-iptables=1``; a host FORWARD
chain with policy DROP (Docker sets one) would then drop node-to-node traffic. The backend
never changes the host's firewall: on such a host, allow forwarding on ``tc-*`` interfaces
(``iptables -I FORWARD -i tc-+ -o tc-+ -j ACCEPT``) or set that sysctl to 0.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, ClassVar, Literal

from chaos.cluster import register_backend
from chaos.cluster.capabilities import (
    Fabric,
    LocalDisk,
    PacketFilter,
    PowerControl,
    PowerCut,
    PowerReturn,
    ServiceProxies,
)
from chaos.cluster.local import LocalCluster
from chaos.model.types import StrictModel
from chaos.net import fabric, linkemu
from chaos.net import toxiproxy as toxi
from chaos.runfiles.rundir import RunDir

if TYPE_CHECKING:
    import ipaddress

    from chaos.model.scenario import Scenario

__all__ = ["NetnsCluster"]

NODE_HOST_OFFSET = 10
FABRIC_MTU = 9000


class NetnsOptions(StrictModel):
    """``backend: {netns: {...}}``: the emulated fabric's options."""

    proxy_services: list[Literal["rendezvous"]] = []
    """TCP services put behind a Toxiproxy proxy, so that ``toxic`` faults can act on them:
    ``rendezvous`` (the agents' c10d store; they reach it through the proxy only). The proxy
    lives on ``TOXIPROXY_URL``'s server when that is set, else on the run's embedded one."""


@register_backend
class NetnsCluster(LocalCluster):
    name: ClassVar[str] = "netns"
    summary: ClassVar[str] = ("local, with each node in its own network namespace on an emulated "
                              "fabric (veth + bridge, 198.18.0.0/15); for network faults; needs "
                              "root, or CAP_NET_ADMIN and CAP_SYS_ADMIN, and ip and nft")
    options_model: ClassVar[type[StrictModel]] = NetnsOptions
    capabilities: ClassVar[tuple[type, ...]] = (Fabric, PacketFilter, ServiceProxies, PowerControl, PowerReturn,
                                                LocalDisk)
    forks_agents: ClassVar[bool] = False  # an agent starts in its node's namespace (ip netns exec)

    def __init__(self, spec, resources) -> None:  # noqa: ANN001 (see ClusterBackend)
        super().__init__(spec, resources)
        self.subnet: ipaddress.IPv4Network | None = None
        self.gateway = ""
        self._emulator: linkemu.LinkEmulatorClient | None = None
        self.options = NetnsOptions.model_validate(spec.options or {})
        self.toxiproxy_url: str | None = None
        self.proxies: dict[str, str] = {}
        """Service -> the name of its proxy on ``toxiproxy_url``'s server."""
        self.agent_rdzv_port = 0

    @classmethod
    def preflight(cls, scenario: Scenario) -> list[str]:
        problems = [f"netns: {line}" for line in fabric.missing_capabilities()]
        if scenario is None:
            return problems
        if any(f.type == "latency" for f in scenario.faults) and not os.path.exists("/dev/net/tun"):
            problems.append("netns: latency faults need the TUN driver (/dev/net/tun is missing; "
                            "modprobe tun, or give the container the device)")
        services = NetnsOptions.model_validate(scenario.backend.options or {}).proxy_services
        for i, fault in enumerate(scenario.faults):
            wanted = (fault.params or {}).get("proxy", "rendezvous") if fault.type == "toxic" else None
            if wanted is not None and wanted not in services:
                problems.append(f"faults[{i}].params.proxy: {wanted!r} is not behind a proxy; add it to "
                                f"backend: {{netns: {{proxy_services: [{wanted}]}}}}")
        return problems

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        run_id = self.spec.run_id
        os.makedirs(RunDir(self.spec.run_dir).logs, exist_ok=True)
        self.subnet = fabric.pick_subnet(run_id)
        hosts = list(self.subnet.hosts())
        self.gateway = str(hosts[0])
        prefix = self.subnet.prefixlen
        bridge = fabric.bridge_name(run_id)
        self.resources.acquire("bridge", {"name": bridge, "address": f"{self.gateway}/{prefix}"})
        for node in range(self.topology.total_nodes):
            self.acquire_node_dirs(node)
            ns = self.namespace(node)
            self.resources.acquire("netns", {"name": ns})
            host_end, node_end = fabric.fabric_names(run_id, node)
            self.resources.acquire("veth", {"name": host_end, "peer": node_end, "netns": ns,
                                            "bridge": bridge, "mtu": FABRIC_MTU,
                                            "address": f"{self.node_address(node)}/{prefix}"})
        # The store listens on the bridge's address only: reachable from every node's
        # namespace, from nowhere beyond the run's fabric.
        self.serve_rendezvous(self.gateway)
        if self.options.proxy_services:
            self._start_proxies()
        for node in range(self.topology.nodes):
            self.start_node(node)

    def _start_proxies(self) -> None:
        """Every proxied service behind a Toxiproxy proxy on the bridge's address (reachable
        from the nodes only), on ``TOXIPROXY_URL``'s server or the run's embedded one."""
        self.toxiproxy_url = toxi.external_url()
        if self.toxiproxy_url is None:
            details = self.resources.acquire("toxiproxy_server", {
                "host": "127.0.0.1", "port_file": os.path.join(self.spec.run_dir, "toxiproxy.port"),
                "log": RunDir(self.spec.run_dir).log("toxiproxy.log")})
            self.toxiproxy_url = details["url"]
        for service in self.options.proxy_services:
            name = f"trainchaos-{fabric.short_id(self.spec.run_id)}-{service}"
            details = self.resources.acquire("toxiproxy_proxy", {
                "url": self.toxiproxy_url, "name": name, "listen": f"{self.gateway}:0",
                "upstream": f"{self.gateway}:{self.rdzv_port}"})
            self.proxies[service] = name
            if service == "rendezvous":
                self.agent_rdzv_port = int(details["listen"].rsplit(":", 1)[1])

    def service_proxy(self, service: str) -> tuple[str, str] | None:
        name = self.proxies.get(service)
        return None if name is None or self.toxiproxy_url is None else (self.toxiproxy_url, name)

    def gateway_address(self) -> str:
        return self.gateway

    def namespace(self, node: int) -> str:
        return fabric.node_namespace(self.spec.run_id, node)

    def node_netns(self, node: int) -> str:
        return self.namespace(node)

    def rendezvous_address(self) -> str:
        return self.gateway

    def node_interface(self, node: int) -> str:
        """The node's end of its link (inside its namespace)."""
        return fabric.fabric_names(self.spec.run_id, node)[1]

    def host_interface(self, node: int) -> str:
        """The bridge's end of the node's link (root namespace)."""
        return fabric.fabric_names(self.spec.run_id, node)[0]

    def emulator_interface(self, node: int) -> str:
        """The link emulator's TUN device in the node's namespace."""
        return linkemu.tun_name(fabric.short_id(self.spec.run_id), node)

    def link_emulator(self) -> linkemu.LinkEmulatorClient:
        """The run's userspace link emulator, started (as a run-scoped resource) by the first
        fault that needs it: a run without a latency fault never has one."""
        if self._emulator is None:
            ports = [[n, self.namespace(n), self.emulator_interface(n), self.node_interface(n)]
                     for n in range(self.topology.total_nodes)]
            self.resources.acquire("link_emulator", {
                "ports": ports, "mtu": FABRIC_MTU,
                "log": RunDir(self.spec.run_dir).log("link-emulator.log")})
            self._emulator = linkemu.LinkEmulatorClient(self.spec.run_id)
        return self._emulator

    def running_link_emulator(self) -> linkemu.LinkEmulatorClient | None:
        """The emulator's client if one was started (a revert never starts one)."""
        return self._emulator

    def agent_command(self, node: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(node), *super().agent_command(node)]

    def rdzv_endpoint(self) -> str:
        return f"{self.gateway}:{self.agent_rdzv_port or self.rdzv_port}"

    def node_env(self, node: int) -> dict[str, str]:
        env = super().node_env(node)
        # gloo binds (and advertises to its peers) the address of this interface: left to
        # itself it resolves the hostname, to loopback here, which no other node can reach.
        # (A device passed through pg_options is not used by init_process_group for gloo.)
        env["GLOO_SOCKET_IFNAME"] = self.node_interface(node)
        return env

    def mark_lost(self, node: int) -> None:
        """A node cut off from the fabric for the rest of the run is lost to the job like a
        dead one: its agent waits on a rendezvous it cannot reach, and that wait (or its
        exit) is not the job's outcome."""
        if node in self.nodes:
            self.nodes[node].lost = True

    # -- power ----------------------------------------------------------------------------
    def power_off(self, nodes: tuple[int, ...]) -> PowerCut:
        """The links go first: a node without power sends no FIN or RST, so its peers must
        notice it by silence, as in a real outage, not by the kernel closing its sockets."""
        for node in nodes:
            fabric.ip("link", "set", self.host_interface(node), "down")
        return super().power_off(nodes)

    def power_on(self, node: int) -> None:
        fabric.ip("link", "set", self.host_interface(node), "up")
        super().power_on(node)

    # -- nodes ----------------------------------------------------------------------------
    def node_address(self, node: int) -> str:
        if self.subnet is None:
            raise RuntimeError("node_address before start(): the run's subnet is chosen there")
        return str(self.subnet.network_address + NODE_HOST_OFFSET + node)
