"""What every fault of the ``network`` family shares: the fabric it acts on, the nftables
tables and qdiscs and routes it made, and their revert from the journal record alone.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from chaos.cluster.capabilities import Fabric, PacketFilter
from chaos.errors import ToolError
from chaos.faults.base import FailureClass, FaultType, TargetKind
from chaos.net import linkemu, nft

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext

__all__ = ["NetFault", "attached_name", "require_fabric"]


def require_fabric(ctx: InjectionContext) -> Any:
    """The backend as a ``Fabric`` (its base interface too: topology, node addresses)."""
    return ctx.require(Fabric)


def attached_name(run_id: str, node: int, fault_id: str) -> str:
    """The name under /run/netns a fault gives a container's network namespace while its rules
    are in place: one per fault (``-c``: never mistaken for a netns node's ``-n``), so that
    two faults on one node never take each other's name away."""
    from chaos.net.fabric import NAME_PREFIX, short_id

    return f"{NAME_PREFIX}{short_id(run_id)}-c{node}-{hashlib.sha256(fault_id.encode()).hexdigest()[:8]}"


@dataclass
class NetFault(FaultType):
    family: ClassVar[str] = "network"
    failure_class: ClassVar[FailureClass] = "network"
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("node",)
    requires: ClassVar[tuple[type, ...]] = (Fabric,)
    _made: dict[str, list[Any]] = field(default_factory=lambda: {"tables": [], "qdiscs": [], "routes": [], "attached": []})

    def _all_nodes(self, cluster: Any) -> list[int]:
        return list(range(cluster.topology.total_nodes))

    def _apply_rules(self, cluster: Any, rules: dict[int, list[str]]) -> None:
        table = nft.table_name(self.fault_id)
        for node, node_rules in sorted(rules.items()):
            if not node_rules:
                continue
            ns = self._filter_namespace(cluster, node)
            self._made["tables"].append([ns, table])  # before: a half-made table is undone too
            nft.add_input_drops(ns, table, node_rules)

    def _filter_namespace(self, cluster: Any, node: int) -> str:
        """The node's namespace by name. A fault that needs only a ``PacketFilter`` may be
        handed a pid (a container's init), which is named for this fault (and the name
        recorded, to go on revert); a ``Fabric`` has named namespaces."""
        netns = cluster.node_netns(node) if PacketFilter in self.requires else cluster.namespace(node)
        if isinstance(netns, str):
            return netns
        name = attached_name(cluster.spec.run_id, node, self.fault_id)
        self._made["attached"].append(name)  # before: a half-made name goes on revert too
        nft.attach_namespace(name, netns)
        return name

    def _schedule(self, ctx: InjectionContext) -> None:
        if self.params.get("duration_s") is not None:
            ctx.schedule_revert(self, float(self.params["duration_s"]))

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        # What inject made, also when it raised half-way (record is then empty).
        self.revert_record({key: record.get(key) or self._made[key] for key in ("tables", "qdiscs", "routes", "attached")})

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
        for name in record.get("attached", []):
            # Only the name goes: the namespace lives as long as its container.
            if name.startswith("tc-"):
                nft.forget_namespace(name)
        if errors:
            raise ToolError("; ".join(errors))
