"""Network faults on the ``netns`` backend's emulated fabric: partitions, link flaps, packet
loss, bandwidth limits, latency. They act on the job's real traffic (gloo collectives, the
c10d rendezvous, the harness's liveness pings) with kernel mechanisms where the kernel has
them: nftables drops in the receiving node's namespace (``chaos.net.nft``) and tbf qdiscs on
the node's veth link; latency, which needs ``sch_netem`` this kernel lacks, through the
run's userspace link emulator (``chaos.net.linkemu``), on the delayed links only
(``chaos.faults.network.latency``). The base they share: ``chaos.faults.network.fabric``;
Toxiproxy's toxics on TCP services: ``chaos.faults.network.toxic``.

Every fault's journal record lists what it made (``tables``: [namespace, table],
``qdiscs``: [namespace or null, device], ``routes``: [namespace, destination, TUN device]);
reverting deletes exactly those. A crashed controller's namespaces and links are removed by
``trainchaos cleanup``, rules, qdiscs and routes with them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from chaos.cluster.capabilities import PacketFilter
from chaos.errors import ToolError
from chaos.faults.base import FailureClass, FaultParams, ParamsContext, TargetKind, register
from chaos.faults.network.fabric import NetFault, require_fabric
from chaos.model.types import MAX_SECONDS
from chaos.net import nft

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext

__all__ = ["Bandwidth", "LinkFlap", "PacketLoss", "Partition"]


class PartitionParams(FaultParams):
    shape: Literal["isolate", "split", "one_way"] = "isolate"
    """isolate: the target nodes lose every packet to and from the fabric (the rendezvous
    store included). split: the nodes of different groups cannot reach each other, and only
    the largest group (a tie: the one with the lowest node) keeps the rendezvous store.
    one_way: packets *from* the target nodes (or along each
    ``links`` pair) are lost, the other direction works. A ``{links: [[from, to], ...]}``
    target cuts exactly those directions, whatever the shape."""
    groups: list[list[int]] | None = None
    """split only: the node groups, e.g. [[0, 1], [2]]; a node in no group reaches every
    group. Default: the target nodes against all the others."""
    links: list[list[int]] | None = None
    """one_way only: directed links [from, to] whose packets are lost, e.g. [[0, 1]];
    default: everything the target nodes send to other nodes."""
    duration_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Seconds until the partition heals; null lasts until the run ends."""


class PacketLossParams(FaultParams):
    percent: float = Field(gt=0, le=100)
    """Share of packets lost in each direction of the target nodes' links (0.01 steps)."""
    duration_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Seconds it lasts; null until the run ends."""


class BandwidthParams(FaultParams):
    rate_mbit: float = Field(gt=0, le=100000)
    """Link rate in Mbit/s, each direction of the target nodes' links."""
    duration_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Seconds it lasts; null until the run ends."""


class LinkFlapParams(FaultParams):
    period_s: float = Field(gt=0, le=MAX_SECONDS)
    """Seconds from one outage of the link to the next."""
    down_s: float = Field(gt=0, le=MAX_SECONDS)
    """Seconds each outage lasts (less than period_s)."""
    duration_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Seconds the flapping goes on; null until the run ends."""


def _check_nodes(lists: list[list[int]], key: str, total: int | None) -> list[tuple[tuple[str | int, ...], str]]:
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for i, group in enumerate(lists):
        for j, node in enumerate(group):
            if node < 0 or (total is not None and node >= total):
                span = f" (0-{total - 1})" if total is not None else ""
                problems.append(((key, i, j), f"node {node} does not exist: the job has "
                                 f"{total} nodes{span}" if total is not None else f"node {node} is negative"))
    return problems


def _addrs(cluster: Any, nodes: list[int] | tuple[int, ...]) -> str:
    return "{ " + ", ".join(cluster.node_address(n) for n in sorted(set(nodes))) + " }"


@register
@dataclass
class Partition(NetFault):
    type_name: ClassVar[str] = "partition"
    summary: ClassVar[str] = "Cut the fabric: isolate nodes, split them into groups, or drop one direction."
    mechanism: ClassVar[str] = ("nftables drops on the receiving side, in each node's network namespace (a "
                                "netns node's, or a container's on a local docker engine)")
    fidelity: ClassVar[str] = (
        "Stands for a switch, cable or optics failure that black-holes traffic (no RST, no "
        "ICMP): connects, gloo collectives and store calls time out. Exercises network "
        "failure detection and attribution, elastic shrink, and what a minority does when it "
        "loses the majority. Packets vanish in the receiving kernel, so a sender sees no "
        "local error; routing reconvergence and partial (ECMP) failures are not modelled. "
        "On docker, split groups of nodes by host ({rack: ...} or {power_domain: ...} "
        "targets) to cut host from host, as a failed link between two racks does."
    )
    params_model: ClassVar[type[FaultParams]] = PartitionParams
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("node", "link")
    # Only drop rules where packets arrive: a container network has that (its namespace),
    # while the links the other network faults shape are the netns fabric's alone.
    requires: ClassVar[tuple[type, ...]] = (PacketFilter,)

    @classmethod
    def check_params(cls, params: PartitionParams, context: ParamsContext) -> list[tuple[tuple[str | int, ...], str]]:
        total = context.total_nodes
        problems: list[tuple[tuple[str | int, ...], str]] = []
        if params.groups is not None:
            if params.shape != "split":
                problems.append((("groups",), f"only for shape: split (this partition is {params.shape})"))
            problems += _check_nodes(params.groups, "groups", total)
            seen: dict[int, int] = {}
            for i, group in enumerate(params.groups):
                if not group:
                    problems.append((("groups", i), "a group holds at least one node"))
                for j, node in enumerate(group):
                    if node in seen and seen[node] != i:
                        problems.append((("groups", i, j), f"node {node} is already in group "
                                         f"{seen[node]}; a node belongs to at most one group"))
                    seen.setdefault(node, i)
            if len(params.groups) < 2:
                problems.append((("groups",), "a split needs at least 2 groups"))
        if params.links is not None:
            if params.shape != "one_way":
                problems.append((("links",), f"only for shape: one_way (this partition is {params.shape})"))
            for i, link in enumerate(params.links):
                if len(link) != 2:
                    problems.append((("links", i), f"a link is [from, to]: 2 nodes, not {len(link)}"))
                elif link[0] == link[1]:
                    problems.append((("links", i), f"a link from node {link[0]} to itself; it "
                                     "joins two different nodes"))
            problems += _check_nodes(params.links, "links", total)
        return problems

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        cluster: Any = ctx.require(PacketFilter)  # its base interface too: topology, node addresses
        nodes = self._all_nodes(cluster)
        targets = list(self.target.nodes)
        shape = self.params.get("shape", "isolate")
        named = [list(link) for link in self.target.links]
        if named:
            # A {links: ...} target cuts exactly those directions.
            shape = "one_way"
        rules: dict[int, list[str]] = {n: [] for n in nodes}
        if shape == "isolate":
            others = [n for n in nodes if n not in targets]
            for n in targets:
                # Whatever reaches the node from outside it (loopback is accepted first): its
                # link, and the link emulator's device when latency is on as well.
                rules[n].append(nft.ALL_INPUT)
            if others:
                for m in others:
                    rules[m].append(f"ip saddr {_addrs(cluster, targets)}")
        elif shape == "split":
            groups = self.params.get("groups") or [targets, [n for n in nodes if n not in targets]]
            # The rendezvous store stays on the majority's side (the largest group; a tie
            # goes to the group of the lowest node): the others lose it too, so a minority
            # cannot form a job of its own through it.
            keeper = max(range(len(groups)), key=lambda i: (len(groups[i]), -min(groups[i])))
            for i, group in enumerate(groups):
                foreign = [n for j, g in enumerate(groups) if j != i for n in g]
                if foreign:
                    for n in group:
                        rules[n].append(f"ip saddr {_addrs(cluster, foreign)}")
                if i != keeper:
                    for n in group:
                        rules[n].append(f"ip saddr {cluster.rendezvous_address()}")
        else:  # one_way
            links = named or self.params.get("links") or [
                [a, b] for a in targets for b in nodes if b not in targets]
            for a, b in links:
                rules[b].append(f"ip saddr {cluster.node_address(a)}")
        self._apply_rules(cluster, rules)
        self._schedule(ctx)
        if shape in ("isolate", "split") and self.params.get("duration_s") is None:
            # Cut off for good: that side can never finish with the others.
            cut = targets if shape == "isolate" else [
                n for i, g in enumerate(groups) if i != keeper for n in g]
            for n in cut:
                cluster.mark_lost(n)
        return {"tables": self._made["tables"], "qdiscs": [], "attached": self._made["attached"], "shape": shape}


@register
@dataclass
class PacketLoss(NetFault):
    type_name: ClassVar[str] = "packet_loss"
    summary: ClassVar[str] = "Lose a share of the packets on the target nodes' links, both directions."
    mechanism: ClassVar[str] = "nftables numgen random drops, in the receiving node's namespace"
    fidelity: ClassVar[str] = (
        "Stands for a dirty optic or a flaky port dropping packets at random (independent "
        "per packet, no bursts). Exercises TCP retransmission under gloo and the c10d store, "
        "and whether a slow-but-alive peer is mistaken for a dead one. Traffic from the "
        "target nodes to the controller's store is not thinned (it is received outside the "
        "nodes' namespaces)."
    )
    params_model: ClassVar[type[FaultParams]] = PacketLossParams

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        cluster = require_fabric(ctx)
        nodes = self._all_nodes(cluster)
        targets = list(self.target.nodes)
        threshold = max(1, round(float(self.params["percent"]) * 100))
        chance = f"numgen random mod 10000 < {threshold}"
        rules: dict[int, list[str]] = {n: [] for n in nodes}
        for n in targets:
            rules[n].append(f'iifname "{cluster.node_interface(n)}" {chance}')
        for m in nodes:
            if m not in targets:
                rules[m].append(f"ip saddr {_addrs(cluster, targets)} {chance}")
        self._apply_rules(cluster, rules)
        self._schedule(ctx)
        return {"tables": self._made["tables"], "qdiscs": []}


@register
@dataclass
class Bandwidth(NetFault):
    type_name: ClassVar[str] = "bandwidth"
    failure_class: ClassVar[FailureClass] = "slow"
    summary: ClassVar[str] = "Limit the rate of the target nodes' links, both directions."
    mechanism: ClassVar[str] = "tbf qdisc on both ends of the node's veth link"
    fidelity: ClassVar[str] = (
        "Stands for a link that trained down to a lower speed or a congested uplink. "
        "Exercises step-time sensitivity to bandwidth and that a slow network raises no "
        "failure detection. A token bucket, not a switch buffer: no ECN, no PFC pauses."
    )
    params_model: ClassVar[type[FaultParams]] = BandwidthParams

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        cluster = require_fabric(ctx)
        rate = float(self.params["rate_mbit"])
        for n in self.target.nodes:
            for ns, dev in ((cluster.namespace(n), cluster.node_interface(n)), (None, cluster.host_interface(n))):
                self._made["qdiscs"].append([ns, dev])
                nft.tbf_add(dev, rate, ns)
        self._schedule(ctx)
        return {"tables": [], "qdiscs": self._made["qdiscs"]}


@register
@dataclass
class LinkFlap(NetFault):
    type_name: ClassVar[str] = "link_flap"
    summary: ClassVar[str] = "Take the target nodes' links down for down_s every period_s."
    mechanism: ClassVar[str] = ("nftables drops of every packet on the link, added and removed on "
                                "a timer in the controller")
    fidelity: ClassVar[str] = (
        "Stands for a flapping port or optic: the link is black-holed for down_s, then works "
        "again, repeatedly. Exercises timeouts against outages shorter or longer than them "
        "and recovery after repeated heals. The interface stays up (no carrier loss, no "
        "link-down event), as a fault past the first hop looks."
    )
    params_model: ClassVar[type[FaultParams]] = LinkFlapParams
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @classmethod
    def check_params(cls, params: LinkFlapParams, context: ParamsContext) -> list[tuple[tuple[str | int, ...], str]]:
        if params.down_s >= params.period_s:
            return [(("down_s",), f"{params.down_s:g} s down in a period of {params.period_s:g} s would "
                     "never bring the link back: down_s must be less than period_s")]
        return []

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        cluster = require_fabric(ctx)
        nodes = self._all_nodes(cluster)
        targets = list(self.target.nodes)
        rules: dict[int, list[str]] = {n: [] for n in nodes}
        for n in targets:
            rules[n].append(f'iifname "{cluster.node_interface(n)}"')
        for m in nodes:
            if m not in targets:
                rules[m].append(f"ip saddr {_addrs(cluster, targets)}")
        table = nft.table_name(self.fault_id)
        tables = [[cluster.namespace(n), table] for n, r in sorted(rules.items()) if r]
        self._made["tables"] = tables
        period, down = float(self.params["period_s"]), float(self.params["down_s"])

        def flap() -> None:
            while not self._stop.is_set():
                try:
                    self._apply_rules_quiet(cluster, rules)
                    if self._stop.wait(down):
                        return
                finally:
                    for ns, tbl in tables:
                        try:
                            nft.delete_table(ns, tbl)
                        except ToolError:
                            pass
                if self._stop.wait(period - down):
                    return

        # The first outage begins at once, on the thread.
        self._thread = threading.Thread(target=flap, name=f"flap-{self.fault_id}", daemon=True)
        self._thread.start()
        self._schedule(ctx)
        return {"tables": tables, "qdiscs": [], "period_s": period, "down_s": down}

    def _apply_rules_quiet(self, cluster: Any, rules: dict[int, list[str]]) -> None:
        table = nft.table_name(self.fault_id)
        for node, node_rules in sorted(rules.items()):
            if node_rules:
                nft.add_input_drops(cluster.namespace(node), table, node_rules)

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        super().revert(ctx, record)
