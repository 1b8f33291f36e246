"""Power faults: a power domain or a rack loses power, every node in it at once; their
metrics (blast radius, kill spread, time back to full size).

The family's ``FamilySpec`` (``chaos.faults.family``); the types are in ``faults``.
"""

from __future__ import annotations

from chaos.faults.family import FamilySpec, Meaning, register_family
from chaos.faults.power.metrics import METRICS

__all__ = ["FAMILY", "MEANINGS"]

MEANINGS: tuple[Meaning, ...] = (
    # what users call a failure -> this family's types that express it (chaos.schema.suggest)
    ((("power",), ("outage",), ("power", "fail")), (
        ("power_outage", "every node of a power domain loses power at once; local disks lose unfsynced data"),
        ("rack_loss", "every node of a rack goes down at once (PDU or top-of-rack power)"),
    )),
    ((("rack",),), (
        ("rack_loss", "every node of a rack goes down at once"),
    )),
)

FAMILY = register_family(FamilySpec(
    "power",
    "a power domain or a rack loses power, every node in it at once",
    fault_modules=("chaos.faults.power.faults",),
    meanings=MEANINGS,
    metrics=METRICS,
    docs="power.md"))
