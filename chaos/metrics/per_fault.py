"""One fault's metrics: when it took effect and was removed, its detection and attribution,
recovery, restarts and lost steps (definitions: docs/metrics.md); then what
each registered metric family measures for it (``chaos.metrics.family``)."""

from __future__ import annotations

from chaos.metrics.family import FaultContext
from chaos.metrics.records import FaultMetrics, FaultRecord, RunInfo
from chaos.metrics.registry import families
from chaos.metrics.timeline import Event, Timeline, incarnation, int_or_none, rank_of, resumed_from

__all__ = ["fault_metrics"]


def fault_metrics(
    rec: FaultRecord, tl: Timeline, run: RunInfo, t_inject: float | None, next_t: float | None
) -> FaultMetrics:
    fm = FaultMetrics(
        fault_id=rec.fault_id, type=rec.type, failure_class=rec.failure_class,
        target_srcs=list(rec.target_srcs), fired=t_inject is not None, skipped=rec.skipped,
        t_inject=t_inject, planned_step=rec.planned_step,
        injected_step=rec.planned_step,
    )
    if t_inject is None:
        fm.attribution_detail = "never fired"
        return fm
    injected = tl.first_fault_event("fault_injected", rec.fault_id)
    if injected is not None and int_or_none(injected.get("step")) is not None:
        fm.injected_step = int(injected["step"])

    t_revert = rec.t_revert
    if t_revert is None:
        reverted = tl.first_fault_event("fault_reverted", rec.fault_id)
        t_revert = reverted["t"] if reverted is not None else None
    if t_revert is not None and (t_revert >= run.t_end or t_revert < t_inject):
        t_revert = None
    fm.t_revert = t_revert
    targets = set(rec.target_srcs)

    # detection and attribution
    corruption = rec.failure_class == "corruption"
    detection = None
    for e in tl.detections:
        if e["t"] < t_inject:
            continue
        if corruption and e.get("failure_class") != "corruption":
            continue
        if next_t is not None and e["t"] >= next_t and e.get("suspect") not in targets:
            continue
        detection = e
        break
    # A secondary detection (a survivor that noticed a peer's failure and named no one,
    # chaos.workload.logprogress) times the detection; who is blamed is the next one's word.
    blaming = detection
    if detection is not None and detection.get("secondary"):
        blaming = next((e for e in tl.detections if e["t"] >= detection["t"] and not e.get("secondary")
                        and (next_t is None or e["t"] < next_t or e.get("suspect") in targets)), detection)
    if detection is None and run.detection is not None and run.detection.blind_to(rec, tl.probe_reports):
        # Nothing that could report the job's detection of this fault was there to: the
        # tool was blind, which says nothing of the stack.
        why = f"no detection source sees a {rec.failure_class} fault in this workload"
        fix = f"; {run.detection.fix}" if run.detection.fix else ""
        fm.unknown["detection_s"] = fm.unknown["attribution"] = why + fix
        fm.attribution, fm.attribution_detail = "unknown", f"detection unknown: {why}"
    elif detection is None:
        fm.attribution, fm.attribution_detail = "none", "undetected"
    else:
        fm.detection_s = detection["t"] - t_inject
        assert blaming is not None
        fm.detected_by = blaming.get("by") or blaming.get("src")
        fm.detection_reason = blaming.get("reason")
        fm.detected_suspect = suspect = blaming.get("suspect")
        fm.detected_class = cls = blaming.get("failure_class")
        fm.detector = blaming.get("detector")
        was = f"fault was {', '.join(rec.target_srcs) or 'the job'} ({rec.failure_class})"
        if suspect is None:
            fm.attribution = "none"
            fm.attribution_detail = f"detected by {fm.detected_by} without naming a suspect; {was}"
        else:
            right = suspect in targets and (cls == rec.failure_class or cls in rec.also_classes)
            fm.attribution = "correct" if right else "wrong"
            fm.attribution_detail = f"blamed {suspect} ({cls or 'no class'}), {was}"

    # recovery: from the fault, or for a corruption from its detection (until then the job
    # trained on, unaware: that is not recovery, and what it trained is what gets lost); a
    # leak too does its harm only at the OOM kill it ends in, seconds after it began
    live = injected is not None and injected.get("mechanism") == "probe"
    delayed = corruption or rec.failure_class == "oom"
    t_ref = detection["t"] if delayed and live and detection is not None else t_inject
    last_before = tl.last_step(t_ref)
    fm.last_step_before = last_before
    pre, default_inc = tl.pre_incarnations(t_ref)

    def post_fault(e: Event) -> bool:
        return incarnation(e) > pre.get(e["src"], default_inc)

    first_new = next((e for e in tl.rank_events if e["t"] >= t_ref and post_fault(e)), None)
    target_ranks = {s for s in targets if rank_of(s) is not None}
    t_from = t_revert if t_revert is not None else t_ref
    progress = next(
        (
            e for e in tl.step_ends
            if e["t"] >= t_from and not post_fault(e)
            and (last_before is None or int(e["step"]) > last_before)
            and (not target_ranks or e["src"] in target_ranks)
        ),
        None,
    )
    if first_new is not None and (progress is None or first_new["t"] < progress["t"]):
        fm.restarted = True
        post_steps = [e for e in tl.step_ends if e["t"] >= t_ref and post_fault(e)]
        recovering = post_steps[0] if post_steps else None
        if recovering is not None:
            fm.recovery_s = recovering["t"] - t_inject
            fm.restarts_after = incarnation(recovering) - pre.get(recovering["src"], default_inc)
            resume_inc = incarnation(recovering)
            caught = next(
                (e for e in post_steps if last_before is None or int(e["step"]) >= last_before),
                None,
            )
            fm.catchup_s = caught["t"] - t_inject if caught is not None else None
        else:
            post = [e for e in tl.rank_events if e["t"] >= t_ref and post_fault(e)]
            fm.restarts_after = max(incarnation(e) - pre.get(e["src"], default_inc) for e in post)
            resume_inc = incarnation(first_new)
        fm.resumed_from = resumed_from(tl, resume_inc, t_ref, recovering)
        if last_before is None:
            fm.lost_steps = 0
        elif fm.resumed_from is not None:
            fm.lost_steps = max(last_before - fm.resumed_from, 0)
    else:
        fm.restarted = False
        fm.lost_steps = 0
        if progress is not None:
            fm.recovery_s = fm.catchup_s = progress["t"] - t_inject

    if run.detection is not None and run.detection.blind_to_progress(tl.probe_reports):
        # No step could have been seen, so "never recovered" would be the tool's blindness.
        fix = f"; {run.detection.progress_fix}" if run.detection.progress_fix else ""
        for key in ("recovery_s", "catchup_s", "lost_steps"):
            if getattr(fm, key) is None:
                fm.unknown[key] = "no source reports this workload's steps" + fix

    ctx = FaultContext(rec, fm, tl, run, injected, detection, t_inject)
    for family in families():
        if family.fault_metrics is not None and family.measures(rec):
            for key, value in (family.fault_metrics(ctx) or {}).items():
                fm.set_value(key, value)
    return fm
