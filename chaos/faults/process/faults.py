"""Process / GPU faults: rank and node kills, hangs, device errors, stragglers, death mid-save."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from chaos.faults.base import FailureClass, FaultParams, FaultType, TargetKind, register
from chaos.model.types import MAX_SECONDS, MAX_STEPS

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext

__all__ = ["CrashDuringCheckpoint", "CudaOom", "DeviceError", "HangRank", "KillNode", "KillRank", "Straggler"]

_Signal = Literal["SIGKILL", "SIGTERM", "SIGINT", "SIGABRT", "SIGSEGV", "SIGBUS"]


class KillRankParams(FaultParams):
    signal: _Signal = "SIGKILL"
    """Signal sent to the rank's process."""


class KillNodeParams(FaultParams):
    signal: _Signal = "SIGKILL"
    """Signal sent to every process of the node."""


class HangRankParams(FaultParams):
    duration_s: float | None = Field(None, ge=0, le=MAX_SECONDS)
    """Seconds frozen before SIGCONT; null freezes until the run ends."""


class DeviceErrorParams(FaultParams):
    xid: int = Field(79, ge=1, le=999)
    """Xid code named in the error message."""
    on_device: bool = False
    """false: the probe raises the error on the host (any device). true: a real kernel faults on the rank's GPU (a device-side assert): its CUDA context is broken for good and the process must die; needs a workload on device cuda."""


class CudaOomParams(FaultParams):
    gib: float | None = Field(None, gt=0, le=4096)
    """GiB allocated on the rank's GPU and kept until the process ends; null: more than the device has, so the allocation itself fails at the step."""


class StragglerParams(FaultParams):
    factor: float = Field(2.0, ge=1.0, le=100.0)
    """Step time multiplier."""
    steps: int | None = Field(None, ge=1, le=MAX_STEPS)
    """Steps it lasts; null until the end."""


def _signal_pids(pids: list[int], sig: int) -> list[int]:
    """Signal each pid that still exists; returns those signalled."""
    hit = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            hit.append(pid)
        except ProcessLookupError:
            continue
    return hit


def _signal_target_ranks(ctx: InjectionContext, fault: FaultType, sig: int) -> list[int]:
    """Signal the live worker of each target rank (resolved at injection time): the process
    torchrun started for the rank, never one of its children."""
    return [pid for pid in fault.target.pids.values() if ctx.cluster.signal_pid(pid, sig)]


@register
@dataclass
class KillRank(FaultType):
    type_name: ClassVar[str] = "kill_rank"
    family: ClassVar[str] = "process"
    failure_class: ClassVar[FailureClass] = "crash"
    # Llama 3's interruption classes (chaos.scale.llama3): a software bug or a broken
    # dependency crashes a process; a faulty GPU too, when the process dies at once.
    stands_for: ClassVar[tuple[str, ...]] = ("software_bug", "dependency")
    also_stands_for: ClassVar[tuple[str, ...]] = ("faulty_gpu",)
    example_of_class: ClassVar[bool] = True
    summary: ClassVar[str] = "Kill the worker process of one or more ranks with a signal."
    fidelity: ClassVar[str] = (
        "Stands for a rank dying abruptly (Xid 79 GPU off the bus, OOM kill, segfault, host "
        "kernel panic of one process). Exercises peer failure detection in collectives, the "
        "elastic agent's restart and checkpoint resume. Does not prove anything about GPU "
        "physics or driver recovery: the process dies, the device does not."
    )
    params_model: ClassVar[type[FaultParams]] = KillRankParams
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("rank",)

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        sig = getattr(signal, self.params.get("signal", "SIGKILL"))
        return {"pids": _signal_target_ranks(ctx, self, sig), "signal": self.params.get("signal", "SIGKILL")}

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        """A kill has nothing to undo: the training job's own restart is what is measured."""


@register
@dataclass
class KillNode(FaultType):
    type_name: ClassVar[str] = "kill_node"
    family: ClassVar[str] = "process"
    failure_class: ClassVar[FailureClass] = "crash"
    # Llama 3's host-side hardware takes the whole node down.
    stands_for: ClassVar[tuple[str, ...]] = (
        "host_maintenance", "ssd", "power_supply", "server_chassis", "io_expansion_board", "cpu",
        "system_memory")
    summary: ClassVar[str] = "Kill a whole simulated node: its torchrun agent and all of its ranks."
    fidelity: ClassVar[str] = (
        "Stands for a host going down (kernel panic, hardware reset, preemption without "
        "notice). Exercises detection by surviving nodes, elastic re-rendezvous with fewer "
        "nodes (or a wait for min nodes) and resume. The node's local disk survives here; "
        "use a power fault for node-local data loss."
    )
    params_model: ClassVar[type[FaultParams]] = KillNodeParams
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("node",)

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        sig = getattr(signal, self.params.get("signal", "SIGKILL"))
        killed = []
        for node in self.target.nodes:
            killed.extend(ctx.cluster.signal_node(node, sig))
        return {"pids": killed, "signal": self.params.get("signal", "SIGKILL")}

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        """Nothing to undo: a dead node stays dead, as in a real outage."""


@register
@dataclass
class HangRank(FaultType):
    type_name: ClassVar[str] = "hang_rank"
    family: ClassVar[str] = "process"
    failure_class: ClassVar[FailureClass] = "hang"
    # Llama 3: a switch, cable or NIC failure and an NCCL watchdog timeout stall the
    # collectives until a watchdog fires.
    stands_for: ClassVar[tuple[str, ...]] = ("network_switch_cable", "nic", "nccl_watchdog_timeouts")
    example_of_class: ClassVar[bool] = True
    summary: ClassVar[str] = "Freeze a rank (SIGSTOP) for a duration or until the run ends."
    fidelity: ClassVar[str] = (
        "Stands for a rank that stops making progress without dying: a GPU hang, a deadlocked "
        "kernel, a process stuck in uninterruptible IO. Exercises watchdogs and collective "
        "timeouts: without them the job blocks forever. Does not model a hang inside NCCL "
        "with a live host thread: the whole process is frozen."
    )
    params_model: ClassVar[type[FaultParams]] = HangRankParams
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("rank",)

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        stopped = _signal_target_ranks(ctx, self, signal.SIGSTOP)
        if self.params.get("duration_s") is not None:
            ctx.schedule_revert(self, float(self.params["duration_s"]))
        return {"stopped_pids": stopped}

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        self.revert_record(record)

    @classmethod
    def revert_record(cls, record: dict[str, Any]) -> None:
        _signal_pids(record.get("stopped_pids", []), signal.SIGCONT)  # skips pids already gone


@dataclass
class _ProbeFault(FaultType):
    """Delivered in-process by the probe: lands exactly at the planned step."""

    in_process: ClassVar[bool] = True
    probe_action: ClassVar[str]
    probe_point: ClassVar[str] = "step_end"

    def probe_actions(self) -> list[dict[str, Any]]:
        return [{"action": self.probe_action, "point": self.probe_point, "params": dict(self.params)}]

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        """The probe injects and reports ``fault_injected`` itself."""
        return {"mechanism": "probe"}

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        """In-process faults end with the process that took them."""


@register
@dataclass
class DeviceError(_ProbeFault):
    type_name: ClassVar[str] = "device_error"
    family: ClassVar[str] = "process"
    failure_class: ClassVar[FailureClass] = "device"
    # Llama 3: a GPU that faults or loses memory surfaces in PyTorch as a CUDA error in the rank.
    stands_for: ClassVar[tuple[str, ...]] = (
        "faulty_gpu", "gpu_hbm3_memory", "gpu_sram_memory", "gpu_system_processor",
        "gpu_thermal_interface_sensor")
    example_of_class: ClassVar[bool] = True
    summary: ClassVar[str] = "At step N the rank fails the way a CUDA/Xid error surfaces in PyTorch."
    fidelity: ClassVar[str] = (
        "Stands for an uncorrectable device error (Xid 48/79, illegal memory access) that "
        "surfaces as a RuntimeError from the next CUDA call. Exercises the job's error "
        "classification, its report of the failing device, and restart. On CPU no device is "
        "harmed: the exception is raised by the probe at the exact step."
    )
    params_model: ClassVar[type[FaultParams]] = DeviceErrorParams
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("rank",)
    probe_action: ClassVar[str] = "device_error"

    @classmethod
    def device_needed(cls, params: dict[str, Any]) -> str | None:
        return "on_device: true faults a real kernel on the rank's GPU" if params.get("on_device") else None


@register
@dataclass
class CudaOom(_ProbeFault):
    type_name: ClassVar[str] = "cuda_oom"
    family: ClassVar[str] = "process"
    failure_class: ClassVar[FailureClass] = "oom"
    summary: ClassVar[str] = "At step N the rank's GPU runs out of memory (a real allocation torch's allocator refuses)."
    mechanism: ClassVar[str] = ("in-process, by the probe at the exact step: an allocation on the rank's "
                                "CUDA device through PyTorch's caching allocator")
    fidelity: ClassVar[str] = (
        "Stands for a device out of memory: a batch, a sequence or a fragmentation the GPU "
        "cannot hold. The allocation is real (torch.cuda.OutOfMemoryError from the caching "
        "allocator, the device untouched otherwise); exercises the job's attribution of it "
        "as oom, not a crash or a device fault, and its restart. It lands at the step's "
        "fault point, not inside one of the model's own kernels unless gib leaves too "
        "little for them; it does not model the host's OOM killer (memory family). Needs "
        "a workload on device cuda.")
    params_model: ClassVar[type[FaultParams]] = CudaOomParams
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("rank",)
    probe_action: ClassVar[str] = "device_alloc"

    @classmethod
    def device_needed(cls, params: dict[str, Any]) -> str | None:
        return "it allocates on the rank's GPU"


@register
@dataclass
class Straggler(_ProbeFault):
    type_name: ClassVar[str] = "straggler"
    family: ClassVar[str] = "process"
    failure_class: ClassVar[FailureClass] = "slow"
    summary: ClassVar[str] = "Slow a rank down by a factor (the probe stretches each of its steps)."
    fidelity: ClassVar[str] = (
        "Stands for a slow rank: thermal throttling, a degraded GPU, a noisy neighbour. "
        "Exercises straggler detection and shows the cost of synchronous training (every "
        "rank waits). The delay is added on the host after each step, not inside kernels."
    )
    params_model: ClassVar[type[FaultParams]] = StragglerParams
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("rank",)
    probe_action: ClassVar[str] = "slowdown"


@register
@dataclass
class CrashDuringCheckpoint(_ProbeFault):
    type_name: ClassVar[str] = "crash_during_checkpoint"
    family: ClassVar[str] = "process"
    failure_class: ClassVar[FailureClass] = "crash"
    # Llama 3's software bug: the same restart path as a crash anywhere else.
    also_stands_for: ClassVar[tuple[str, ...]] = ("software_bug",)
    summary: ClassVar[str] = (
        "The rank that writes checkpoints dies half-way through writing the first one at or "
        "after step N, leaving a partial file."
    )
    fidelity: ClassVar[str] = (
        "Stands for a host dying while persisting a checkpoint. Exercises atomic checkpoint "
        "writes and verified fallback on load: the partial file must never be loaded. The "
        "process exits at once (no handlers run), like a kill; the disk itself is healthy."
    )
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("rank",)
    probe_action: ClassVar[str] = "exit"
    probe_point: ClassVar[str] = "ckpt_write"
