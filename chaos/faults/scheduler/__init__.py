"""Scheduler faults: Slurm marks a node down, drains it, or preempts the job.

The family's ``FamilySpec`` (``chaos.faults.family``); the types are in ``faults``.
"""

from __future__ import annotations

from chaos.faults.family import FamilySpec, register_family

__all__ = ["FAMILY"]

FAMILY = register_family(FamilySpec(
    "scheduler",
    "Slurm marks a node down, drains it, or preempts the job",
    fault_modules=("chaos.faults.scheduler.faults",),
    docs="slurm.md"))
