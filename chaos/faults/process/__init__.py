"""Process / GPU faults: rank and node kills, hangs, stalled loops, device errors, stragglers
and thermal throttling, death mid-save (docs/process.md).

The family's ``FamilySpec`` (``chaos.faults.family``); the types are in ``faults``,
``stall`` (stall_loop) and ``throttle`` (thermal_throttle).
"""

from __future__ import annotations

from chaos.faults.family import FamilySpec, register_family

__all__ = ["FAMILY"]

FAMILY = register_family(FamilySpec(
    "process",
    "rank and node kills, hangs, stalled loops, device errors, stragglers and throttling, death mid-save",
    fault_modules=("chaos.faults.process.faults", "chaos.faults.process.stall", "chaos.faults.process.throttle"),
    probe_actions=("device_error", "slowdown", "exit", "stall"),
    docs="process.md"))
