"""What every fault of the ``network`` family shares: the fabric it acts on, the nftables
tables and qdiscs and routes it made, and their revert from the journal record alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from chaos.cluster.capabilities import Fabric
from chaos.errors import ToolError
from chaos.faults.base import FailureClass, FaultType, TargetKind
from chaos.net import linkemu, nft

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext

__all__ = ["NetFault", "require_fabric"]


def require_fabric(ctx: InjectionContext) -> Any:
    """The backend as a ``Fabric`` (its base interface too: topology, node addresses)."""
    return ctx.require(Fabric)


@dataclass
class NetFault(FaultType):
    family: ClassVar[str] = "network"
    failure_class: ClassVar[FailureClass] = "network"
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("node",)
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
