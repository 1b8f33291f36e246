"""Process / GPU faults: rank and node kills, hangs, device errors, stragglers, death mid-save.

The family's ``FamilySpec`` (``chaos.faults.family``); the types are in ``faults``.
"""

from __future__ import annotations

from chaos.faults.family import FamilySpec, register_family

__all__ = ["FAMILY"]

FAMILY = register_family(FamilySpec(
    "process",
    "rank and node kills, hangs, device errors, stragglers, death mid-save",
    fault_modules=("chaos.faults.process.faults",),
    probe_actions=("device_error", "slowdown", "exit")))
