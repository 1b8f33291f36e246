"""Container faults on the docker backend: a freeze, a node cut off its network, packet
loss, CPU and memory pressure through live limits.

The family's ``FamilySpec`` (``chaos.faults.family``); the types are in ``faults``.
"""

from __future__ import annotations

from chaos.faults.family import FamilySpec, register_family

__all__ = ["FAMILY"]

FAMILY = register_family(FamilySpec(
    "container",
    "container freeze, disconnect, packet loss, live CPU and memory limits",
    fault_modules=("chaos.faults.container.faults",),
    docs="docker.md"))
