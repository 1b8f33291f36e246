"""Scheduler faults: Slurm marks a node down, drains it, or preempts the job.

The family's ``FamilySpec`` (``chaos.faults.family``); the types are in ``faults``.
"""

from __future__ import annotations

from chaos.faults.family import FamilySpec, Meaning, register_family

__all__ = ["FAMILY", "MEANINGS"]

MEANINGS: tuple[Meaning, ...] = (
    # what users call a failure -> this family's types that express it (chaos.schema.suggest)
    ((("drain",),), (
        ("drain_node", "the node is drained: SIGTERM, then SIGKILL after grace_s (Slurm)"),
    )),
    ((("preempt",),), (
        ("preempt_job", "the job is preempted and requeued (Slurm)"),
    )),
    ((("node", "fail"), ("node", "kill")), (
        ("node_down", "Slurm marks the node DOWN"),
    )),
)

FAMILY = register_family(FamilySpec(
    "scheduler",
    "Slurm marks a node down, drains it, or preempts the job",
    fault_modules=("chaos.faults.scheduler.faults",),
    meanings=MEANINGS,
    docs="slurm.md"))
