"""The run's metrics: every fault's (``chaos.metrics.per_fault``), restarts and what they
lost, goodput over the surviving lineage, health, false detections, correctness against the
fault-free baseline; then what each registered metric family measures over the run
(definitions: docs/metrics.md)."""

from __future__ import annotations

import math
import statistics
from typing import Any

from chaos.contract import NONFINITE_DETECTOR
from chaos.metrics.family import RunContext
from chaos.metrics.per_fault import fault_metrics as measure_fault
from chaos.metrics.records import BaselineInfo, FaultRecord, RunInfo, RunMetrics
from chaos.metrics.registry import families
from chaos.metrics.timeline import (
    Event,
    Timeline,
    float_or_none,
    incarnation,
    int_or_none,
    resumed_from,
    surviving_lineage,
)

__all__ = ["LOSS_DEV_LAST_K", "compute_metrics"]

LOSS_DEV_LAST_K = 10
"""Steps (the last ones present in both runs) over which the loss deviation is measured."""


def _worst(values: list[Any]) -> Any:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def compute_metrics(
    events: list[Event],
    faults: list[FaultRecord],
    run: RunInfo,
    baseline: BaselineInfo | None = None,
) -> RunMetrics:
    """Every metric of one run from its merged timeline (definitions: docs/metrics.md)."""
    tl = Timeline(events, run.t_stop)

    t_injects: list[float | None] = []
    for rec in faults:
        t = rec.t_inject
        if t is None:
            injected = tl.first_fault_event("fault_injected", rec.fault_id)
            t = injected["t"] if injected is not None else None
        t_injects.append(t)
    fault_metrics = []
    for rec, t in zip(faults, t_injects, strict=True):
        # A corruption is only ever noticed by a corruption detector: only another
        # corruption fault can take its detection.
        later = [u for other, u in zip(faults, t_injects, strict=True)
                 if u is not None and t is not None and u > t
                 and (rec.failure_class != "corruption" or other.failure_class == "corruption")]
        fault_metrics.append(measure_fault(rec, tl, run, t, min(later, default=None)))

    rank_starts = [e for e in tl.rank_events if e.get("kind") == "rank_start"]
    final_world_size = run.world_size
    for e in reversed(rank_starts):
        ws = int_or_none(e.get("world_size"))
        if ws is not None:
            final_world_size = ws
            break

    run_ends = [e for e in tl.events if e.get("kind") == "run_end"]
    run_end = run_ends[-1] if run_ends else None
    lineage = surviving_lineage(tl)
    final_step = None
    final_loss = None
    if run_end is not None and int_or_none(run_end.get("step")) is not None:
        final_step = int(run_end["step"])
        final_loss = float_or_none(run_end.get("loss"))
    elif lineage:
        final_step, _, final_loss = lineage[-1]
    reached = [int(e["step"]) for e in tl.step_ends]
    if final_step is not None:
        reached.append(final_step)
    completed = run.status == "completed" and max(reached, default=-1) >= run.steps_target

    wall_s = run.t_end - run.t_start
    productive_s = sum(d for _, d, _ in lineage)
    fired = [fm for fm in fault_metrics if fm.fired]
    m = RunMetrics(
        status=run.status, t_start=run.t_start, t_end=run.t_end, wall_s=wall_s,
        steps_target=run.steps_target, world_size=run.world_size,
        final_world_size=final_world_size, timeout_s=run.timeout_s, completed=completed,
        final_step=final_step, final_digest=run_end.get("digest") if run_end else None,
        final_loss=final_loss,
        restart_count=max((incarnation(e) for e in tl.events), default=0),
        productive_s=productive_s,
        goodput=productive_s / wall_s if wall_s > 0 else None,
        lost_work_rank_s=(wall_s - productive_s) * run.world_size if wall_s > 0 else None,
        faults=fault_metrics, faults_fired=len(fired),
        detection_s=_worst([fm.detection_s for fm in fired]),
        recovery_s=_worst([fm.recovery_s for fm in fired]),
        catchup_s=_worst([fm.catchup_s for fm in fired]),
        lost_steps=_worst([fm.lost_steps for fm in fired]),
        undetected=any(fm.detection_s is None and "detection_s" not in fm.unknown for fm in fired),
        unrecovered=any(fm.recovery_s is None for fm in fired),
    )
    m.twin_step_s, m.ettr = _ettr(
        lineage, tl, [t for fm, t in zip(fault_metrics, t_injects, strict=True) if fm.fired and t is not None],
        final_step, run.t_end)
    _account_restarts(m, tl, faults, t_injects)
    if fired:
        m.lost_steps = _worst([fm.lost_steps for fm in fired])
    _detector_overhead(m, run_end)
    _check_health(m, lineage, run_end, tl)
    m.false_detection_events = _false_detections(tl, faults, t_injects)
    m.false_detections = len(m.false_detection_events)
    ctx = RunContext(tl, run, m, baseline)
    for family in families():
        if family.run_metrics is not None:
            for key, value in (family.run_metrics(ctx) or {}).items():
                m.set_value(key, value)
    if baseline is not None:
        _compare_to_baseline(m, baseline, lineage)
    return m


def _ettr(lineage: list[tuple[int, float, float | None]], tl: Timeline, t_injects: list[float],
          final_step: int | None, t_end: float) -> tuple[float | None, float | None]:
    """The effective training time ratio against a fault-free twin: the steps the run kept
    from its first step to its end / the steps the twin makes in that time. The twin's step
    takes the mean duration of the steps the run kept, less each step a fault struck (rank
    0's first step to end after an injection: one that waited the fault out): the job's own
    pace, checkpoints included, on the same host under the same load (a twin run at another
    time meets another load: on a shared machine it swings tenfold within minutes). So,
    unlike goodput, it charges the step a survivor spends waiting out a failure. Returns
    (that step time, the ratio); None without two such steps."""
    ref = [e for e in tl.step_ends if e["src"] == "rank-0"]
    if not ref or final_step is None:
        return None, None
    struck = {int(next(e["step"] for e in ref if e["t"] > t)) for t in t_injects if ref[-1]["t"] > t}
    durations = [d for step, d, _ in lineage if step not in struck]
    if len(durations) < 2:
        return None, None
    twin_step_s = statistics.fmean(durations)
    first = ref[0]
    if twin_step_s <= 0 or t_end <= first["t"]:
        return None, None
    return twin_step_s, (final_step - int(first["step"])) * twin_step_s / (t_end - first["t"])


def _account_restarts(m: RunMetrics, tl: Timeline, faults: list[FaultRecord],
                      t_injects: list[float | None]) -> None:
    """Every group restart, its lost steps and the fault that caused it (docs/metrics.md)."""
    ref = [e for e in tl.rank_events if e["src"] == "rank-0"]
    first_of: dict[int, Event] = {}
    for e in ref:
        first_of.setdefault(incarnation(e), e)
    by_fault = {fm.fault_id: fm for fm in m.faults}
    fired = sorted((t, rec.fault_id) for rec, t in zip(faults, t_injects, strict=True) if t is not None)
    prev_resumed: int | None = None
    for inc in sorted(k for k in first_of if k > 0):
        t = first_of[inc]["t"]
        first_step = next((e for e in tl.step_ends if e["src"] == "rank-0" and incarnation(e) == inc), None)
        # What the generation before reached: its own steps, else where it had resumed from
        # (a restart that fails again before a step loses nothing a second time).
        reached = [int(e["step"]) for e in tl.step_ends if incarnation(e) == inc - 1 and e["t"] < t]
        last = max(reached) if reached else prev_resumed if inc > 1 else tl.last_step(t)
        resumed = resumed_from(tl, inc, t, first_step, superseded=inc + 1 in first_of)
        prev_resumed = resumed if resumed is not None else last
        lost = 0 if last is None else (max(last - resumed, 0) if resumed is not None else None)
        cause = next((fid for t_fault, fid in reversed(fired) if t_fault <= t), None)
        m.restarts.append({"t": t, "incarnation": inc, "last_step_before": last,
                           "resumed_from": resumed, "lost_steps": lost, "cause": cause})
        if cause is None:
            m.unexplained_restarts += 1
            continue
        fm = by_fault[cause]
        fm.restarts_caused += 1
        # The fault's own recovery restart keeps its lost steps as defined per fault, above.
        own_recovery = fm.restarts_caused == 1 and fm.restarted
        if not own_recovery and lost is not None:
            fm.lost_steps = lost if fm.restarts_caused == 1 else (fm.lost_steps or 0) + lost
        fm.restarted = True
    m.lost_steps_total = sum(r["lost_steps"] or 0 for r in m.restarts)


def _detector_overhead(m: RunMetrics, run_end: Event | None) -> None:
    if run_end is None or not isinstance(run_end.get("detector_s"), dict):
        return
    seconds = {str(k): v for k, v in run_end["detector_s"].items() if float_or_none(v) is not None}
    m.detector_seconds = seconds
    train_s = float_or_none(run_end.get("train_s"))
    spent = sum(float(v) for v in seconds.values())
    if train_s is not None and train_s > spent:
        m.detector_overhead_pct = 100.0 * spent / (train_s - spent)


def _check_health(m: RunMetrics, lineage: list[tuple[int, float, float | None]],
                  run_end: Event | None, tl: Timeline) -> None:
    bad = next((step for step, _, loss in lineage if loss is not None and not math.isfinite(loss)), None)
    if bad is not None:
        m.first_nonfinite_step = bad
        m.healthy, m.health_problem = False, f"loss is not finite from step {bad} on"
    elif run_end is not None and run_end.get("weights_finite") is False:
        m.healthy, m.health_problem = False, "the final weights hold NaN or Inf"
    elif not m.completed and (stopped := _stopped_on_nonfinite(tl)) is not None:
        m.first_nonfinite_step = stopped
        m.healthy, m.health_problem = False, (f"the non-finite guard stopped training at step {stopped} "
                                              "and no step got past it")


def _stopped_on_nonfinite(tl: Timeline) -> int | None:
    """The step of the last non-finite guard's detection when nothing trained past it.

    The guard stops a step before its non-finite loss is reported, so a job that trains to
    NaN again after every rollback (or may not restart) has no such loss in its lineage: the
    guard's detection is the only evidence, and such a run is not healthy."""
    guarded = [e for e in tl.detections if e.get("detector") == NONFINITE_DETECTOR
               and int_or_none(e.get("step")) is not None]
    if not guarded:
        return None
    last = guarded[-1]
    step = int(last["step"])
    past = any(s["t"] > last["t"] and int(s["step"]) >= step for s in tl.step_ends)
    return None if past else step


def _false_detections(tl: Timeline, faults: list[FaultRecord],
                      t_injects: list[float | None]) -> list[dict[str, Any]]:
    """Detections that blamed a process no fault hit (definition: docs/metrics.md)."""
    fired = [(t, set(rec.target_srcs), rec) for rec, t in zip(faults, t_injects, strict=True) if t is not None]
    false: list[dict[str, Any]] = []
    recovering_until: float | None = None  # end of the recovery the last alarm started
    for e in tl.detections:
        suspect = e.get("suspect")
        consequence = recovering_until is not None and e["t"] < recovering_until
        # A later alarm's recovery ends at the first step of an incarnation started after it.
        if not consequence:
            pre, default_inc = tl.pre_incarnations(e["t"])
            restart_step = next((s for s in tl.step_ends if s["t"] > e["t"]
                                 and incarnation(s) > pre.get(s["src"], default_inc)), None)
            recovering_until = restart_step["t"] if restart_step is not None else math.inf
        if suspect is None or consequence:
            continue
        # A fault whose family says it cannot explain this class (a slow network blamed for
        # a failure: chaos/faults/network/metrics.py) leaves it a false alarm.
        if any(t <= e["t"] and suspect in srcs and _explains(rec, e.get("failure_class"))
               for t, srcs, rec in fired):
            continue
        false.append({"t": e["t"], "by": e.get("by") or e.get("src"), "suspect": suspect,
                      "failure_class": e.get("failure_class"), "reason": e.get("reason")})
    return false


def _explains(rec: FaultRecord, detection_class: Any) -> bool:
    return all(f.explains_detection(rec, detection_class) for f in families()
               if f.explains_detection is not None and f.measures(rec))


def _compare_to_baseline(
    m: RunMetrics, baseline: BaselineInfo, lineage: list[tuple[int, float, float | None]]
) -> None:
    m.has_baseline = True
    m.baseline_health_problem = baseline.health_problem
    m.baseline_digest = baseline.digest
    m.baseline_world_size = baseline.world_size
    m.world_size_changed = m.final_world_size != baseline.world_size
    if baseline.digest is None or m.world_size_changed:
        m.digest_match = None
    else:
        m.digest_match = m.final_digest is not None and m.final_digest == baseline.digest

    base = {}
    for k, v in baseline.losses.items():
        step, loss = int_or_none(k), float_or_none(v)
        if step is not None and loss is not None and math.isfinite(loss):
            base[step] = loss
    ours = {step: loss for step, _, loss in lineage if loss is not None}
    common = sorted(set(ours) & set(base))[-LOSS_DEV_LAST_K:]
    m.loss_dev_steps = common
    if not common:
        return
    devs = []
    for step in common:
        if not math.isfinite(ours[step]):
            m.nonfinite_loss_step = step
            m.max_rel_loss_dev = None
            return
        devs.append(abs(ours[step] - base[step]) / max(abs(base[step]), 1e-12))
    m.max_rel_loss_dev = max(devs)
