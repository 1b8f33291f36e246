"""Silent data corruption: bit flips in live tensors and in checkpoint files at rest; its
metrics (detection latency in steps, checkpoints written while corrupted, clean final state).

The family's ``FamilySpec`` (``chaos.faults.family``); the types are in ``faults``.
"""

from __future__ import annotations

from chaos.faults.family import FamilySpec, register_family
from chaos.faults.sdc.metrics import METRICS

__all__ = ["FAMILY"]

FAMILY = register_family(FamilySpec(
    "sdc",
    "bit flips in live tensors and in checkpoint files at rest",
    fault_modules=("chaos.faults.sdc.faults",),
    metrics=METRICS,
    probe_actions=("bitflip",),
    docs="sdc.md"))
