"""Which directories of a run get a storage fault-layer mount: planned from the scenario's
faults before any node starts, handed to the backend in ``RunSpec.mounts`` (the storage
family's ``FamilySpec.mounts``)."""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, Any

from chaos.cluster.base import StorageMount
from chaos.errors import ToolError
from chaos.faults.base import UnknownFaultType, lookup

if TYPE_CHECKING:
    from chaos.workload import StorageLayout

__all__ = ["STORAGE_TYPES", "plan_mounts", "storage_plan"]

STORAGE_TYPES: frozenset[str] = frozenset({"io_stall", "io_slow", "io_error", "disk_full", "io_corrupt",
                                           "lose_unfsynced", "torn_write", "crash_point", "process_crash"})
"""Fault types that need the fault layer mounted (``storage_plan``)."""


def plan_mounts(scenario: dict[str, Any], layout: StorageLayout | None, run_dir: str
                ) -> tuple[StorageMount, ...]:
    """The fault-layer mounts a run needs (``scenario`` as ``chaos.runner.run`` records it, plain
    dicts; ``layout``: where its workload keeps checkpoints and data), for its backend to
    acquire before any node starts (``chaos.cluster.mounts.acquire_storage_mounts``). The
    data tier gets the run's own copy of the data file here: the original is never mounted
    over."""
    plan = storage_plan(scenario, layout)
    if not plan:
        return ()
    if layout is None:
        raise ToolError("storage faults need a workload whose checkpoint directory is known "
                        "(its checkpoint_dir); validation should have refused this scenario")
    return tuple(StorageMount(tier=tier, track_unfsynced=track,
                              path=(layout.shared_checkpoint_dir(run_dir) if tier == "shared"
                                    else _data_copy(run_dir, layout) if tier == "data"
                                    else None))  # local: each node's own, under its local dir
                 for tier, track in sorted(plan.items()))


def storage_plan(scenario: dict[str, Any], layout: StorageLayout | None = None) -> dict[str, bool]:
    """Tier -> whether its mounts track unfsynced data, for the storage faults of a scenario;
    empty: nothing to mount."""
    tiers: dict[str, bool] = {}
    for fault in scenario.get("faults") or []:
        if _drops_local_unfsynced(fault, layout):
            tiers["local"] = True  # a power cut drops what the node-local tier never fsynced
            continue
        if fault.get("type") not in STORAGE_TYPES:
            continue
        tier = (fault.get("params") or {}).get("tier", "shared")
        tiers[tier] = tiers.get(tier, False) or fault.get("type") in ("lose_unfsynced", "torn_write", "crash_point")
    return tiers


def _drops_local_unfsynced(fault: dict[str, Any], layout: StorageLayout | None) -> bool:
    """A power fault with ``local_data: unfsynced`` on a workload that keeps a node-local tier."""
    try:
        if "local_data" not in lookup(str(fault.get("type"))).params_model.model_fields:
            return False
    except UnknownFaultType:
        return False
    if (fault.get("params") or {}).get("local_data", "unfsynced") != "unfsynced":
        return False
    return layout is not None and layout.node_local_checkpoints


def _data_copy(run_dir: str, layout: StorageLayout) -> str:
    """The run's own copy of the data file (the workload's seed unless it is there already),
    in the directory the data tier is mounted over: the original is never mounted over."""
    path = os.path.join(run_dir, layout.data_file or "")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not os.path.exists(path) and layout.data_source:
        shutil.copyfile(layout.data_source, path)
    return os.path.dirname(path)
