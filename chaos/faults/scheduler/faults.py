"""Scheduler faults: what Slurm does to a job when a node fails or goes into maintenance, or
when the job is preempted.

These act through the scheduler (``scontrol update NodeName=... State=DOWN|DRAIN``), so they
run on the ``slurm`` backend only (validation says so for any other backend). Every node
state change is recorded in the fault journal before it is made (the node's Slurm name, the
reason ``trainchaos:<run id>:<fault>``) and undone with ``State=RESUME`` on revert, on
SIGINT/SIGTERM, and by ``trainchaos cleanup`` from the record alone; ``cleanup`` also finds
nodes left out of service by their reason (resource kind ``slurm_node_state``).
``preempt_job`` changes no state that outlives it: the job is requeued, which is the fault.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

from pydantic import Field

from chaos.cluster import backend_of, lookup_backend
from chaos.cluster.capabilities import Scheduler, has
from chaos.errors import ToolError
from chaos.faults.base import FailureClass, FaultParams, FaultType, TargetKind, register

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext
    from chaos.model.scenario import FaultSpec, Scenario

__all__ = ["DrainNode", "NodeDown", "PreemptJob"]

class NodeDownParams(FaultParams):
    kill_processes: bool = True
    """Kill the node's processes (SIGKILL) before marking it DOWN: the host died and Slurm
    noticed. False: only the scheduler's verdict, and Slurm itself ends the job's work there."""


class DrainNodeParams(FaultParams):
    grace_s: float = Field(10.0, ge=0, le=3600)
    """Seconds between the SIGTERM (the maintenance warning) and the SIGKILL of whatever of
    the node is still running."""


def _scheduler(ctx: InjectionContext) -> Any:
    """The backend as a ``Scheduler`` (its base interface too: signal_node)."""
    return ctx.require(Scheduler)


def _resume(record: dict[str, Any]) -> None:
    if not record.get("node_states"):
        return  # nothing taken out (cleanup of an ``apply`` whose inject never returned)
    scheduler = backend_of(record, Scheduler)
    failures = []
    for change in record.get("node_states", []):
        try:
            scheduler.return_node(change)
        except Exception as exc:  # go on: every other node still gets resumed
            failures.append(f"{change['slurm_node']}: {exc}")
    if failures:
        raise ToolError("could not resume " + "; ".join(failures))


@contextlib.contextmanager
def _undone_on_failure(record: dict[str, Any]) -> Iterator[None]:
    """A fault that fails half-way never returns its record, so its revert would not know
    the nodes it already took out: those are resumed here before the error goes on."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            _resume(record)
        raise


@dataclass
class _SlurmNodeFault(FaultType):
    """A node taken out of service through Slurm: its state change is always undone (RESUME),
    on revert and from the journal alone."""

    family: ClassVar[str] = "scheduler"
    failure_class: ClassVar[FailureClass] = "crash"
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("node",)
    requires: ClassVar[tuple[type, ...]] = (Scheduler,)

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        _resume(record)

    @classmethod
    def revert_record(cls, record: dict[str, Any]) -> None:
        _resume(record)


@register
@dataclass
class NodeDown(_SlurmNodeFault):
    type_name: ClassVar[str] = "node_down"
    summary: ClassVar[str] = ("A node fails and Slurm marks it DOWN (scontrol update State=DOWN); "
                              "RESUMEd on revert.")
    fidelity: ClassVar[str] = (
        "Stands for a host failure as the scheduler sees it: the node's processes die and Slurm "
        "takes the node out of service. Exercises what the scheduler then does to the job "
        "(ends it, keeps it with --no-kill, requeues it with --requeue) and the job's own "
        "detection and elastic restart. The host is not really down: slurmd keeps running, "
        "so node-health checks and SlurmdTimeout are not exercised."
    )
    mechanism: ClassVar[str] = "SIGKILL of the node's processes, then scontrol update State=DOWN"
    params_model: ClassVar[type[FaultParams]] = NodeDownParams

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        cluster = _scheduler(ctx)
        record: dict[str, Any] = {"backend": cluster.name, "node_states": [], "pids": []}
        with _undone_on_failure(record):
            for node in self.target.nodes:
                if self.params.get("kill_processes", True):
                    record["pids"] += cluster.signal_node(node, signal.SIGKILL)
                else:
                    cluster.mark_lost(node)
                record["node_states"].append(cluster.take_node_out(node, "DOWN", self.fault_id))
        return record


@register
@dataclass
class DrainNode(_SlurmNodeFault):
    type_name: ClassVar[str] = "drain_node"
    summary: ClassVar[str] = ("Maintenance: the node is drained (State=DRAIN), its processes get "
                              "SIGTERM, then SIGKILL after grace_s; RESUMEd on revert.")
    fidelity: ClassVar[str] = (
        "Stands for planned maintenance or a health check taking a node away with notice (a "
        "drain with a grace period, as a cloud maintenance event or preemption notice gives). "
        "Exercises the job's SIGTERM handling (an emergency checkpoint within the grace saves "
        "the steps since the last one) and restart without the node. The warning is a "
        "SIGTERM to the node's processes, as Slurm's own --signal would deliver it."
    )
    mechanism: ClassVar[str] = "scontrol update State=DRAIN, SIGTERM, SIGKILL after grace_s"
    params_model: ClassVar[type[FaultParams]] = DrainNodeParams

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        cluster = _scheduler(ctx)
        record: dict[str, Any] = {"backend": cluster.name, "node_states": [], "pids": []}
        with _undone_on_failure(record):
            for node in self.target.nodes:
                record["node_states"].append(cluster.take_node_out(node, "DRAIN", self.fault_id))
                record["pids"] += cluster.signal_node(node, signal.SIGTERM)
        nodes = tuple(self.target.nodes)

        def finish() -> None:
            for node in nodes:
                cluster.signal_node(node, signal.SIGKILL)

        timer = threading.Timer(float(self.params.get("grace_s", 10.0)), finish)
        timer.daemon = True
        timer.start()
        self._timer = timer
        return record

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        timer = getattr(self, "_timer", None)
        if timer is not None:
            timer.cancel()
        super().revert(ctx, record)


@register
@dataclass
class PreemptJob(FaultType):
    type_name: ClassVar[str] = "preempt_job"
    family: ClassVar[str] = "scheduler"
    failure_class: ClassVar[FailureClass] = "crash"
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("job",)
    requires: ClassVar[tuple[type, ...]] = (Scheduler,)
    summary: ClassVar[str] = ("The job is preempted and requeued (scontrol requeue): SIGTERM to every "
                              "task, SIGKILL after KillWait, back in the queue; it restarts and resumes.")
    fidelity: ClassVar[str] = (
        "Stands for preemption by a higher-priority job (PreemptMode=REQUEUE) or an operator "
        "requeue: Slurm signals every task of the job (SIGTERM), kills what is left after its "
        "KillWait, puts the job back in the queue and starts it again, possibly on other nodes. "
        "Exercises the job's SIGTERM handling (an emergency checkpoint within the grace), the "
        "requeue and the restart from the checkpoint, all measured as one recovery. The grace is "
        "the cluster's KillWait, not a partition's GraceTime; the job must be submitted "
        "requeueable (backend option requeue: true)."
    )
    mechanism: ClassVar[str] = "scontrol requeue JOBID"

    @classmethod
    def preflight(cls, fault: FaultSpec, scenario: Scenario) -> list[str]:
        """The job must be one the scheduler can put back in the queue, as submitted."""
        backend = lookup_backend(scenario.backend.name)
        # has() checked what the backend declares, which the checker cannot see: the cast says it.
        refusal = (cast("type[Scheduler]", backend).requeue_refusal(dict(scenario.backend.options))
                   if has(backend, Scheduler) else None)
        return [f"faults[{fault.index}]: {cls.type_name} requeues the job{refusal}"] if refusal else []

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        return ctx.require(Scheduler).requeue_job(self.fault_id)

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        """Nothing outlives the fault: the requeued job is the job, cancelled with the run."""
