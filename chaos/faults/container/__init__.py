"""Container faults on the docker backend: a freeze, a node cut off its network, packet
loss, CPU and memory pressure through live limits.

The family's ``FamilySpec`` (``chaos.faults.family``); the types are in ``faults``.
"""

from __future__ import annotations

from chaos.faults.family import FamilySpec, Meaning, register_family

__all__ = ["FAMILY", "MEANINGS"]

MEANINGS: tuple[Meaning, ...] = (
    # what users call a failure -> this family's types that express it (chaos.schema.suggest)
    ((("cpu",), ("stress",), ("noisy",), ("neighbour",)), (
        ("container_limits", "lowers a node container's CPU (and memory) limits live: a noisy neighbour"),
    )),
    ((("oom",), ("memory",)), (
        ("container_limits", "lowers a node container's memory limit live (memory_mb): an OOM kill"),
    )),
    ((("partition",), ("brain",), ("network", "fail")), (
        ("container_disconnect", "cuts node containers off the run's network (docker backend)"),
    )),
    ((("hang",),), (
        ("container_pause", "freezes whole node containers (docker pause)"),
    )),
)

FAMILY = register_family(FamilySpec(
    "container",
    "container freeze, disconnect, packet loss, live CPU and memory limits",
    fault_modules=("chaos.faults.container.faults",),
    meanings=MEANINGS,
    docs="docker.md"))
