"""Silent corruption in the metrics and the verdict: detection latency in steps, the
detector, contaminated checkpoints, attribution, lost steps from the detection, targets."""

from __future__ import annotations

from chaos.metrics import FaultRecord, RunInfo, compute_metrics
from chaos.model.scenario import Bound, Targets
from chaos.runner.verdict import judge

RANKS = (0, 1)


def _ev(events, t, src, kind, inc=0, **fields):
    events.append({"t": t, "src": src, "incarnation": inc, "kind": kind, **fields})


def _steps(events, first, last, inc=0, t0=0.0):
    for s in range(first, last + 1):
        for r in RANKS:
            _ev(events, t0 + s + 0.01 * r, f"rank-{r}", "step_end", inc, step=s, loss=2.0)


def _flip_then_detect(detect_step: int | None, suspect=None, detector="digest", ckpts=(10, 20, 30)):
    """A bit flips in rank 1 at step 23 (t=22.5); detected at the end of ``detect_step``."""
    events: list[dict] = []
    for r in RANKS:
        _ev(events, 0.0, f"rank-{r}", "rank_start", rank=r, world_size=2)
    last = detect_step - 1 if detect_step else 40
    _steps(events, 1, last)
    _ev(events, 22.5, "rank-1", "fault_injected", fault="f0-bitflip", step=23, mechanism="probe")
    for step in ckpts:
        if step <= last:
            _ev(events, step + 0.5, "rank-0", "ckpt_save_start", step=step)
            _ev(events, step + 0.6, "rank-0", "ckpt_save_end", step=step)
    if detect_step:
        _ev(events, detect_step + 0.1, "rank-0", "detected", by="rank-0", reason="x", suspect=suspect,
            failure_class="corruption", detector=detector, step=detect_step)
        for r in RANKS:
            _ev(events, 50.0, f"rank-{r}", "rank_start", 1, rank=r, world_size=2)
            _ev(events, 50.5, f"rank-{r}", "ckpt_load", 1, step=20, skipped=[])
        _steps(events, 21, 40, inc=1, t0=30.0)
    _ev(events, 71.0, "rank-0", "run_end", 1 if detect_step else 0, step=40, digest="d" * 64,
        train_s=2.2, detector_s={"digest": 0.05, "grad_norm": 0.05})
    return events


def _metrics(events, cls="corruption", type_="bitflip", **targets_kw):
    record = FaultRecord("f0-bitflip", type_, cls, ["rank-1"], planned_step=23)
    run = RunInfo("completed", 0.0, 72.0, 40, 2)
    return compute_metrics(events, [record], run)


def test_detection_latency_and_contaminated_checkpoints():
    m = _metrics(_flip_then_detect(35, ckpts=(10, 20, 30)))
    (fm,) = m.faults
    assert (fm.detector, fm.sdc_detection_steps, fm.contaminated_checkpoints) == ("digest", 12, 1)
    assert m.sdc_detection_steps == 12 and m.contaminated_checkpoints == 1
    # recovery is counted from the detection: steps 21-34 were trained on corrupted state
    assert (fm.restarted, fm.last_step_before, fm.resumed_from, fm.lost_steps) == (True, 34, 20, 14)
    assert round(m.detector_overhead_pct, 2) == round(100 * 0.1 / 2.1, 2)


def test_undetected_corruption_counts_checkpoints_to_the_end_of_the_run():
    (fm,) = _metrics(_flip_then_detect(None, ckpts=(10, 20, 30, 40))).faults
    assert fm.detector is None and fm.sdc_detection_steps is None
    assert fm.contaminated_checkpoints == 2  # 30 and 40; 10 and 20 were clean


def test_a_crash_alarm_is_not_the_corruption_noticed():
    events = _flip_then_detect(35)
    _ev(events, 25.2, "rank-0", "detected", by="rank-0", reason="peer gone", suspect="rank-1",
        failure_class="crash")
    (fm,) = _metrics(events).faults
    assert fm.detector == "digest" and fm.sdc_detection_steps == 12


def test_attribution_of_a_corruption_needs_the_rank_named():
    assert _metrics(_flip_then_detect(30, suspect="rank-1")).faults[0].attribution == "correct"
    assert _metrics(_flip_then_detect(30, suspect="rank-0")).faults[0].attribution == "wrong"
    assert _metrics(_flip_then_detect(30, suspect=None)).faults[0].attribution == "none"


def test_rot_at_rest_contaminates_no_checkpoint():
    events = _flip_then_detect(35)
    for e in events:
        if e["kind"] == "fault_injected":
            e["mechanism"] = "injector"
    (fm,) = _metrics(events, type_="checkpoint_bitrot").faults
    assert fm.contaminated_checkpoints == 0 and fm.sdc_detection_steps == 12


def test_verdict_checks_sdc_targets_per_corruption_fault():
    targets = Targets(sdc_detection_steps=Bound(max=10), contaminated_checkpoints=Bound(max=0))
    v = judge(targets, _metrics(_flip_then_detect(35)))
    reasons = [c.reason for c in v.checks if c.name in ("sdc_detection_steps", "contaminated_checkpoints")]
    assert not v.passed
    assert reasons == ["f0-bitflip: corruption detected after 12 steps > target 10 steps (by digest)",
                       "f0-bitflip: contaminated checkpoints 1 > target 0"]
    v = judge(targets, _metrics(_flip_then_detect(None)))
    failed = [c.reason for c in v.checks if not c.ok]
    assert failed[0].startswith("fault f0-bitflip undetected: no corruption detector fired")
    assert "(undetected: counted to the end of the run)" in failed[1]
    v = judge(Targets(sdc_detection_steps=Bound(max=10)), _metrics(_flip_then_detect(30)))
    assert v.passed, v.reasons()


def _quarantined(node: int) -> list[dict]:
    """Rank 1 on node 1 corrupted at step 23; the job blames rank 1 at step 30 and
    quarantines ``node``."""
    events = _flip_then_detect(30, suspect="rank-1", detector="golden")
    for e in events:
        if e["kind"] == "rank_start":
            e["node"] = e["rank"]
    _ev(events, 30.2, "rank-0", "node_quarantined", node=node, suspect="rank-1", detector="golden", step=30)
    events.sort(key=lambda e: e["t"])
    return events


def test_a_quarantine_is_judged_by_whether_the_node_held_the_corrupted_rank():
    right = _metrics(_quarantined(1))
    (fm,) = right.faults
    assert (fm.quarantined_node, fm.quarantine) == (1, "correct")
    assert (right.quarantined_nodes, right.wrong_quarantines) == (1, 0)
    wrong = _metrics(_quarantined(0))
    assert wrong.faults[0].quarantine == "wrong" and wrong.wrong_quarantines == 1
    verdict = judge(Targets(wrong_quarantines=Bound(max=0)), wrong)
    assert not verdict.passed and "wrong quarantines 1" in " ".join(c.reason for c in verdict.checks)
    # no quarantine: no such metrics at all (a job that only rolls back)
    plain = _metrics(_flip_then_detect(30, suspect="rank-1"))
    assert "quarantine" not in plain.faults[0].to_dict() and "quarantined_nodes" not in plain.to_dict()
