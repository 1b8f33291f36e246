"""Storage faults: stalls, slowness, errors, a full disk, corruption in the IO path and lost
unfsynced data, applied by the FUSE fault layer (``chaos.storage``) mounted over the
harness's checkpoint tiers. docs/storage.md has the design and each type's fidelity.

Every type but ``lose_unfsynced`` adds one rule to the layer of its tier (``shared``: the
durable checkpoint directory every node sees; ``local``: the node-local fast tier of the
target's nodes) and removes it on revert: after ``duration_s``, or at the end of the run.
A rank target hits only operations of that rank's processes (its DataLoader workers
included); a node target those of the node's processes; the layer tells them apart by the
calling process's environment.
"""

from __future__ import annotations

import errno as _errno
import os
import re
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator

from chaos.cluster.capabilities import StorageLayer
from chaos.errors import ToolError
from chaos.faults.base import (
    FaultParams,
    FaultType,
    ParamsContext,
    register,
)
from chaos.schema.types import MAX_BYTES, MAX_SECONDS, MAX_STEPS
from chaos.storage.control import MountControl
from chaos.storage.latency import METADATA_OPS
from chaos.storage.mounts import tier_label
from chaos.storage.rules import errno_number

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext

__all__ = ["CrashPoint", "DiskFull", "IoCorrupt", "IoError", "IoSlow", "IoStall", "LoseUnfsynced",
           "TornWrite"]

Tier = Literal["shared", "local", "data"]
Op = Literal["open", "create", "read", "write", "fsync", "flush", "rename", "unlink", "mkdir",
             "rmdir", "readdir", "getattr", "truncate", "statfs"]
Location = tuple[str | int, ...]


class _StorageParams(FaultParams):
    tier: Tier = "shared"
    """The tier whose mount gets the rule: shared (checkpoint.dir, every node), local (each node's fast tier; needs checkpoint.local_every_steps > 0) or data (the directory of the data file; needs data_stream and a relative data path)."""
    path: str = Field("*", min_length=1)
    """Glob on the path relative to the tier's mount (fnmatch: * also crosses /), e.g. `step-00000040/state.pt` or `step-*/state.pt` (step folders have 8 digits); absolute paths and `..` are refused. Not checkpoint_bitrot's path, which is relative to the run's directory."""
    probability: float = Field(1.0, ge=0.0, le=1.0)
    """Chance that each matching operation is hit (the fault's own `probability` decides whether it fires at all)."""
    duration_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Seconds the rule stays; null: until the run ends."""


class IoStallParams(_StorageParams):
    ops: list[Op] = Field(default_factory=lambda: ["write", "fsync", "create", "rename", "read", "open"], min_length=1)
    """Operations that block (until the stall ends)."""


class IoSlowParams(_StorageParams):
    ops: list[Op] = Field(default_factory=lambda: ["read", "write", "fsync"], min_length=1)
    """Operations slowed."""
    latency_ms: float = Field(0.0, ge=0, le=MAX_SECONDS * 1000)
    """Latency added to every matching operation, ms: the scale of its ``distribution`` (of
    the data operations only when ``metadata_latency_ms`` is set)."""
    distribution: Literal["fixed", "uniform", "lognormal", "pareto"] = "fixed"
    """How each operation's latency is drawn around its scale (seeded per fault: a repeat of
    the plan draws the same): fixed: the scale; uniform: its mean, within +-spread; lognormal:
    its median (a long tail); pareto: its minimum (a heavy tail, as object stores and metadata
    servers have)."""
    metadata_latency_ms: float | None = Field(None, ge=0, le=MAX_SECONDS * 1000)
    """The scale for metadata operations (open, create, rename, unlink, mkdir, rmdir, readdir,
    getattr, statfs), drawn from the same distribution; ``latency_ms`` is then the data
    operations' (read, write, fsync, flush, truncate). Null: one scale for both."""
    spread: float = Field(0.5, ge=0, le=1)
    """uniform: half the range, as a share of the scale (0.5: 0.5x to 1.5x)."""
    sigma: float = Field(0.5, gt=0, le=5)
    """lognormal: the standard deviation of the latency's logarithm (1.0: p99 about 10x the median)."""
    alpha: float = Field(2.0, gt=0, le=100)
    """pareto: the tail index (smaller is heavier: <= 2 infinite variance, <= 1 infinite mean)."""
    max_ms: float | None = Field(None, gt=0, le=MAX_SECONDS * 1000)
    """A cap on each drawn latency, ms (a client timeout and retry); null: none."""
    bandwidth_mbps: float = Field(0.0, ge=0, le=10**7)
    """Cap on the bytes of reads and writes, in MB/s (0: no cap)."""


class IoErrorParams(_StorageParams):
    ops: list[Op] = Field(default_factory=lambda: ["write"], min_length=1)
    """Operations that fail."""
    errno: str = "EIO"
    """The error returned, by name (EIO, ENOSPC, EROFS, EDQUOT, ETIMEDOUT, EACCES...) or by
    number (5 is read as EIO)."""

    @field_validator("errno", mode="before")
    @classmethod
    def _errno_by_number(cls, value: Any) -> Any:
        return _errno_name(value)


def _errno_name(value: Any) -> Any:
    """``5`` -> ``"EIO"``: an errno given by number is read as its name (a number the
    platform does not know is refused with the names to use)."""
    if isinstance(value, int) and not isinstance(value, bool):
        name = _errno.errorcode.get(value)
        if name is None:
            raise ValueError(f"{value} is not an errno number of this platform; give a name: "
                             "EIO (5), ENOSPC (28), EROFS (30), EDQUOT, ETIMEDOUT, EACCES (13)...")
        return name
    return value


class DiskFullParams(_StorageParams):
    bytes_free: int = Field(0, ge=0, le=MAX_BYTES)
    """Bytes that can still be written; every write past them fails with ENOSPC."""


class IoCorruptParams(_StorageParams):
    ops: list[Literal["read", "write"]] = Field(default_factory=lambda: ["read"], min_length=1)
    """Whether bits flip in data read, written, or both."""
    bits: int = Field(1, ge=1, le=64)
    """Bits flipped in each hit operation's data (seeded positions)."""


class LoseUnfsyncedParams(FaultParams):
    tier: Tier = "local"
    """The tier whose unfsynced data is lost (the node-local disk, normally)."""


class TornWriteParams(LoseUnfsyncedParams):
    keep_fraction: float | None = Field(None, ge=0.0, le=1.0)
    """Part of each file's unfsynced extent that persists (from its start); null: a seeded random part per file."""


_STEP_DIR = re.compile(r"(?:^|/|\*)step-(\d+)(?=/|$)")
"""A checkpoint folder written with its step number (the harness names them step-%08d)."""


def _check_storage(params: FaultParams, context: ParamsContext) -> list[tuple[Location, str]]:
    errors: list[tuple[Location, str]] = []
    path = getattr(params, "path", None)
    if path is not None and (path.startswith("/") or ".." in path.split("/")):
        errors.append((("path",), f"{path!r} leaves the mounted tree: a path filter is a glob "
                                  f"relative to the mount of tier {params.tier!r} (e.g. step-*/state.pt)"))
    if path is not None:
        for digits in _STEP_DIR.findall(path):
            if len(digits) != 8:
                errors.append((("path",), f"{path!r} never matches: checkpoint folders are named "
                               f"step-NNNNNNNN, 8 digits (step {int(digits)}: step-{int(digits):08d}), "
                               f"holding state.pt; e.g. step-{int(digits):08d}/state.pt or "
                               "step-*/state.pt"))
                break
    layout = context.workload.storage() if context.workload is not None else None
    if layout is None:
        errors.append((("tier",), "storage faults need workload.harness: the tiers are the "
                                  "harness's checkpoint directories"))
    elif params.tier == "local" and not layout.node_local_checkpoints:
        errors.append((("tier",), "the workload does not use the local tier (set "
                                  "workload.harness.checkpoint.local_every_steps > 0, or a "
                                  "checkpoint.placement with local or replicated)"))
    elif params.tier == "data" and layout.data_file is None:
        errors.append((("tier",), "the workload does not use a data tier: set workload.harness."
                                  "data_stream: true and data to a path relative to the run "
                                  "(e.g. data/corpus.txt: the run's own copy is mounted, never the "
                                  "original)"))
    return errors


def _mount_controls(ctx: InjectionContext, fault: FaultType) -> list[MountControl]:
    tier = fault.params.get("tier", "shared")
    if tier in ("shared", "data"):
        labels = [tier_label(tier, None)]
    else:
        nodes = set(fault.target.nodes)
        live = ctx.cluster.live_ranks()
        nodes |= {live[r].node for r in fault.target.ranks if r in live}
        labels = [tier_label(tier, n) for n in sorted(nodes)]
    layer = ctx.require(StorageLayer)
    controls = [MountControl(layer.storage_control_dir(label)) for label in labels]
    for control in controls:
        if not control.state().get("ready"):
            raise ToolError(f"no storage fault layer is mounted for tier {tier!r} ({control.dir})")
    return controls


class _RuleFault(FaultType):
    """A fault that is one rule in the layer of its tier."""

    family: ClassVar[str] = "storage"
    target_kinds: ClassVar[tuple[str, ...]] = ("rank", "node")
    requires: ClassVar[tuple[type, ...]] = (StorageLayer,)
    action: ClassVar[str]

    @classmethod
    def check_params(cls, params: FaultParams, context: ParamsContext) -> list[tuple[Location, str]]:
        return _check_storage(params, context)

    def rule(self) -> dict[str, Any]:
        p = self.params
        rule: dict[str, Any] = {"rule_id": self.fault_id, "action": self.action, "paths": [p.get("path", "*")],
                                "ops": list(p.get("ops") or []), "probability": p.get("probability", 1.0),
                                "seed": self.seed}
        if not rule["ops"]:
            del rule["ops"]
        if self.target.nodes:
            rule["nodes"] = list(self.target.nodes)
        elif self.target.ranks:
            rule["ranks"] = list(self.target.ranks)
        return rule

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        controls = _mount_controls(ctx, self)
        rule = self.rule()
        for control in controls:
            control.add_rule(rule)
        if self.params.get("duration_s"):
            ctx.schedule_revert(self, float(self.params["duration_s"]))
        return {"control_dirs": [c.dir for c in controls], "rule": rule}

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        for directory in record.get("control_dirs", []):
            control = MountControl(directory)
            if not control.state().get("ready") or not _daemon_alive(control):
                continue  # the mount is gone, and its rules with it
            control.remove_rule(self.fault_id)

    @classmethod
    def revert_record(cls, record: dict[str, Any]) -> None:
        """Nothing beyond the mount: ``trainchaos cleanup`` unmounts it (resource journal)."""


def _daemon_alive(control: MountControl) -> bool:
    pid = control.state().get("pid")
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    return True


@register
@dataclass
class IoStall(_RuleFault):
    type_name: ClassVar[str] = "io_stall"
    failure_class: ClassVar[str] = "storage"
    action: ClassVar[str] = "stall"
    params_model: ClassVar[type[FaultParams]] = IoStallParams
    summary: ClassVar[str] = "Matching file operations block until the stall ends (duration_s)."
    fidelity: ClassVar[str] = (
        "Stands for a hung NFS/Lustre server, a failing disk retrying, a saturated parallel "
        "file system: calls do not fail, they just do not return. Exercises the save deadline "
        "(the writer reports a storage failure of itself, peers do not see a hang), that an "
        "async save keeps training going, and on the data tier the data-loader deadline. Operations block inside the FUSE daemon; the kernel's "
        "page cache is bypassed for writes, not for cached reads.")
    mechanism: ClassVar[str] = "by the injector: a stall rule in the FUSE fault layer's control file"


@register
@dataclass
class IoSlow(_RuleFault):
    type_name: ClassVar[str] = "io_slow"
    failure_class: ClassVar[str] = "slow"
    action: ClassVar[str] = "slow"
    params_model: ClassVar[type[FaultParams]] = IoSlowParams
    summary: ClassVar[str] = ("Add latency to each matching operation (fixed, or drawn per operation from a "
                              "distribution, per op class) and/or cap its bandwidth.")
    fidelity: ClassVar[str] = (
        "Stands for storage shared with other jobs' checkpoint bursts, a degraded RAID, a "
        "throttled cloud volume, an object store or metadata server with a long latency tail "
        "(distribution: lognormal, pareto; metadata_latency_ms for the metadata path). Exercises "
        "save latency, blocked time and the save deadline. Latency is per FUSE request (the "
        "kernel splits large IO into 128 KiB requests), drawn in the layer, not on the wire.")
    mechanism: ClassVar[str] = "by the injector: a slow rule in the FUSE fault layer's control file"

    @classmethod
    def check_params(cls, params: FaultParams, context: ParamsContext) -> list[tuple[Location, str]]:
        errors = _check_storage(params, context)
        if params.latency_ms == 0 and params.bandwidth_mbps == 0 and not params.metadata_latency_ms:
            errors.append((("latency_ms",), "io_slow needs latency_ms > 0, metadata_latency_ms > 0 or "
                                            "bandwidth_mbps > 0"))
        if params.metadata_latency_ms is not None and not set(params.ops) & METADATA_OPS:
            errors.append((("metadata_latency_ms",), f"no metadata operation in ops {list(params.ops)}: add some "
                                                     f"of {', '.join(sorted(METADATA_OPS))}"))
        return errors

    def rule(self) -> dict[str, Any]:
        p = self.params
        rule = {**super().rule(), "latency_s": p.get("latency_ms", 0.0) / 1000.0,
                "bandwidth_bps": p.get("bandwidth_mbps", 0.0) * 1e6}
        if p.get("distribution", "fixed") != "fixed" or p.get("metadata_latency_ms") is not None:
            # Drawn per operation by the layer (chaos.storage.latency), seeded by the rule.
            metadata = p.get("metadata_latency_ms")
            rule["latency_s"] = 0.0
            # params arrive with the model's defaults filled in: no second copy of them here.
            rule["latency_dist"] = {"distribution": p["distribution"], "data_ms": float(p["latency_ms"]),
                                    "metadata_ms": float(metadata if metadata is not None else p["latency_ms"]),
                                    "spread": p["spread"], "sigma": p["sigma"], "alpha": p["alpha"],
                                    "max_ms": p["max_ms"]}
        return rule


@register
@dataclass
class IoError(_RuleFault):
    type_name: ClassVar[str] = "io_error"
    failure_class: ClassVar[str] = "storage"
    action: ClassVar[str] = "error"
    params_model: ClassVar[type[FaultParams]] = IoErrorParams
    summary: ClassVar[str] = "Matching operations fail with an errno (EIO, ENOSPC, EROFS...)."
    fidelity: ClassVar[str] = (
        "Stands for media errors, a file system remounted read-only, quota, a storage target "
        "that went away. Exercises the save retry/skip policy: a failed save is surfaced and "
        "never reported as saved. The error is returned by the FUSE daemon; the kernel passes "
        "it to the caller unchanged.")
    mechanism: ClassVar[str] = "by the injector: an error rule in the FUSE fault layer's control file"

    @classmethod
    def check_params(cls, params: FaultParams, context: ParamsContext) -> list[tuple[Location, str]]:
        errors = _check_storage(params, context)
        try:
            errno_number(params.errno)
        except ValueError as exc:
            errors.append((("errno",), str(exc)))
        return errors

    def rule(self) -> dict[str, Any]:
        return {**super().rule(), "errno": errno_number(self.params.get("errno", "EIO"))}


@register
@dataclass
class DiskFull(_RuleFault):
    type_name: ClassVar[str] = "disk_full"
    failure_class: ClassVar[str] = "storage"
    action: ClassVar[str] = "disk_full"
    params_model: ClassVar[type[FaultParams]] = DiskFullParams
    summary: ClassVar[str] = "ENOSPC once bytes_free more bytes were written."
    fidelity: ClassVar[str] = (
        "Stands for a checkpoint volume filling up (other jobs, keep-K set too high, logs). "
        "Exercises a save that fails part-way: the partial checkpoint must never be loaded "
        "and the failure must be surfaced. The budget is counted by the layer, not by the "
        "file system below (statfs still reports the real free space).")
    mechanism: ClassVar[str] = "by the injector: a byte budget rule in the FUSE fault layer"

    def rule(self) -> dict[str, Any]:
        return {**super().rule(), "ops": ["write"], "bytes_left": int(self.params.get("bytes_free", 0))}


@register
@dataclass
class IoCorrupt(_RuleFault):
    type_name: ClassVar[str] = "io_corrupt"
    failure_class: ClassVar[str] = "corruption"
    action: ClassVar[str] = "corrupt"
    params_model: ClassVar[type[FaultParams]] = IoCorruptParams
    summary: ClassVar[str] = "Flip bits in the data of matching reads or writes."
    fidelity: ClassVar[str] = (
        "Stands for silent corruption in the IO path: a bad NIC or HBA, a storage controller "
        "or firmware bug. Exercises checkpoint checksums: a corrupt image must be rejected "
        "before any weight is loaded. Flips happen in the FUSE daemon, in the bytes handed "
        "to the caller (reads) or to the file system (writes).")
    mechanism: ClassVar[str] = "by the injector: a corrupt rule in the FUSE fault layer"

    def rule(self) -> dict[str, Any]:
        return {**super().rule(), "bits": int(self.params.get("bits", 1))}


@register
@dataclass
class LoseUnfsynced(FaultType):
    type_name: ClassVar[str] = "lose_unfsynced"
    family: ClassVar[str] = "storage"
    failure_class: ClassVar[str] = "crash"
    params_model: ClassVar[type[FaultParams]] = LoseUnfsyncedParams
    target_kinds: ClassVar[tuple[str, ...]] = ("node",)
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
    def check_params(cls, params: FaultParams, context: ParamsContext) -> list[tuple[Location, str]]:
        return _check_storage(params, context)

    def torn(self) -> dict[str, Any] | None:
        return None

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        controls = _mount_controls(ctx, self)
        killed = [pid for pid in self.target.pids.values() if ctx.cluster.signal_pid(pid, signal.SIGKILL)]
        dropped = 0
        for control in controls:
            dropped += int(control.drop_unfsynced(torn=self.torn()).get("dropped_files", 0))
        return {"pids": killed, "control_dirs": [c.dir for c in controls], "dropped_files_total": dropped}

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


class CrashPointParams(FaultParams):
    tier: Tier = "shared"
    """The tier whose save is watched (the durable one, normally)."""
    save_step: int = Field(ge=1, le=MAX_STEPS)
    """The step of the save whose durability boundaries are counted (the harness names its folder step-NNNNNNNN)."""
    after: int = Field(-1, ge=-1, le=10_000)
    """Freeze the layer after this many boundaries of that save completed (0: before the first); -1: only report each boundary (storage_boundary events), the trace a sweep enumerates."""


@register
@dataclass
class CrashPoint(FaultType):
    type_name: ClassVar[str] = "crash_point"
    family: ClassVar[str] = "storage"
    failure_class: ClassVar[str] = "storage"
    params_model: ClassVar[type[FaultParams]] = CrashPointParams
    target_kinds: ClassVar[tuple[str, ...]] = ("node",)
    requires: ClassVar[tuple[type, ...]] = (StorageLayer,)
    summary: ClassVar[str] = ("Arm the fault layer at one durability boundary (fsync, rename) of one "
                              "save: it freezes there and reports crash_point (trainchaos run --crash-points).")
    fidelity: ClassVar[str] = (
        "Not a failure by itself: it stops the storage exactly at one durability boundary, so "
        "that a lose_unfsynced triggered by its crash_point event loses power there, as ALICE "
        "and LazyFS place a crash at each persistence point. Boundaries are counted as the "
        "layer sees them (each fsync of a file or directory, each rename); metadata is "
        "durable at once, as for lose_unfsynced, so orderings a stricter file system would "
        "also expose (an unfsynced rename) are not explored.")
    mechanism: ClassVar[str] = "by the injector: a crash point armed in the FUSE fault layer's control file"

    @classmethod
    def check_params(cls, params: FaultParams, context: ParamsContext) -> list[tuple[Location, str]]:
        return _check_storage(params, context)

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        from chaos.rundir import RunDir

        rundir = RunDir.of(ctx.run_dir)
        spec = {"save": f"*step-{int(self.params['save_step']):08d}*", "after": int(self.params.get("after", -1)),
                "events_dir": rundir.events, "image_dir": rundir.crash_image}
        controls = _mount_controls(ctx, self)
        for control in controls:
            control.arm_crash_point(spec)
        return {"control_dirs": [c.dir for c in controls], "crash_point": spec}

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        """Nothing to undo: a crash point that never froze is disarmed with its mount."""
