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
``local`` backend's. Needs CAP_NET_ADMIN (``preflight`` tries it).

Host firewalls: bridged frames between nodes pass the root namespace's netfilter hooks when
``br_netfilter`` is loaded with ``net.bridge.bridge-nf-call-iptables=1``; a host FORWARD
chain with policy DROP (Docker sets one) would then drop node-to-node traffic. The backend
never changes the host's firewall: on such a host, allow forwarding on ``tc-*`` interfaces
(``iptables -I FORWARD -i tc-+ -o tc-+ -j ACCEPT``) or set that sysctl to 0.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, ClassVar

from chaos.cluster import register_backend
from chaos.cluster.local import LocalCluster
from chaos.net import fabric

if TYPE_CHECKING:
    from chaos.model import Scenario

__all__ = ["NetnsCluster"]

NODE_HOST_OFFSET = 10
FABRIC_MTU = 9000


@register_backend
class NetnsCluster(LocalCluster):
    name: ClassVar[str] = "netns"
    summary: ClassVar[str] = ("local, with each node in its own network namespace on an emulated "
                              "fabric (veth + bridge, 198.18.0.0/15); for network faults; needs "
                              "CAP_NET_ADMIN")

    def __init__(self, spec, resources) -> None:  # noqa: ANN001 (see ClusterBackend)
        super().__init__(spec, resources)
        self.subnet = None
        self.gateway = ""

    @classmethod
    def preflight(cls, scenario: Scenario) -> list[str]:
        return [f"netns: {line}" for line in fabric.missing_capabilities()]

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        run_id = self.spec.run_id
        os.makedirs(os.path.join(self.spec.run_dir, "logs"), exist_ok=True)
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
        for node in range(self.topology.nodes):
            self.start_node(node)

    def namespace(self, node: int) -> str:
        return fabric.node_namespace(self.spec.run_id, node)

    def node_interface(self, node: int) -> str:
        """The node's end of its link (inside its namespace)."""
        return fabric.fabric_names(self.spec.run_id, node)[1]

    def host_interface(self, node: int) -> str:
        """The bridge's end of the node's link (root namespace)."""
        return fabric.fabric_names(self.spec.run_id, node)[0]

    def agent_command(self, node: int) -> list[str]:
        argv = super().agent_command(node)
        i = argv.index("--rdzv-endpoint")
        argv[i + 1] = f"{self.gateway}:{self.rdzv_port}"
        return ["ip", "netns", "exec", self.namespace(node), *argv]

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

    # -- nodes ----------------------------------------------------------------------------
    def node_address(self, node: int) -> str:
        if self.subnet is None:
            raise RuntimeError("node_address before start(): the run's subnet is chosen there")
        return str(self.subnet.network_address + NODE_HOST_OFFSET + node)
