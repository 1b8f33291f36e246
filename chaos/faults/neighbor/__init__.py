"""Noisy neighbours: real co-tenant load on a node's host (CPU, memory bandwidth, page
cache, disk), in its cgroups or beside them; the victim's slowdown (docs/neighbor.md).

The family's ``FamilySpec`` (``chaos.faults.family``); the type is in ``faults``, its
metrics in ``metrics``. The load itself is ``chaos.loadgen``; its CPU cap a ``cgroup``
resource (``chaos.cluster.cgroups``).
"""

from __future__ import annotations

from chaos.faults.family import FamilySpec, register_family
from chaos.faults.neighbor.metrics import METRICS

__all__ = ["FAMILY"]

FAMILY = register_family(FamilySpec(
    "neighbor",
    "a co-tenant competing for CPU, memory bandwidth, page cache or disk",
    fault_modules=("chaos.faults.neighbor.faults",),
    metrics=METRICS,
    docs="neighbor.md"))
