"""Silent data corruption: bit flips in live tensors and in checkpoint files at rest; its
metrics (detection latency in steps, checkpoints written while corrupted, clean final state).

The family's ``FamilySpec`` (``chaos.faults.family``); the types are in ``faults``.
"""

from __future__ import annotations

from chaos.faults.family import FamilySpec, Meaning, register_family
from chaos.faults.sdc.metrics import METRICS

__all__ = ["FAMILY", "MEANINGS"]

MEANINGS: tuple[Meaning, ...] = (
    # what users call a failure -> this family's types that express it (chaos.schema.suggest)
    ((("corrupt", "checkpoint"), ("corrupt", "storage"), ("silent", "storage")), (
        ("checkpoint_bitrot", "flips one bit of a saved checkpoint file at rest"),
    )),
    ((("bit", "flip"), ("sdc",), ("silent",), ("flip",)), (
        ("bitflip", "flips (or forces) a bit of a live tensor: parameter, gradient, optimizer state, activation"),
        ("checkpoint_bitrot", "flips one bit of a checkpoint file at rest"),
    )),
)

FAMILY = register_family(FamilySpec(
    "sdc",
    "bit flips in live tensors and in checkpoint files at rest",
    fault_modules=("chaos.faults.sdc.faults",),
    meanings=MEANINGS,
    metrics=METRICS,
    probe_actions=("bitflip",),
    docs="sdc.md"))
