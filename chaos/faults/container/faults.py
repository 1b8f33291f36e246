"""Container faults on the ``docker`` backend: a freeze through the cgroup freezer, a node cut
off its network, CPU and memory pressure through live limits.

``kill_rank`` (a signal sent inside the rank's container), ``kill_node`` (``docker kill``)
and ``power_outage`` (every container of the domain killed in one concurrent sweep) work
on this backend unchanged; the types here are what only an engine can do, asked of the
backend as its ``ContainerHost`` capability. Every engine call goes through the backend's
label check: a container without the run's label is never touched. Each record names
backend, host, container and run, so ``trainchaos cleanup`` can revert from the journal
alone (the backend's classmethods, no run needed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field, model_validator

from chaos.cluster import backend_of
from chaos.cluster.capabilities import ContainerHost, PacketFilter
from chaos.errors import ToolError
from chaos.faults.base import FailureClass, FaultParams, FaultType, TargetKind, register
from chaos.model.types import MAX_SECONDS

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext

__all__ = ["ContainerDisconnect", "ContainerLimits", "ContainerPacketLoss", "ContainerPause"]

class PauseParams(FaultParams):
    duration_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Seconds frozen before ``docker unpause``; null: frozen until the run ends (the node is
    then lost to the job)."""


class DisconnectParams(FaultParams):
    duration_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Seconds until the container is connected again (same address); null: until the run
    ends (the node is then lost to the job)."""


class PacketLossParams(FaultParams):
    percent: float = Field(gt=0, le=100)
    """Share of the packets the container receives that are dropped (0.01 steps)."""
    duration_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Seconds it lasts; null until the run ends."""


class LimitsParams(FaultParams):
    cpus: float | None = Field(None, gt=0, le=1024)
    """New CPU limit of each target container (``docker update --cpus``); null: unchanged."""
    memory_mb: int | None = Field(None, ge=6, le=2**30)
    """New memory limit in MiB (``--memory``, swap included); a job that then needs more is
    OOM-killed by the kernel inside the container. Null: unchanged."""
    duration_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Seconds the limits last before the old ones are restored; null: until the run ends."""

    @model_validator(mode="after")
    def _something_changes(self) -> LimitsParams:
        if self.cpus is None and self.memory_mb is None:
            raise ValueError("set cpus, memory_mb or both: a limits fault that changes nothing "
                             "would be measured as a fault")
        return self


@dataclass
class _ContainerFault(FaultType):
    family: ClassVar[str] = "container"
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("node",)
    requires: ClassVar[tuple[type, ...]] = (ContainerHost,)

    def _targets(self, ctx: InjectionContext) -> list[tuple[int, Any]]:
        host = ctx.require(ContainerHost)
        return [(node, host.container(node)) for node in self.target.nodes]

    def _base_record(self, ctx: InjectionContext, nodes: list[int]) -> dict[str, Any]:
        host = ctx.require(ContainerHost)
        return {"backend": ctx.cluster.name, "run_id": ctx.cluster.spec.run_id, "nodes": nodes,
                "containers": [[host.host_of(n), host.container_name(n)] for n in nodes]}

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        self.revert_record(record)


@register
@dataclass
class ContainerPause(_ContainerFault):
    type_name: ClassVar[str] = "container_pause"
    failure_class: ClassVar[FailureClass] = "hang"
    summary: ClassVar[str] = "Freeze whole node containers (docker pause) for a duration or until the run ends."
    mechanism: ClassVar[str] = "docker pause: the cgroup freezer stops every thread of the container at once"
    fidelity: ClassVar[str] = (
        "Stands for a node that stops without dying: a host stalled in the kernel, a hypervisor "
        "pause, a machine stuck in firmware. Unlike SIGSTOP of one process, every thread of "
        "every process (agent, ranks, their helper threads) freezes at the same instant and "
        "no process can notice; sockets stay open, so peers see silence, not a reset. "
        "Exercises watchdogs and collective timeouts.")
    params_model: ClassVar[type[FaultParams]] = PauseParams
    cuts_nodes: ClassVar[bool] = True

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        paused: list[int] = []
        try:
            for node, cont in self._targets(ctx):
                cont.pause()
                paused.append(node)
        except Exception:
            # Half applied: only what inject returns is journaled, so undo it here.
            self.revert_record(self._base_record(ctx, paused))
            raise
        if self.params.get("duration_s") is not None:
            ctx.schedule_revert(self, float(self.params["duration_s"]))
        else:
            for node in paused:
                ctx.require(ContainerHost).mark_lost(node)
        return self._base_record(ctx, paused)

    @classmethod
    def revert_record(cls, record: dict[str, Any]) -> None:
        if not record.get("containers"):
            return  # nothing touched (cleanup of an ``apply`` whose inject never returned)
        engine = _engine(record)
        for host, name in record.get("containers", []):
            try:
                cont = engine.find_container(host, name, record["run_id"])
            except ToolError:
                continue  # gone with the run: nothing frozen is left
            if cont.status == "paused":
                cont.unpause()


@register
@dataclass
class ContainerDisconnect(_ContainerFault):
    type_name: ClassVar[str] = "container_disconnect"
    failure_class: ClassVar[FailureClass] = "network"
    summary: ClassVar[str] = "Cut node containers off the run's network (docker network disconnect)."
    mechanism: ClassVar[str] = ("docker network disconnect from the run's bridge (the interface "
                                "disappears); reconnected with the same address on revert")
    fidelity: ClassVar[str] = (
        "Stands for a node losing its NIC or its switch port: every connection of the node "
        "fails at once, the rendezvous store included, while its processes run on. Exercises "
        "collective timeouts, keep-alive based membership and a job going on without the "
        "node. The interface vanishes (sends fail with ENETUNREACH), which is harsher than a "
        "silent blackhole; a partition inside a fabric is the netns backend's partition.")
    params_model: ClassVar[type[FaultParams]] = DisconnectParams
    cuts_nodes: ClassVar[bool] = True

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        cluster = ctx.require(ContainerHost)
        targets = self._targets(ctx)
        record = {**self._base_record(ctx, []), "network": cluster.network_name(),
                  "addresses": {str(n): ctx.cluster.node_address(n) for n, _ in targets}}
        try:
            for node, cont in targets:
                net = type(cluster).run_network(cluster.host_of(node), cluster.network_name(), record["run_id"])
                record["nodes"].append(node)
                record["containers"].append([cluster.host_of(node), cont.name])
                net.disconnect(cont, force=True)
        except Exception:
            self.revert_record(record)  # half applied: reconnect what was cut
            raise
        cut = record["nodes"]
        if self.params.get("duration_s") is not None:
            ctx.schedule_revert(self, float(self.params["duration_s"]))
        else:
            for node in cut:
                cluster.mark_lost(node)
        return record

    @classmethod
    def revert_record(cls, record: dict[str, Any]) -> None:
        if not record.get("containers"):
            return  # nothing touched (cleanup of an ``apply`` whose inject never returned)
        engine = _engine(record)
        for (host, name), node in zip(record.get("containers", []), record.get("nodes", []), strict=False):
            try:
                cont = engine.find_container(host, name, record["run_id"])
            except ToolError:
                continue
            cont.reload()
            nets = cont.attrs.get("NetworkSettings", {}).get("Networks", {})
            if record["network"] in nets or cont.status not in ("running", "paused", "created"):
                continue
            net = engine.run_network(host, record["network"], record["run_id"])
            net.connect(cont, ipv4_address=record.get("addresses", {}).get(str(node)))


@register
@dataclass
class ContainerLimits(_ContainerFault):
    type_name: ClassVar[str] = "container_limits"
    failure_class: ClassVar[FailureClass] = "slow"
    summary: ClassVar[str] = ("Change node containers' CPU and memory limits live (docker update): "
                              "a noisy neighbour, or an OOM kill.")
    mechanism: ClassVar[str] = "docker update of the container's cgroup limits (CPU quota, memory) while it runs"
    fidelity: ClassVar[str] = (
        "Stands for resource pressure on a host: a noisy neighbour taking CPU (fewer cycles "
        "for the ranks: a straggler node), or memory pressure that ends in the kernel's OOM "
        "killer. The limits are the kernel's own (CFS quota, memory cgroup); the job is not "
        "told. Exercises straggler tolerance and OOM-kill handling (a rank dies by SIGKILL).")
    params_model: ClassVar[type[FaultParams]] = LimitsParams

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        before: dict[str, dict[str, int]] = {}
        targets = self._targets(ctx)
        for node, cont in targets:
            cont.reload()
            hc = cont.attrs.get("HostConfig", {})
            before[str(node)] = {"nano_cpus": int(hc.get("NanoCpus") or 0), "cpu_quota": int(hc.get("CpuQuota") or 0),
                                 "cpu_period": int(hc.get("CpuPeriod") or 0),
                                 "mem_limit": int(hc.get("Memory") or 0), "memswap_limit": int(hc.get("MemorySwap") or 0)}
        record = {**self._base_record(ctx, [n for n, _ in targets]), "before": before,
                  "cpus": self.params.get("cpus"), "memory_mb": self.params.get("memory_mb")}
        try:
            self._apply_limits(targets)
        except Exception:
            self.revert_record(record)  # half applied: restore every target's limits
            raise
        if self.params.get("duration_s") is not None:
            ctx.schedule_revert(self, float(self.params["duration_s"]))
        return record

    def _apply_limits(self, targets: list[tuple[int, Any]]) -> None:
        for _node, cont in targets:
            update: dict[str, Any] = {}
            if self.params.get("cpus") is not None:
                # CFS quota over a 100 ms period: the same limit `docker update --cpus` sets.
                update.update(cpu_period=100_000, cpu_quota=int(float(self.params["cpus"]) * 100_000))
            if self.params.get("memory_mb") is not None:
                mem = int(self.params["memory_mb"]) * 1024 * 1024
                update.update(mem_limit=mem, memswap_limit=mem)
            cont.update(**update)

    @classmethod
    def revert_record(cls, record: dict[str, Any]) -> None:
        if not record.get("containers"):
            return  # nothing touched (cleanup of an ``apply`` whose inject never returned)
        engine = _engine(record)
        failed: list[str] = []
        for (host, name), node in zip(record.get("containers", []), record.get("nodes", []), strict=False):
            try:
                cont = engine.find_container(host, name, record["run_id"])
            except ToolError:
                continue
            cont.reload()
            if cont.status not in ("running", "paused"):
                continue
            old = record.get("before", {}).get(str(node), {})
            # CPU and memory separately: one the engine refuses still lets the other revert.
            errors = []
            if record.get("cpus") is not None:
                # A quota of -1 lifts the CFS limit; a NanoCpus limit set at create is
                # expressed back as its quota over a 100 ms period.
                nano = old.get("nano_cpus", 0)
                errors += _update(cont, cpu_period=100_000 if nano or not old.get("cpu_period") else old["cpu_period"],
                                  cpu_quota=nano // 10_000 if nano else old.get("cpu_quota", 0) or -1)
            if record.get("memory_mb") is not None:
                # The engine cannot remove a memory limit once set (0 means "unchanged" and
                # -1 is refused): no limit before is restored as the host's whole memory,
                # which limits nothing. Memory and memory+swap are raised together first (the
                # kernel refuses a memory limit above the memory+swap one), then the swap
                # limit is lifted again if there was none.
                mem = old.get("mem_limit", 0) or engine.engine_memory(host)
                swap = old.get("memswap_limit", 0)
                errors += _update(cont, mem_limit=mem, memswap_limit=max(mem, swap))
                if swap <= 0 and not errors:
                    errors += _update(cont, mem_limit=mem, memswap_limit=-1)
            failed += [f"{name}: {e}" for e in errors]
        if failed:
            raise ToolError(f"limits not restored: {'; '.join(failed)}")


def _update(cont: Any, **limits: int) -> list[str]:
    try:
        cont.update(**limits)
        return []
    except Exception as exc:
        return [f"{sorted(limits)}: {str(exc)[:200]}"]


@register
@dataclass
class ContainerPacketLoss(_ContainerFault):
    type_name: ClassVar[str] = "container_packet_loss"
    failure_class: ClassVar[FailureClass] = "network"
    summary: ClassVar[str] = "Drop a share of the packets node containers receive (nftables in their network namespace)."
    mechanism: ClassVar[str] = ("nftables numgen random drops on input, inside the container's own network "
                                "namespace (reached through its init's pid; local engines only)")
    fidelity: ClassVar[str] = (
        "Stands for a degraded link or NIC: a fraction of the node's incoming packets is lost, "
        "the sender's kernel does not know (TCP retransmits, collectives slow down or time "
        "out). Loopback inside the container is untouched. Drops are uniform and independent, "
        "not the bursts of a real flapping optic.")
    params_model: ClassVar[type[FaultParams]] = PacketLossParams
    requires: ClassVar[tuple[type, ...]] = (ContainerHost, PacketFilter)

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        import shutil

        from chaos.faults.network.fabric import attached_name
        from chaos.net import nft

        cluster = ctx.require(ContainerHost)
        if shutil.which("nft") is None or shutil.which("ip") is None:
            raise ToolError("container_packet_loss needs nft and ip on the controller (nftables, iproute2)")
        table = nft.table_name(self.fault_id)
        threshold = max(1, round(float(self.params["percent"]) * 100))
        record = {**self._base_record(ctx, []), "table": table, "netns": []}
        targets = self._targets(ctx)
        # Every target's namespace first (the backend refuses a remote engine's): none is
        # touched unless all can be.
        pids = {node: int(ctx.require(PacketFilter).node_netns(node)) for node, _ in targets}
        try:
            for node, cont in targets:
                ns = attached_name(record["run_id"], node, self.fault_id)
                record["nodes"].append(node)
                record["containers"].append([cluster.host_of(node), cont.name])
                record["netns"].append(ns)
                nft.attach_namespace(ns, pids[node])
                # Every packet: a bare drop (numgen's range stops at 9999).
                rule = f"numgen random mod 10000 < {threshold}" if threshold < 10000 else nft.ALL_INPUT
                nft.add_input_drops(ns, table, [rule])
        except Exception:
            # Half applied: the runner only journals what inject returns, so undo it here.
            self.revert_record(record)
            raise
        if self.params.get("duration_s") is not None:
            ctx.schedule_revert(self, float(self.params["duration_s"]))
        return record

    @classmethod
    def revert_record(cls, record: dict[str, Any]) -> None:
        from chaos.net import nft

        for ns in record.get("netns", []):
            if not ns.startswith("tc-"):
                continue
            nft.delete_table(ns, record.get("table", ""))
            # Only the name goes: the namespace itself lives as long as its container.
            nft.forget_namespace(ns)


def _engine(record: dict[str, Any]) -> type[ContainerHost]:
    """The backend class whose engine holds the record's containers."""
    return backend_of(record, ContainerHost)
