"""Storage faults: stalls, slowness, errors, a full disk, corruption in the IO path and lost
unfsynced data, applied by the FUSE fault layer (``chaos.storage``) mounted over the
harness's checkpoint tiers. docs/storage.md has the design and each type's fidelity. This
module holds the faults that are one rule of the layer; the crash and power-loss faults are
in ``chaos.faults.storage.crash``, what both share in ``chaos.faults.storage.tiers``.

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator

from chaos.cluster.capabilities import StorageLayer
from chaos.faults.base import (
    FailureClass,
    FaultParams,
    FaultType,
    ParamsContext,
    TargetKind,
    register,
)
from chaos.faults.storage.tiers import Location, Op, Tier, check_storage, listing, mount_controls
from chaos.model.types import MAX_BYTES, MAX_SECONDS
from chaos.storage.control import MountControl
from chaos.storage.latency import METADATA_OPS
from chaos.storage.rules import errno_number

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext

__all__ = ["DiskFull", "IoCorrupt", "IoError", "IoSlow", "IoStall"]


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
    ops: list[Op] = Field(default_factory=listing("write", "fsync", "create", "rename", "read", "open"), min_length=1)
    """Operations that block (until the stall ends)."""


class IoSlowParams(_StorageParams):
    ops: list[Op] = Field(default_factory=listing("read", "write", "fsync"), min_length=1)
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
    ops: list[Op] = Field(default_factory=listing("write"), min_length=1)
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
    ops: list[Literal["read", "write"]] = Field(default_factory=listing("read"), min_length=1)
    """Whether bits flip in data read, written, or both."""
    bits: int = Field(1, ge=1, le=64)
    """Bits flipped in each hit operation's data (seeded positions)."""


class _RuleFault(FaultType):
    """A fault that is one rule in the layer of its tier."""

    family: ClassVar[str] = "storage"
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("rank", "node")
    requires: ClassVar[tuple[type, ...]] = (StorageLayer,)
    action: ClassVar[str]

    @classmethod
    def check_params(cls, params: Any, context: ParamsContext) -> list[tuple[Location, str]]:
        return check_storage(params, context)

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
        controls = mount_controls(ctx, self)
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
    failure_class: ClassVar[FailureClass] = "storage"
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
    failure_class: ClassVar[FailureClass] = "slow"
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
    def check_params(cls, params: IoSlowParams, context: ParamsContext) -> list[tuple[Location, str]]:
        errors = check_storage(params, context)
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
    failure_class: ClassVar[FailureClass] = "storage"
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
    def check_params(cls, params: IoErrorParams, context: ParamsContext) -> list[tuple[Location, str]]:
        errors = check_storage(params, context)
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
    failure_class: ClassVar[FailureClass] = "storage"
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
    failure_class: ClassVar[FailureClass] = "corruption"
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
