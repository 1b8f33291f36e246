"""Power faults: a power domain or a rack loses power, every node in it at once; their
metrics (blast radius, kill spread, time back to full size).

The family's ``FamilySpec`` (``chaos.faults.family``); the types are in ``faults``.
"""

from __future__ import annotations

from chaos.faults.family import FamilySpec, register_family
from chaos.faults.power.metrics import METRICS

__all__ = ["FAMILY"]

FAMILY = register_family(FamilySpec(
    "power",
    "a power domain or a rack loses power, every node in it at once",
    fault_modules=("chaos.faults.power.faults",),
    metrics=METRICS,
    docs="power.md"))
