"""Metrics vs targets -> verdict, and the reasons a user reads."""

from __future__ import annotations

import json

import pytest

from chaos.metrics import FaultMetrics, FaultRecord, RunInfo, RunMetrics, compute_metrics
from chaos.model.scenario import Bound, Targets
from chaos.runner.verdict import judge


def fault(fault_id="f0-kill_rank", **kw) -> FaultMetrics:
    values = dict(
        type="kill_rank", failure_class="crash", target_srcs=["rank-3"], fired=True,
        t_inject=25.5, detection_s=0.8, detected_by="rank-0", detected_suspect="rank-3",
        detected_class="crash", attribution="correct",
        attribution_detail="blamed rank-3 (crash), fault was rank-3 (crash)",
        recovery_s=6.5, restarted=True, restarts_after=1, catchup_s=10.5,
        last_step_before=25, resumed_from=20, lost_steps=5,
    )
    values.update(kw)
    return FaultMetrics(fault_id=fault_id, **values)


def metrics(*faults: FaultMetrics, status="completed", **kw) -> RunMetrics:
    values = dict(
        status=status, t_start=0.0, t_end=41.0, wall_s=41.0, steps_target=40, world_size=4,
        final_world_size=4, timeout_s=300.0, completed=status == "completed", final_step=40,
        final_digest="d" * 64, productive_s=40.0, goodput=40 / 41, faults=list(faults),
        faults_fired=sum(f.fired for f in faults), restart_count=1,
    )
    values.update(kw)
    return RunMetrics(**values)


def check(verdict, name, fault=None):
    (c,) = [c for c in verdict.checks if c.name == name and (fault is None or c.fault == fault)]
    return c


def test_all_targets_met_passes_and_reasons_name_both_numbers():
    targets = Targets(detection_s=Bound(max=2), recovery_s=Bound(max=15),
                      catchup_s=Bound(max=20), lost_steps=Bound(max=20), goodput=Bound(min=0.8),
                      attribution="correct")
    v = judge(targets, metrics(fault()), "completed")
    assert v.passed and v.reasons() == []
    assert check(v, "detection_s").reason == "f0-kill_rank: detection 0.8 s <= 2 s"
    assert check(v, "recovery_s").reason == "f0-kill_rank: recovery 6.5 s <= 15 s"
    assert check(v, "catchup_s").reason == "f0-kill_rank: catch-up 10.5 s <= 20 s"
    assert "lost steps 5 <= 20" in check(v, "lost_steps").reason
    assert "resumed from 20" in check(v, "lost_steps").reason
    assert check(v, "goodput").reason == "goodput 0.98 >= 0.8"
    assert check(v, "completes").reason == "completed 40 of 40 steps"


def test_missed_targets_fail_with_both_numbers():
    targets = Targets(detection_s=Bound(max=0.5), recovery_s=Bound(max=5),
                      lost_steps=Bound(max=2), goodput=Bound(min=0.99))
    v = judge(targets, metrics(fault(recovery_s=14.23)), "completed")
    assert not v.passed
    reasons = v.reasons()
    assert "f0-kill_rank: detection 0.8 s > target 0.5 s" in reasons
    assert "f0-kill_rank: recovery 14.2 s > target 5 s" in reasons
    assert any(r.startswith("f0-kill_rank: lost steps 5 > target 2") for r in reasons)
    assert "goodput 0.98 < target 0.99" in reasons
    assert check(v, "recovery_s").value == 14.23
    assert check(v, "recovery_s").bound == {"min": None, "max": 5}


def test_undetected_fault_fails_detection():
    v = judge(Targets(detection_s=Bound(max=2)), metrics(fault(detection_s=None)), "completed")
    assert not v.passed
    assert v.reasons() == ["fault f0-kill_rank undetected (target detection_s <= 2 s)"]


def test_unrecovered_and_unknown_lost_steps_fail():
    f = fault(recovery_s=None, catchup_s=None, resumed_from=None, lost_steps=None)
    targets = Targets(recovery_s=Bound(max=15), catchup_s=Bound(max=30), lost_steps=Bound(max=20),
                      completes=False)
    reasons = judge(targets, metrics(f), "completed").reasons()
    assert reasons == [
        "fault f0-kill_rank never recovered: restarted but never completed a step "
        "(target recovery_s <= 15 s)",
        "fault f0-kill_rank never caught up to step 25 (target catchup_s <= 30 s)",
        "fault f0-kill_rank: lost steps unknown, training never resumed (target lost_steps <= 20)",
    ]


def test_each_fired_fault_is_checked():
    f1 = fault("f1-kill_rank", recovery_s=20.0)
    v = judge(Targets(recovery_s=Bound(max=10)), metrics(fault(), f1), "completed")
    assert not v.passed
    assert check(v, "recovery_s", "f0-kill_rank").ok
    assert v.reasons() == ["f1-kill_rank: recovery 20.0 s > target 10 s"]


def test_planned_fault_that_never_fired_fails():
    never = fault(fired=False, t_inject=None, detection_s=None, recovery_s=None,
                  attribution="none", attribution_detail="never fired")
    v = judge(Targets(detection_s=Bound(max=2)), metrics(never), "completed")
    assert not v.passed
    assert v.reasons() == ["planned fault f0-kill_rank never fired"]


def test_fault_skipped_by_probability_is_not_a_failure():
    skipped = fault(fired=False, skipped="probability 0.5 roll", detection_s=None)
    v = judge(Targets(detection_s=Bound(max=2)), metrics(skipped), "completed")
    assert v.passed
    assert "skipped" in check(v, "fault_fired").reason


def test_unfired_fault_without_fault_targets_is_not_judged():
    never = fault(fired=False, t_inject=None)  # a time trigger the run ended before
    assert judge(Targets(goodput=Bound(min=0.5)), metrics(never), "completed").passed


def test_step_fault_that_never_fired_in_a_completed_run_fails_even_on_run_targets():
    never = fault(fired=False, t_inject=None, planned_step=12)
    v = judge(Targets(goodput=Bound(min=0.5)), metrics(never), "completed")
    assert not v.passed
    assert "trained past step 12" in check(v, "fault_fired").reason
    # A run that ended early never reached the step: its own failure says why, not this.
    failed = judge(Targets(goodput=Bound(min=0.5)), metrics(never), "failed")
    assert all(c.name != "fault_fired" for c in failed.checks)


@pytest.mark.parametrize(
    ("attribution", "detail", "ok", "reason"),
    [
        ("correct", "blamed rank-3 (crash), fault was rank-3 (crash)", True,
         "f0-kill_rank: attribution correct: blamed rank-3 (crash), fault was rank-3 (crash)"),
        ("wrong", "blamed rank-1 (crash), fault was rank-3 (crash)", False,
         "f0-kill_rank: wrong attribution: blamed rank-1 (crash), fault was rank-3 (crash)"),
        ("wrong", "blamed rank-3 (hang), fault was rank-3 (crash)", False,
         "f0-kill_rank: wrong attribution: blamed rank-3 (hang), fault was rank-3 (crash)"),
        ("none", "undetected", False, "f0-kill_rank: no attribution (undetected)"),
    ],
)
def test_attribution_check(attribution, detail, ok, reason):
    f = fault(attribution=attribution, attribution_detail=detail)
    v = judge(Targets(attribution="correct"), metrics(f), "completed")
    assert v.passed is ok
    assert check(v, "attribution").reason == reason


def test_hung_run_fails_completes():
    m = metrics(status="hung", final_step=122, steps_target=300, final_digest=None)
    v = judge(Targets(), m, "hung")
    assert not v.passed
    assert v.reasons() == ["run hung: no progress until timeout_s (300 s); last step 122 of 300"]


def test_failed_and_short_runs_fail_completes():
    failed = judge(Targets(), metrics(status="failed", restart_count=3, final_step=7), "failed")
    assert failed.reasons() == ["run failed after 3 restart(s); last step 7 of 40"]
    short = judge(Targets(), metrics(completed=False, final_step=39), "completed")
    assert short.reasons() == ["run ended without reaching its last step (last step 39 of 40)"]
    assert judge(Targets(completes=False), metrics(status="hung"), "hung").passed


def test_final_state_matches_baseline():
    base = dict(has_baseline=True, baseline_digest="d" * 64, baseline_world_size=4,
                world_size_changed=False)
    t = Targets(final_state="matches_baseline")
    ok = judge(t, metrics(digest_match=True, **base), "completed")
    assert ok.passed and check(ok, "final_state").reason == f"final digest {'d' * 12} matches baseline"
    bad = judge(t, metrics(digest_match=False, **{**base, "baseline_digest": "e" * 64}),
                "completed")
    assert bad.reasons() == [f"final digest {'d' * 12} != baseline {'e' * 12}"]
    none = judge(t, metrics(digest_match=False, final_digest=None, **base), "completed")
    assert "no final digest" in none.reasons()[0]


def test_final_state_without_baseline_fails():
    v = judge(Targets(final_state="matches_baseline"), metrics(), "completed")
    assert v.reasons() == ["final_state matches_baseline needs a baseline run (set baseline: true)"]


def test_world_size_change_falls_back_to_loss_within():
    m = metrics(has_baseline=True, baseline_digest="d" * 64, baseline_world_size=4,
                final_world_size=3, world_size_changed=True, digest_match=None,
                max_rel_loss_dev=0.012, loss_dev_steps=list(range(31, 41)))
    v = judge(Targets(final_state="matches_baseline"), m, "completed")
    assert v.passed
    reason = check(v, "final_state").reason
    assert "world size changed (4 -> 3)" in reason
    assert "0.012 <= 0.05 over steps 31-40" in reason
    m.max_rel_loss_dev = 0.2
    assert not judge(Targets(final_state="matches_baseline"), m, "completed").passed


def test_loss_within():
    m = metrics(has_baseline=True, max_rel_loss_dev=0.08, loss_dev_steps=list(range(31, 41)))
    v = judge(Targets(final_state="loss_within", loss_tolerance=0.05), m, "completed")
    assert v.reasons() == ["max relative loss deviation 0.08 > tolerance 0.05 over steps 31-40"]
    m.max_rel_loss_dev, m.nonfinite_loss_step = None, 36
    v = judge(Targets(final_state="loss_within"), m, "completed")
    assert v.reasons() == ["loss is not finite at step 36"]


def test_end_to_end_from_a_timeline_and_serialisable():
    events = []
    for s in range(1, 26):
        events.append({"t": float(s), "src": "rank-0", "incarnation": 0, "kind": "step_end",
                       "step": s, "loss": 1.0})
    events.append({"t": 26.3, "src": "rank-0", "incarnation": 0, "kind": "detected",
                   "by": "rank-0", "reason": "peer lost", "suspect": "rank-1",
                   "failure_class": "crash"})
    events.append({"t": 30.0, "src": "rank-0", "incarnation": 1, "kind": "rank_start",
                   "rank": 0, "resumed_from": 20})
    for s in range(21, 41):
        events.append({"t": 31.0 + s - 20, "src": "rank-0", "incarnation": 1,
                       "kind": "step_end", "step": s, "loss": 1.0})
    rec = FaultRecord("f0-kill_rank", "kill_rank", "crash", ["rank-3"], t_inject=25.5)
    run = RunInfo("completed", 0.0, 52.0, 40, 4)
    m = compute_metrics(events, [rec], run)
    targets = Targets(detection_s=Bound(max=2), recovery_s=Bound(max=5), lost_steps=Bound(max=10),
                      attribution="correct")
    v = judge(targets, m, "completed")
    assert not v.passed
    assert v.reasons() == [
        "f0-kill_rank: recovery 6.5 s > target 5 s",
        "f0-kill_rank: wrong attribution: blamed rank-1 (crash), fault was rank-3 (crash)",
    ]
    d = json.loads(json.dumps(v.to_dict(), allow_nan=False))
    assert d["passed"] is False and {c["name"] for c in d["checks"]} >= {"detection_s", "completes"}


def test_false_detections_target_names_the_count_and_the_first_false_alarm():
    events = [{"t": 12.0, "by": "rank-0", "suspect": "rank-1", "failure_class": "hang",
               "reason": "no heartbeat for 10 s"}]
    noisy = metrics(fault(), false_detections=1, false_detection_events=events)
    v = judge(Targets(false_detections=Bound(max=0)), noisy)
    c = check(v, "false_detections")
    assert not v.passed and not c.ok and c.value == 1
    assert c.reason.startswith("false detections 1 > target 0")
    assert "rank-0 blamed rank-1 as hang: no heartbeat for 10 s" in c.reason
    quiet = judge(Targets(false_detections=Bound(max=0)), metrics(fault()))
    assert quiet.passed and check(quiet, "false_detections").reason == "false detections 0 <= 0"


def test_a_run_that_trains_to_nan_fails_whatever_its_targets_say():
    """lr: .inf gives NaN from step 1; both runs end in the same NaN weights, so a digest
    comparison alone would pass."""
    nan = float("nan")
    events = [{"t": 1.0 + s, "src": "rank-0", "incarnation": 0, "kind": "step_end", "step": s,
               "loss": nan if s >= 1 else 4.0} for s in range(0, 5)]
    events.append({"t": 9.0, "src": "rank-0", "incarnation": 0, "kind": "run_end", "step": 4,
                   "digest": "n" * 64, "loss": nan, "weights_finite": False})
    run = RunInfo(status="completed", t_start=0.0, t_end=10.0, steps_target=4, world_size=1)
    m = compute_metrics(events, [], run)
    assert not m.healthy and m.first_nonfinite_step == 1
    v = judge(Targets(), m)
    assert not v.passed
    assert check(v, "training_health").reason == "training is not healthy: loss is not finite from step 1 on"


def test_matching_an_unhealthy_baseline_is_inconclusive_never_a_pass():
    from chaos.metrics import BaselineInfo

    events = [{"t": 1.0, "src": "rank-0", "incarnation": 0, "kind": "run_end", "step": 4,
               "digest": "n" * 64, "loss": 1.0, "weights_finite": True}]
    run = RunInfo(status="completed", t_start=0.0, t_end=10.0, steps_target=4, world_size=1)
    base = BaselineInfo(digest="n" * 64, losses={}, world_size=1,
                        health_problem="the final weights hold NaN or Inf")
    v = judge(Targets(final_state="matches_baseline"), compute_metrics(events, [], run, base))
    c = check(v, "final_state")
    assert not c.ok and "inconclusive" in c.reason and "NaN or Inf" in c.reason
