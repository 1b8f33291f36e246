"""What a finished run measured: each fault's record and outcome, the run's metrics and its
verdict, from what the runner hands over once the run has ended and its events are back from
disk.
"""

from __future__ import annotations

from typing import cast

from chaos.metrics import BaselineInfo, FaultRecord, RunInfo, compute_metrics
from chaos.metrics import RunStatus as EngineStatus
from chaos.model.scenario import Scenario
from chaos.runfiles.events import Event
from chaos.runfiles.record import FaultOutcome, MetricsRecord, RunStart, Verdict, fault_outcome
from chaos.runner.plan import PlannedFault
from chaos.runner.precision import landing
from chaos.runner.state import FaultState
from chaos.runner.verdict import judge
from chaos.workload import workload_for

__all__ = ["measure"]


def _fault_records(plan: list[PlannedFault], states: list[FaultState], events: list[Event]) -> list[FaultRecord]:
    records = []
    injected = {e.get("fault"): e for e in events if e.get("kind") == "fault_injected" and e.get("src") != "injector"}
    by_state = {st.planned.fault_id: st for st in states}
    for planned in plan:
        if not planned.fires:
            continue
        fault = planned.fault
        st = by_state.get(planned.fault_id)
        ev = injected.get(fault.fault_id)
        t_inject = st.t_inject if st else (ev["t"] if ev else None)
        resolved = st.resolved if st and st.resolved is not None else fault.target
        records.append(FaultRecord(
            fault_id=fault.fault_id, type=fault.type_name, failure_class=fault.failure_class,
            family=fault.family, params=dict(fault.params),
            also_classes=tuple(fault.also_detected_as),
            target_srcs=resolved.srcs(), t_inject=t_inject,
            t_revert=st.t_revert if st else None, planned_step=planned.spec.trigger.at_step,
        ))
    return records


def measure(events: list[Event], t_end: float, *, scenario: Scenario, plan: list[PlannedFault],
            states: list[FaultState], start: RunStart, status: str, t_stop: float | None,
            with_faults: bool, baseline: BaselineInfo | None) -> tuple[list[FaultOutcome], MetricsRecord, Verdict | None]:
    """What each fault did, the run's metrics and its verdict (None: not judged); ``states``
    are the injector's faults as the runner left them, ``status`` the run's final status."""
    records = _fault_records(plan, states, events)
    world = scenario.topology.world_size
    # cast: measured once the run has ended, so its status is no longer "running"
    engine_status = cast("EngineStatus", status if status != "timeout" else "hung")
    run = RunInfo(status=engine_status, t_start=start.t_start,
                  t_end=t_end, steps_target=start.steps_target, world_size=world,
                  timeout_s=scenario.timeout_s, t_stop=t_stop,
                  detection=workload_for(scenario.workload).detection_sources())
    metrics = compute_metrics(events, records, run, baseline)
    # The fault-free baseline is a reference, not an experiment, and a run trainchaos
    # itself broke taught nothing about the training stack: neither gets a verdict.
    judged = with_faults and status != "tool_error"
    twin = start.baseline.checks if start.baseline is not None else []
    verdict = judge(scenario.targets, metrics, run.status, twin) if judged else None
    faults_out = []
    by_state = {st.planned.fault_id: st for st in states}
    for planned, rec in zip([p for p in plan if p.fires], records, strict=True):
        st = by_state.get(planned.fault_id)
        landed = landing(planned, events, rec.t_inject, st.t_planned if st else None)
        faults_out.append(fault_outcome(
            rec, step_at_inject=landed.step, precision=landed.precision, lag_ms=landed.lag_ms,
            hold=landed.hold,
            mechanism="probe" if planned.fault.in_process else "injector",
            fidelity=planned.fault.fidelity,
            details=st.record if st else {}, error=st.error if st else None,
            target_spec=dict(planned.fault.target_spec),
            resolved_target=st.resolved.to_dict() if st and st.resolved else None,
        ))
    return faults_out, MetricsRecord.of(metrics), verdict
