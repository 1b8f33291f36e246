"""``latency``: packets held on the delayed links, through the run's userspace link emulator
(``chaos.net.linkemu``): the kernel here lacks ``sch_netem``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from chaos.errors import ToolError
from chaos.faults.base import (
    FailureClass,
    FaultParams,
    FaultType,
    ParamsContext,
    TargetKind,
    register,
)
from chaos.faults.network.fabric import NetFault, require_fabric
from chaos.model.types import MAX_SECONDS
from chaos.net import linkemu

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext

__all__ = ["Latency"]


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
class Latency(NetFault):
    type_name: ClassVar[str] = "latency"
    failure_class: ClassVar[FailureClass] = "slow"
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
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("node", "link")

    @classmethod
    def check_params(cls, params: LatencyParams, context: ParamsContext) -> list[tuple[tuple[str | int, ...], str]]:
        if params.jitter_ms > params.delay_ms:
            return [(("jitter_ms",), f"jitter of {params.jitter_ms:g} ms around a delay of {params.delay_ms:g} ms "
                     "would ask for negative delays: jitter_ms must not exceed delay_ms")]
        return []

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        cluster = require_fabric(ctx)
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
        cluster = require_fabric(ctx)
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
