"""Storage faults that stand for a crash or power loss: data not yet fsynced is lost
(``lose_unfsynced``), a write is torn (``torn_write``), the writer's processes die with the
page cache kept (``process_crash``), at one point of a checkpoint save (``crash_point``).
docs/storage.md has their fidelity.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from chaos.cluster.capabilities import StorageLayer
from chaos.faults.base import (
    FailureClass,
    FaultParams,
    FaultType,
    ParamsContext,
    TargetKind,
    register,
)
from chaos.faults.storage.tiers import Location, Tier, check_storage, mount_controls
from chaos.model.types import MAX_STEPS
from chaos.storage.control import MountControl

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext

__all__ = ["CrashPoint", "LoseUnfsynced", "ProcessCrash", "TornWrite", "save_globs"]


class LoseUnfsyncedParams(FaultParams):
    tier: Tier = "local"
    """The tier whose unfsynced data is lost (the node-local disk, normally)."""


class TornWriteParams(LoseUnfsyncedParams):
    keep_fraction: float | None = Field(None, ge=0.0, le=1.0)
    """Part of each file's unfsynced extent that persists (from its start); null: a seeded random part per file."""


@register
@dataclass
class LoseUnfsynced(FaultType):
    type_name: ClassVar[str] = "lose_unfsynced"
    family: ClassVar[str] = "storage"
    failure_class: ClassVar[FailureClass] = "crash"
    params_model: ClassVar[type[FaultParams]] = LoseUnfsyncedParams
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("node",)
    requires: ClassVar[tuple[type, ...]] = (StorageLayer,)
    summary: ClassVar[str] = ("Crash the node's ranks (power loss) and drop every write on its tier "
                              "that was not fsynced.")
    fidelity: ClassVar[str] = (
        "Stands for a power loss or kernel panic: the page cache is gone, and so is every "
        "write not yet fsynced (as LazyFS does). The node's ranks are SIGKILLed and its "
        "agent restarts them, as a rebooted node would. The layer keeps an undo log of "
        "unfsynced writes per file from mount time and rolls them back; file creation, "
        "rename and unlink are durable at once (ext4 data=ordered after a journal commit).")
    mechanism: ClassVar[str] = ("by the injector: SIGKILL of the node's ranks, then a drop "
                                "command to the FUSE layer, which undoes unfsynced writes")

    @classmethod
    def check_params(cls, params: LoseUnfsyncedParams, context: ParamsContext) -> list[tuple[Location, str]]:
        return check_storage(params, context)

    def torn(self) -> dict[str, Any] | None:
        return None

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        controls = mount_controls(ctx, self)
        killed = [pid for pid in self.target.pids.values() if ctx.cluster.signal_pid(pid, signal.SIGKILL)]
        dropped = 0
        for control in controls:
            dropped += self._after_kill(control)
        return {"pids": killed, "control_dirs": [c.dir for c in controls], "dropped_files_total": dropped}

    def _after_kill(self, control: MountControl) -> int:
        """What the layer does once the ranks are dead; the files it rolled back."""
        return int(control.drop_unfsynced(torn=self.torn()).get("dropped_files", 0))

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        """Nothing to undo: lost data stays lost, the restart is what is measured."""


@register
@dataclass
class TornWrite(LoseUnfsynced):
    type_name: ClassVar[str] = "torn_write"
    params_model: ClassVar[type[FaultParams]] = TornWriteParams
    summary: ClassVar[str] = ("Crash the node's ranks; of each file's unfsynced writes only a first part "
                              "persists (a torn write).")
    fidelity: ClassVar[str] = (
        "Stands for a crash in the middle of write-back: part of what was written reached the "
        "media, the rest did not (a torn page, a half-written file). The node's ranks are "
        "SIGKILLed; the layer cuts each file's unfsynced extent at keep_fraction (seeded when "
        "null): bytes before the cut persist, bytes after it revert to what was fsynced. The "
        "cut is per file, not per sector; metadata is durable at once, as for lose_unfsynced.")
    mechanism: ClassVar[str] = ("by the injector: SIGKILL of the node's ranks, then a torn drop command "
                                "to the FUSE layer")

    def torn(self) -> dict[str, Any] | None:
        return {"fraction": self.params.get("keep_fraction"), "seed": self.seed}


@register
@dataclass
class ProcessCrash(LoseUnfsynced):
    type_name: ClassVar[str] = "process_crash"
    summary: ClassVar[str] = ("Crash the node's ranks (SIGKILL) and keep every write they made: the "
                              "process dies, the node and its page cache do not.")
    fidelity: ClassVar[str] = (
        "Stands for a process crash: an OOM kill, a segfault, a preemption's SIGKILL, a "
        "watchdog's kill. The node's ranks are SIGKILLed and its agent restarts them; every "
        "write the layer passed on stays, fsynced or not (the page cache survives), so what "
        "it tests is the order and the completeness of a save's file operations, not their "
        "durability (lose_unfsynced, torn_write). At an armed crash_point the layer keeps "
        "its crash image and thaws.")
    mechanism: ClassVar[str] = ("by the injector: SIGKILL of the node's ranks, then a release command "
                                "to the FUSE layer, which drops nothing")

    def _after_kill(self, control: MountControl) -> int:
        control.process_crashed()
        return 0


class CrashPointParams(FaultParams):
    tier: Tier = "shared"
    """The tier whose save is watched (the durable one, normally)."""
    save_step: int = Field(ge=1, le=MAX_STEPS)
    """The step of the save whose durability boundaries are counted: the paths that carry it as step-NNNNNNNN (the harness's folders), step-N (a script's step-20.pt) or _stepN (DeepSpeed's global_step20 tag)."""
    after: int = Field(-1, ge=-1, le=10_000)
    """Freeze the layer after this many boundaries of that save completed (0: before the first); -1: only report each boundary (storage_boundary events), the trace a sweep enumerates."""
    model: Literal["power", "process"] = "power"
    """Where the points are: power, the durability boundaries (after); process, every file operation of the save (op, when)."""
    op: int = Field(-1, ge=-1, le=10_000)
    """Process model: the file operation of the save (1: its first, look-back included) to freeze at; -1: freeze at none."""
    when: Literal["before", "after", "torn"] = "before"
    """Process model: freeze right before or right after that operation, or torn: half-way through the writes of the file it closes (path, cut)."""
    path: str | None = None
    """A torn point's file, relative to the tier (as the trace reported its close)."""
    opened: int = Field(0, ge=0, le=10_000)
    """A torn point's file as the file operation that created it (its seq; 0: by path): a temporary name drawn at random differs from run to run, the operation does not."""
    cut: int = Field(0, ge=0, le=1 << 50)
    """A torn point's byte: the write crossing it lands up to it, then the layer freezes."""
    prev_step: int | None = Field(None, ge=0, le=MAX_STEPS)
    """Process model: the previous save's step, whose last file operation the look-back starts after (0: the first save, from the mount); null: no look-back."""
    trace_ops: bool = False
    """With after and op -1: report each file operation of the save too (storage_op events), for a process sweep."""


def save_globs(step: int) -> list[str]:
    """The paths of the save of ``step``: the harness's ``step-00000020`` folder (and its
    ``.tmp-step-00000020-*``), a script's ``step-20.pt`` or ``step-20/`` (not ``step-200``),
    DeepSpeed's ``global_step20/`` tag folder (not ``global_step200``), the HF Trainer's
    ``checkpoint-20/`` folder, Lightning's default ``epoch=1-step=20.ckpt``."""
    return [f"*step-{step:08d}*", *(f"*{mark}{step}{tail}" for mark in ("step-", "_step", "checkpoint-", "step=")
                                    for tail in ("", "[!0-9]*"))]


@register
@dataclass
class CrashPoint(FaultType):
    type_name: ClassVar[str] = "crash_point"
    family: ClassVar[str] = "storage"
    failure_class: ClassVar[FailureClass] = "storage"
    params_model: ClassVar[type[FaultParams]] = CrashPointParams
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("node",)
    requires: ClassVar[tuple[type, ...]] = (StorageLayer,)
    summary: ClassVar[str] = ("Arm the fault layer at one point of one save, a durability boundary (fsync, "
                              "rename) or a file operation: it freezes there and reports crash_point "
                              "(trainchaos run --crash-points).")
    fidelity: ClassVar[str] = (
        "Not a failure by itself: it stops the storage exactly at one durability boundary, so "
        "that a lose_unfsynced triggered by its crash_point event loses power there, as ALICE "
        "and LazyFS place a crash at each persistence point. Boundaries are counted as the "
        "layer sees them (each fsync of a file or directory, each rename); metadata is "
        "durable at once, as for lose_unfsynced, so orderings a stricter file system would "
        "also expose (an unfsynced rename) are not explored. In the process model it stops "
        "before or after one file operation of the save (create, close, rename, unlink, "
        "mkdir, fsync...) or half-way through one file's writes, for a process_crash there; "
        "the operations are those the kernel passes to the layer (a library's buffering "
        "decides how a file's bytes are split into writes, not the script).")
    mechanism: ClassVar[str] = "by the injector: a crash point armed in the FUSE fault layer's control file"

    @classmethod
    def check_params(cls, params: CrashPointParams, context: ParamsContext) -> list[tuple[Location, str]]:
        return check_storage(params, context)

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        from chaos.runfiles.rundir import RunDir

        rundir = RunDir.of(ctx.run_dir)
        step = int(self.params["save_step"])
        prev = self.params.get("prev_step")
        spec = {"save": save_globs(step), "after": int(self.params.get("after", -1)),
                "model": self.params.get("model", "power"), "op": int(self.params.get("op", -1)),
                "when": self.params.get("when", "before"), "path": self.params.get("path"),
                "cut": int(self.params.get("cut") or 0), "opened": int(self.params.get("opened") or 0),
                "trace_ops": bool(self.params.get("trace_ops")),
                "prev": None if prev is None else save_globs(int(prev)) if prev else [],
                "events_dir": rundir.events, "image_dir": rundir.crash_image}
        controls = mount_controls(ctx, self)
        for control in controls:
            control.arm_crash_point(spec)
        return {"control_dirs": [c.dir for c in controls], "crash_point": spec}

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        """Nothing to undo: a crash point that never froze is disarmed with its mount."""
