"""Network faults on the ``netns`` backend's emulated fabric: partitions, link flaps, packet
loss, bandwidth limits, latency. They act on the job's real traffic (gloo collectives, the
c10d rendezvous, the harness's liveness pings) with kernel mechanisms where the kernel has
them: nftables drops in the receiving node's namespace (``chaos.net.nft``) and tbf qdiscs on
the node's veth link; latency, which needs ``sch_netem`` this kernel lacks, through the
run's userspace link emulator (``chaos.net.linkemu``), on the delayed links only.

Every fault's journal record lists what it made (``tables``: [namespace, table],
``qdiscs``: [namespace or null, device], ``routes``: [namespace, destination, TUN device]);
reverting deletes exactly those. A crashed controller's namespaces and links are removed by
``trainchaos cleanup``, rules, qdiscs and routes with them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field

from chaos.cluster.capabilities import Fabric, ServiceProxies
from chaos.errors import ToolError
from chaos.faults.base import FaultParams, FaultType, ParamsContext, register
from chaos.net import linkemu, nft
from chaos.schema.types import MAX_SECONDS

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext

__all__ = ["Bandwidth", "Latency", "LinkFlap", "PacketLoss", "Partition", "ToxicFault"]


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


class LatencyParams(FaultParams):
    delay_ms: float = Field(ge=0, le=60000)
    """Milliseconds each packet is held, in each delayed direction (a round trip across
    two delayed directions takes twice this)."""
    jitter_ms: float = Field(0.0, ge=0, le=60000)
    """Each packet's delay is drawn uniformly from delay_ms +- jitter_ms (seeded)."""
    reorder: bool = False
    """false: a link stays FIFO (a packet never overtakes the one sent before it; jitter
    then bunches packets). true: each packet leaves at its own drawn time, so jitter
    reorders them, as netem does."""
    duration_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Seconds it lasts; null until the run ends."""


ToxicKind = Literal["latency", "bandwidth", "timeout", "reset_peer", "slow_close", "slicer", "limit_data", "down"]


class ToxicParams(FaultParams):
    toxic: ToxicKind
    """A Toxiproxy toxic, with upstream's semantics, or ``down`` (the proxy disabled: its
    connections closed, new connects refused)."""
    proxy: Literal["rendezvous"] = "rendezvous"
    """The proxied service (listed under backend: {netns: {proxy_services: [...]}})."""
    stream: Literal["upstream", "downstream"] = "downstream"
    """upstream: data from the clients to the service; downstream: from the service back."""
    toxicity: float = Field(1.0, gt=0, le=1)
    """Chance that the toxic applies to a connection (drawn per connection, as upstream)."""
    attributes: dict[str, Annotated[int, Field(le=2**31 - 1)]] = {}
    """The toxic's attributes, as Toxiproxy names them: latency {latency, jitter} (ms),
    bandwidth {rate} (KB/s), timeout {timeout} (ms, 0: never closes), reset_peer {timeout}
    (ms), slow_close {delay} (ms), slicer {average_size, size_variation} (bytes) and
    {delay} (us), limit_data {bytes}; down takes none. Left out: 0."""
    duration_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Seconds until the toxic is removed (or the proxy enabled again); null: until the
    run ends."""


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


def _fabric(ctx: InjectionContext) -> Any:
    """The backend as a ``Fabric`` (its base interface too: topology, node addresses)."""
    return ctx.require(Fabric)


def _addrs(cluster: Any, nodes: list[int] | tuple[int, ...]) -> str:
    return "{ " + ", ".join(cluster.node_address(n) for n in sorted(set(nodes))) + " }"


@dataclass
class _NetFault(FaultType):
    family: ClassVar[str] = "network"
    failure_class: ClassVar[str] = "network"
    target_kinds: ClassVar[tuple[str, ...]] = ("node",)
    requires: ClassVar[tuple[type, ...]] = (Fabric,)
    _made: dict[str, list[list[Any]]] = field(default_factory=lambda: {"tables": [], "qdiscs": [], "routes": []})

    def _all_nodes(self, cluster: Any) -> list[int]:
        return list(range(cluster.topology.total_nodes))

    def _apply_rules(self, cluster: Any, rules: dict[int, list[str]]) -> None:
        table = nft.table_name(self.fault_id)
        for node, node_rules in sorted(rules.items()):
            if not node_rules:
                continue
            ns = cluster.namespace(node)
            self._made["tables"].append([ns, table])  # before: a half-made table is undone too
            nft.add_input_drops(ns, table, node_rules)

    def _schedule(self, ctx: InjectionContext) -> None:
        if self.params.get("duration_s") is not None:
            ctx.schedule_revert(self, float(self.params["duration_s"]))

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        # What inject made, also when it raised half-way (record is then empty).
        self.revert_record({"tables": record.get("tables") or self._made["tables"],
                            "qdiscs": record.get("qdiscs") or self._made["qdiscs"],
                            "routes": record.get("routes") or self._made["routes"]})

    @classmethod
    def revert_record(cls, record: dict[str, Any]) -> None:
        errors = []
        for ns, table in record.get("tables", []):
            try:
                nft.delete_table(ns, table)
            except ToolError as exc:
                errors.append(str(exc))
        for ns, dev in record.get("qdiscs", []):
            try:
                nft.tbf_del(dev, ns)
            except ToolError as exc:
                errors.append(str(exc))
        for ns, dst, tun in record.get("routes", []):
            try:
                linkemu.del_route(ns, dst, tun)
            except ToolError as exc:
                errors.append(str(exc))
        if errors:
            raise ToolError("; ".join(errors))


@register
@dataclass
class Partition(_NetFault):
    type_name: ClassVar[str] = "partition"
    summary: ClassVar[str] = "Cut the fabric: isolate nodes, split them into groups, or drop one direction."
    mechanism: ClassVar[str] = "nftables drops on the receiving side, in each node's network namespace"
    fidelity: ClassVar[str] = (
        "Stands for a switch, cable or optics failure that black-holes traffic (no RST, no "
        "ICMP): connects, gloo collectives and store calls time out. Exercises network "
        "failure detection and attribution, elastic shrink, and what a minority does when it "
        "loses the majority. Packets vanish in the receiving kernel, so a sender sees no "
        "local error; routing reconvergence and partial (ECMP) failures are not modelled."
    )
    params_model: ClassVar[type[FaultParams]] = PartitionParams
    target_kinds: ClassVar[tuple[str, ...]] = ("node", "link")

    @classmethod
    def check_params(cls, params: FaultParams, context: ParamsContext) -> list[tuple[tuple[str | int, ...], str]]:
        p: PartitionParams = params  # type: ignore[assignment]
        total = context.total_nodes
        problems: list[tuple[tuple[str | int, ...], str]] = []
        if p.groups is not None:
            if p.shape != "split":
                problems.append((("groups",), f"only for shape: split (this partition is {p.shape})"))
            problems += _check_nodes(p.groups, "groups", total)
            seen: dict[int, int] = {}
            for i, group in enumerate(p.groups):
                if not group:
                    problems.append((("groups", i), "a group holds at least one node"))
                for j, node in enumerate(group):
                    if node in seen and seen[node] != i:
                        problems.append((("groups", i, j), f"node {node} is already in group "
                                         f"{seen[node]}; a node belongs to at most one group"))
                    seen.setdefault(node, i)
            if len(p.groups) < 2:
                problems.append((("groups",), "a split needs at least 2 groups"))
        if p.links is not None:
            if p.shape != "one_way":
                problems.append((("links",), f"only for shape: one_way (this partition is {p.shape})"))
            for i, link in enumerate(p.links):
                if len(link) != 2:
                    problems.append((("links", i), f"a link is [from, to]: 2 nodes, not {len(link)}"))
                elif link[0] == link[1]:
                    problems.append((("links", i), f"a link from node {link[0]} to itself; it "
                                     "joins two different nodes"))
            problems += _check_nodes(p.links, "links", total)
        return problems

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        cluster = _fabric(ctx)
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
                rules[n].append(f'iifname "{cluster.node_interface(n)}"')
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
                        rules[n].append(f"ip saddr {cluster.gateway_address()}")
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
        return {"tables": self._made["tables"], "qdiscs": [], "shape": shape}


@register
@dataclass
class PacketLoss(_NetFault):
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
        cluster = _fabric(ctx)
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
class Bandwidth(_NetFault):
    type_name: ClassVar[str] = "bandwidth"
    failure_class: ClassVar[str] = "slow"
    summary: ClassVar[str] = "Limit the rate of the target nodes' links, both directions."
    mechanism: ClassVar[str] = "tbf qdisc on both ends of the node's veth link"
    fidelity: ClassVar[str] = (
        "Stands for a link that trained down to a lower speed or a congested uplink. "
        "Exercises step-time sensitivity to bandwidth and that a slow network raises no "
        "failure detection. A token bucket, not a switch buffer: no ECN, no PFC pauses."
    )
    params_model: ClassVar[type[FaultParams]] = BandwidthParams

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        cluster = _fabric(ctx)
        rate = float(self.params["rate_mbit"])
        for n in self.target.nodes:
            for ns, dev in ((cluster.namespace(n), cluster.node_interface(n)), (None, cluster.host_interface(n))):
                self._made["qdiscs"].append([ns, dev])
                nft.tbf_add(dev, rate, ns)
        self._schedule(ctx)
        return {"tables": [], "qdiscs": self._made["qdiscs"]}


@register
@dataclass
class LinkFlap(_NetFault):
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
    def check_params(cls, params: FaultParams, context: ParamsContext) -> list[tuple[tuple[str | int, ...], str]]:
        p: LinkFlapParams = params  # type: ignore[assignment]
        if p.down_s >= p.period_s:
            return [(("down_s",), f"{p.down_s:g} s down in a period of {p.period_s:g} s would "
                     "never bring the link back: down_s must be less than period_s")]
        return []

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        cluster = _fabric(ctx)
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


def _directed_links(fault: FaultType, cluster: Any) -> list[tuple[int, int]]:
    """The directed links a fault acts on: the target's own ``links`` when it names them,
    else both directions of every link between a target node and any other node."""
    named = fault.target.links
    if named:
        return sorted({(int(a), int(b)) for a, b in named})
    nodes = range(cluster.topology.total_nodes)
    targets = set(fault.target.nodes)
    return sorted({(a, b) for a in nodes for b in nodes if a != b and (a in targets or b in targets)})


@register
@dataclass
class Latency(_NetFault):
    type_name: ClassVar[str] = "latency"
    failure_class: ClassVar[str] = "slow"
    summary: ClassVar[str] = "Delay (with jitter) every packet on the target links, each direction."
    mechanism: ClassVar[str] = (
        "the run's userspace link emulator: a route through a TUN device in the sending node's "
        "namespace, only on delayed links and only while the fault lasts; the emulator holds "
        "each packet and writes it to the veth unchanged")
    fidelity: ClassVar[str] = (
        "Stands for distance, a congested path or a deep switch buffer: every packet of the "
        "link arrives delay_ms (+- jitter_ms) late, none is lost. Exercises step-time "
        "sensitivity to latency (gloo's ring collectives pay it per hop) and that a slow but "
        "healthy network raises no failure detection. Delay is added in user space on one CPU "
        "(sub-millisecond error, throughput of a delayed link limited to what one Python "
        "process forwards); links between nodes only, the nodes' traffic to the controller's "
        "store is not delayed (put the store behind Toxiproxy for that).")
    params_model: ClassVar[type[FaultParams]] = LatencyParams
    target_kinds: ClassVar[tuple[str, ...]] = ("node", "link")

    @classmethod
    def check_params(cls, params: FaultParams, context: ParamsContext) -> list[tuple[tuple[str | int, ...], str]]:
        p: LatencyParams = params  # type: ignore[assignment]
        if p.jitter_ms > p.delay_ms:
            return [(("jitter_ms",), f"jitter of {p.jitter_ms:g} ms around a delay of {p.delay_ms:g} ms "
                     "would ask for negative delays: jitter_ms must not exceed delay_ms")]
        return []

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        cluster = _fabric(ctx)
        emulator = cluster.link_emulator()
        links = _directed_links(self, cluster)
        for a, b in links:
            dst = cluster.node_address(b)
            # The delay first, then the route: a packet the emulator gets is always delayed.
            emulator.request(op="set", node=a, dst=dst, delay_ms=float(self.params["delay_ms"]),
                             jitter_ms=float(self.params.get("jitter_ms") or 0),
                             reorder=bool(self.params.get("reorder")), seed=self.seed * 1009 + a * 101 + b)
            tun = cluster.emulator_interface(a)
            self._made["routes"].append([cluster.namespace(a), dst, tun])
            linkemu.add_route(cluster.namespace(a), dst, tun, cluster.node_address(a))
        self._schedule(ctx)
        return {"tables": [], "qdiscs": [], "routes": self._made["routes"], "links": [list(x) for x in links]}

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        routes = record.get("routes") or self._made["routes"]
        self.revert_record({"routes": routes})  # the kernel path back first
        cluster = _fabric(ctx)
        emulator = cluster.running_link_emulator()
        if emulator is None:
            return
        for ns, dst, _tun in routes:
            node = next((n for n in range(cluster.topology.total_nodes) if cluster.namespace(n) == ns), None)
            if node is not None:
                try:
                    emulator.request(op="clear", node=node, dst=dst)
                except ToolError:
                    pass  # emulator already gone (run end): its delays went with it


@register
@dataclass
class ToxicFault(_NetFault):
    type_name: ClassVar[str] = "toxic"
    summary: ClassVar[str] = "Apply a Toxiproxy toxic (or take the proxy down) on a proxied TCP service."
    mechanism: ClassVar[str] = (
        "Toxiproxy's HTTP API through the toxiproxy-python client: TOXIPROXY_URL's server, "
        "else the run's embedded server; the service is reached through its proxy only")
    fidelity: ClassVar[str] = (
        "Stands for a sick TCP service or the path to it: a store that stalls, resets, "
        "closes slowly, trickles or cuts its replies (toxics act on the byte stream of each "
        "connection, at the proxy), or is gone (down). Exercises the job's store timeouts, "
        "retries and reconnects at rendezvous and restart. Acts on the proxied service's "
        "connections only, not on packets: collectives between nodes are untouched (use the "
        "link faults for those). Its failure class is network for down, timeout, reset_peer "
        "and limit_data, slow for latency, bandwidth, slicer and slow_close.")
    target_kinds: ClassVar[tuple[str, ...]] = ("job",)
    requires: ClassVar[tuple[type, ...]] = (ServiceProxies,)
    params_model: ClassVar[type[FaultParams]] = ToxicParams

    def __post_init__(self) -> None:
        # A stalled, reset or vanished service is a failure; a slower one is not.
        kind = self.params.get("toxic")
        self.failure_class = "slow" if kind in ("latency", "bandwidth", "slicer", "slow_close") else "network"  # type: ignore[misc]

    @classmethod
    def check_params(cls, params: FaultParams, context: ParamsContext) -> list[tuple[tuple[str | int, ...], str]]:
        from chaos.net.toxiproxy.toxics import ATTRIBUTES

        p: ToxicParams = params  # type: ignore[assignment]
        allowed = ATTRIBUTES.get(p.toxic, ())
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for key, value in p.attributes.items():
            if key not in allowed:
                problems.append((("attributes", key), f"{p.toxic} has no attribute {key!r}; "
                                 + (f"allowed: {', '.join(allowed)}" if allowed else "it takes none")))
            elif value < 0:
                problems.append((("attributes", key), f"{value} is negative: {key} is at least 0"))
        return problems

    def _proxy(self, ctx: InjectionContext) -> tuple[str, Any]:
        from chaos.net import toxiproxy as toxi

        service = self.params.get("proxy", "rendezvous")
        proxied = ctx.require(ServiceProxies).service_proxy(service)
        if proxied is None:
            raise ToolError(f"service {service!r} is not behind a Toxiproxy proxy in this run")
        url, name = proxied
        return url, toxi.find_proxy(url, name)

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        url, proxy = self._proxy(ctx)
        kind = self.params["toxic"]
        record: dict[str, Any] = {"tables": [], "qdiscs": [], "url": url, "proxy": proxy.name, "toxic": kind}
        try:
            if kind == "down":
                proxy.disable()
            else:
                record["toxic_name"] = f"trainchaos-{self.fault_id}"
                proxy.add_toxic(type=kind, name=record["toxic_name"], stream=self.params.get("stream", "downstream"),
                                toxicity=float(self.params.get("toxicity", 1.0)),
                                attributes=dict(self.params.get("attributes") or {}))
        except Exception as exc:
            raise ToolError(f"Toxiproxy at {url}: {kind} on {proxy.name}: {exc}") from exc
        self._record = record
        self._schedule(ctx)
        return record

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        self.revert_record(record or getattr(self, "_record", {}))

    @classmethod
    def revert_record(cls, record: dict[str, Any]) -> None:
        from chaos.net import toxiproxy as toxi

        if not record.get("url") or not record.get("proxy"):
            return
        try:
            proxy = toxi.client(record["url"]).get_proxy(record["proxy"])
        except Exception:
            return  # the server is gone (the embedded one ends with its run): nothing left
        if proxy is None:
            return
        try:
            if record.get("toxic") == "down":
                proxy.enable()
            elif record.get("toxic_name") and proxy.get_toxic(record["toxic_name"]) is not None:
                proxy.destroy_toxic(record["toxic_name"])
        except Exception as exc:
            raise ToolError(f"Toxiproxy at {record['url']}: cannot undo {record.get('toxic')} "
                            f"on {record['proxy']}: {exc}") from exc
