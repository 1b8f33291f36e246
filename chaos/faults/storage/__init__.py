"""Storage faults through the FUSE fault layer over the checkpoint tiers (stall, slow IO,
errors, a full disk, corruption, lost unfsynced data, crash points), the mounts they need
and their metrics (rejected and corrupt checkpoints).

The family's ``FamilySpec`` (``chaos.faults.family``); the types are in ``faults``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chaos.faults.family import FamilySpec, register_family
from chaos.faults.storage.metrics import METRICS

if TYPE_CHECKING:
    from chaos.cluster.base import StorageMount
    from chaos.workload import StorageLayout

__all__ = ["FAMILY"]


def _plan_mounts(scenario: dict[str, Any], layout: StorageLayout | None, run_dir: str
                 ) -> tuple[StorageMount, ...]:
    # Imported when a run plans its mounts: a family's spec must stay cheap to load (the
    # metric catalogue loads every spec while chaos.model, below the cluster layer, imports).
    from chaos.faults.storage.mounts import plan_mounts

    return plan_mounts(scenario, layout, run_dir)


FAMILY = register_family(FamilySpec(
    "storage",
    "stalls, slow IO, errors, a full disk, corruption and lost writes under the checkpoint path",
    fault_modules=("chaos.faults.storage.faults",),
    metrics=METRICS,
    mounts=_plan_mounts,
    docs="storage.md"))
