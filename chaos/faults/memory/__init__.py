"""Memory faults: a rank that leaks host memory until its node's memory cgroup makes the
kernel kill it, or that runs out at an exact step; the kill reported as ``oom``
(docs/neighbor.md).

The family's ``FamilySpec`` (``chaos.faults.family``); the types are in ``faults``. The
node's memory cgroup and the watcher of its OOM notifications belong to the backend
(``backend: {local: {memory_mb: N}}``: chaos/cluster/cgroups.py, chaos/cluster/oomwatch.py).
"""

from __future__ import annotations

from chaos.faults.family import FamilySpec, register_family

__all__ = ["FAMILY"]

FAMILY = register_family(FamilySpec(
    "memory",
    "host-memory leaks and OOM kills under a node's memory cgroup",
    fault_modules=("chaos.faults.memory.faults",),
    probe_actions=("leak",),
    docs="neighbor.md"))
