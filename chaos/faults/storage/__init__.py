"""Storage faults through the FUSE fault layer over the checkpoint tiers (stall, slow IO,
errors, a full disk, corruption, lost unfsynced data, process crashes, crash points), the mounts they need
and their metrics (rejected and corrupt checkpoints).

The family's ``FamilySpec`` (``chaos.faults.family``); the types are in ``faults``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chaos.faults.family import CrashSweep, FamilySpec, Meaning, register_family
from chaos.faults.storage.metrics import METRICS

if TYPE_CHECKING:
    from chaos.cluster.base import StorageMount
    from chaos.workload import StorageLayout

__all__ = ["FAMILY", "MEANINGS"]

MEANINGS: tuple[Meaning, ...] = (
    # what users call a failure -> this family's types that express it (chaos.schema.suggest)
    ((("corrupt", "checkpoint"), ("corrupt", "storage"), ("silent", "storage")), (
        ("io_corrupt", "flips bits in the data a rank reads or writes (checkpoints included) as it passes the storage layer"),
    )),
    ((("storage", "slow"), ("checkpoint", "slow"), ("storage", "bandwidth")), (
        ("io_slow", "adds latency to each file operation and/or caps its bandwidth"),
    )),
    ((("storage", "stall"), ("storage", "hang")), (
        ("io_stall", "file operations block until the stall ends"),
    )),
    ((("storage", "error"), ("storage", "fail")), (
        ("io_error", "file operations fail with an errno (EIO, EROFS...)"),
    )),
    ((("storage", "full"), ("full",)), (
        ("disk_full", "writes fail with ENOSPC once bytes_free more bytes were written"),
    )),
    ((("torn",),), (
        ("torn_write", "of each file's unfsynced writes only a first part persists"),
    )),
    ((("process", "crash", "save"), ("kill", "save"), ("crash", "checkpoint")), (
        ("process_crash", "the writer's ranks are killed mid-save and every write they made stays"),
    )),
    ((("unfsynced",), ("storage", "loss")), (
        ("lose_unfsynced", "the node crashes and every write not fsynced is dropped"),
    )),
    ((("bandwidth",),), (
        ("io_slow", "caps storage bandwidth (bandwidth_mbps)"),
    )),
)


def _plan_mounts(scenario: dict[str, Any], layout: StorageLayout | None, run_dir: str
                 ) -> tuple[StorageMount, ...]:
    # Imported when a run plans its mounts: a family's spec must stay cheap to load (the
    # metric catalogue loads every spec while chaos.model.scenario, below the cluster layer, imports).
    from chaos.faults.storage.mounts import plan_mounts

    return plan_mounts(scenario, layout, run_dir)


FAMILY = register_family(FamilySpec(
    "storage",
    "stalls, slow IO, errors, a full disk, corruption and lost writes under the checkpoint path",
    fault_modules=("chaos.faults.storage.faults", "chaos.faults.storage.crash"),
    meanings=MEANINGS,
    metrics=METRICS,
    mounts=_plan_mounts,
    # the layer's crash point (chaos.storage.crashpoints) reports the event it is named after
    crash_sweep=CrashSweep(arm_type="crash_point", power_loss_type="lose_unfsynced", event="crash_point",
                           process_crash_type="process_crash"),
    docs="storage.md"))
