"""The process family's metric: how many steps of a throttled rank's ramp pass between its
factor reaching 1.5 and the slow-rank detection that names it (synthetic timelines)."""

from __future__ import annotations

from chaos.metrics import FaultRecord, RunInfo, compute_metrics
from chaos.model.scenario import Bound, Targets
from chaos.runner.verdict import judge

RAMP = {"factor": 3.0, "ramp_s": 12.0, "hold_s": 6.0, "recover_s": 4.0}  # passes 1.5 at 3 s


def _events(named_at: float | None, suspect: str = "rank-3") -> list[dict]:
    events = [{"t": 10.0, "src": "rank-3", "incarnation": 0, "kind": "fault_injected",
               "fault": "f0-thermal_throttle", "type": "thermal_throttle", "target": "rank-3", "step": 40,
               "mechanism": "probe"}]
    for i in range(1, 300):  # a step every 0.1 s on every rank
        for r in range(4):
            events.append({"t": round(i * 0.1, 3) + 0.001 * r, "src": f"rank-{r}", "incarnation": 0,
                           "kind": "step_end", "step": i, "loss": 1.0})
    if named_at is not None:
        events.append({"t": named_at, "src": "rank-0", "incarnation": 0, "kind": "detected", "by": "rank-0",
                       "reason": "slow", "suspect": suspect, "failure_class": "slow", "detector": "slow_rank"})
    return events


def _fault(events: list[dict], type_name: str = "thermal_throttle", params: dict | None = None):
    record = FaultRecord(f"f0-{type_name}", type_name, "slow", ["rank-3", "node-1"], t_inject=10.0,
                         family="process", params=RAMP if params is None else params)
    return compute_metrics(events, [record], RunInfo("completed", 0.0, 30.0, 299, 4))


def test_steps_from_the_factor_passing_1_5_to_the_naming() -> None:
    (after,) = _fault(_events(13.55)).faults  # rank 3's steps end at 13.003 .. 13.503
    assert after.throttle_detection_steps == 6
    (before,) = _fault(_events(12.45)).faults  # named at factor 1.24: 12.503 .. 12.903 lie between
    assert before.throttle_detection_steps == -5


def test_never_named_or_named_wrong_fails_the_target() -> None:
    targets = Targets.with_bounds({"throttle_detection_steps": Bound(max=10)})
    for events in (_events(None), _events(13.55, suspect="rank-1")):
        m = _fault(events)
        assert m.faults[0].throttle_detection_steps is None
        (check,) = [c for c in judge(targets, m).checks if c.name == "throttle_detection_steps"]
        assert not check.ok and "never named slow" in check.reason
    ok = judge(targets, _fault(_events(13.55)))
    assert ok.passed, ok.reasons()


def test_only_a_ramp_that_reaches_1_5_has_it() -> None:
    (straggler,) = _fault(_events(13.55), "straggler", {"factor": 3.0, "steps": 20}).faults
    assert "throttle_detection_steps" not in straggler.family_values
    (mild,) = _fault(_events(13.55), params={**RAMP, "factor": 1.4}).faults
    assert mild.throttle_detection_steps is None
