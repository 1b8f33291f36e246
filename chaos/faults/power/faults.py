"""Power faults: a power domain or a rack loses power, every node in it at the same instant.

The blast radius is the point: a utility transfer, a UPS action or a tripped PDU takes out
many nodes at once, their local disks with what was not yet on stable storage, and any
checkpoint held only there. The backend kills every process of the nodes in one sweep
(the backend's ``PowerControl.power_off``; the spread between the first and the last kill is recorded)
and, on ``netns``, takes their links down first, so that no peer hears a FIN or RST from a
dead node: it hears nothing, as from a node whose power went.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from chaos.cluster.capabilities import LocalDisk, PowerControl, PowerReturn
from chaos.faults.base import FailureClass, FaultParams, FaultType, ParamNeed, TargetKind, register
from chaos.model.types import MAX_SECONDS

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext

__all__ = ["PowerOutage", "RackLoss"]


class PowerParams(FaultParams):
    local_data: Literal["unfsynced", "all"] = "unfsynced"
    """What the nodes' local disks lose: unfsynced: data written but not yet fsynced (what a
    power cut drops from the page cache and the disk's volatile cache; through the storage
    fault layer, which the runner mounts on the node-local tier for this when the workload
    keeps one and the backend mounts the layer (local, slurm); else nothing is pending and
    only the processes die); all: everything on them (a disk that does not come back)."""
    duration_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Seconds until power returns: the nodes come back empty (fresh agents, no process of
    before, the local disk as the outage left it) and may rejoin the job; null: they stay
    off until the run ends."""


@dataclass
class _PowerFault(FaultType):
    family: ClassVar[str] = "power"
    failure_class: ClassVar[FailureClass] = "crash"
    params_model: ClassVar[type[FaultParams]] = PowerParams
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("node",)
    # Where the nodes' links go down with them (netns), the survivors see silence: an
    # unreachable peer. Without a fabric (local), the kernel's resets say "crash".
    also_detected_as: ClassVar[tuple[FailureClass, ...]] = ("network",)
    cuts_nodes: ClassVar[bool] = True
    requires: ClassVar[tuple[type, ...]] = (PowerControl, LocalDisk)

    @classmethod
    def param_requires(cls, params: Any) -> list[ParamNeed]:
        if params.duration_s is None:
            return []
        return [ParamNeed(("duration_s",), (PowerReturn,),
                          "leave duration_s out (the nodes stay off until the run ends), or run the job on "
                          "a backend whose nodes it starts itself")]

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        nodes = tuple(self.target.nodes)
        cut = ctx.require(PowerControl).power_off(nodes)
        record: dict[str, Any] = {
            "nodes": list(nodes), "ranks": list(self.target.ranks), "pids": cut.pids,
            "kill_spread_ms": round(cut.spread_s * 1e3, 3),
            "local_data": self.params.get("local_data", "unfsynced"),
        }
        disk = ctx.require(LocalDisk)
        if record["local_data"] == "all":
            record["wiped_bytes"] = {str(n): disk.wipe_local_data(n) for n in nodes}
        else:
            record["unfsynced_dropped"] = {str(n): disk.drop_unfsynced(n) for n in nodes}
        if self.params.get("duration_s") is not None:
            ctx.schedule_revert(self, float(self.params["duration_s"]))
        return record

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        """Power returns: only when it was due back while the job still runs. At the end of
        the run a node whose power would return later stays off (nothing is started during
        teardown); the backend's own teardown removes what its power cut changed."""
        if ctx.stopping or self.params.get("duration_s") is None:
            return
        nodes = record.get("nodes") or list(self.target.nodes)
        for node in nodes:
            ctx.require(PowerReturn).power_on(int(node))
        ctx.emit("power_restored", fault=self.fault_id, nodes=nodes)


@register
@dataclass
class PowerOutage(_PowerFault):
    type_name: ClassVar[str] = "power_outage"
    summary: ClassVar[str] = ("Every node of a power domain loses power at the same instant: all "
                              "their processes die together, their local disks lose what was "
                              "not fsynced (or everything); power may return after duration_s.")
    mechanism: ClassVar[str] = ("one sweep of SIGKILL over every process of the domain's nodes, "
                                "gathered first (netns: their links are taken down before); "
                                "node-local data dropped through the storage layer or removed")
    fidelity: ClassVar[str] = (
        "Stands for a utility transfer, a UPS action or a tripped PDU dropping a power domain: "
        "correlated loss of many nodes and of what only they held. Exercises detection of "
        "many dead peers at once, spares and elastic shrink/grow, and checkpoint placement "
        "across domains. No process gets a signal it could handle; disks are emulated by "
        "the node-local directory.")
    target_keys: ClassVar[tuple[str, ...] | None] = ("power_domain",)


@register
@dataclass
class RackLoss(_PowerFault):
    type_name: ClassVar[str] = "rack_loss"
    summary: ClassVar[str] = ("Every node of a rack goes down at the same instant (its PDU or "
                              "top-of-rack power fails), as power_outage does for a domain.")
    mechanism: ClassVar[str] = PowerOutage.mechanism
    fidelity: ClassVar[str] = (
        "Stands for a rack lost at once: a failed rack PDU, a cooling shutdown, a rack taken "
        "out by maintenance by mistake. Same mechanism as power_outage, on the rack's nodes.")
    target_keys: ClassVar[tuple[str, ...] | None] = ("rack",)
