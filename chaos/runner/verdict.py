"""Metrics vs targets -> pass/fail, with a reason per check that names both numbers.

``judge`` turns a scenario's ``Targets`` and one run's ``RunMetrics`` into a ``Verdict`` (the
run record's own type, ``chaos.runfiles.record``, kept in the journal as returned): a list of ``Check``s, each with the measured value, the bound and a sentence a user can act on
("f0-kill_rank: recovery 14.2 s > target 10 s"). Every metric target comes from the metric
catalogue (``chaos.metrics.catalogue``): its label, unit and wording are written there. Per-fault targets are checked once per fired
fault, so a run with two faults has two ``recovery_s`` checks. The verdict passes when every
check does.
"""

from __future__ import annotations

from typing import Any

from chaos.metrics import FaultMetrics, MetricSpec, RunMetrics
from chaos.metrics.catalogue import target_specs
from chaos.model.scenario import Bound, Targets
from chaos.runfiles.record import Check, MetricsRecord, Verdict

__all__ = ["Check", "Verdict", "judge", "judge_twin"]

_AGAINST_TWIN = frozenset({"data", "final_state", "stale_checkpoints", "reload_loss_dev"})
"""Checks whose measure is a comparison with the fault-free twin: its samples, its final
state, its state at each step, its loss after a restart."""
_INVALIDATES: dict[str, frozenset[str]] = {
    # A twin that trained the wrong samples reached the wrong weights and losses; its state at
    # each step is still what each of its steps made, so a checkpoint's freshness stands.
    "data": frozenset({"data", "final_state", "reload_loss_dev"}),
    # Stale checkpoints of its own leave its step digests and final state the training's.
    "stale_checkpoints": frozenset(),
}
"""Which comparisons a twin's miss of each correctness target makes wrong; any other miss
(its training not healthy, a restart of its own) makes every one wrong."""


def _check(name: str, ok: bool, value: Any, bound: Any, reason: str, fault: str | None = None) -> Check:
    return Check(name=name, ok=ok, value=value, bound=bound, reason=reason, fault=fault)


# -- formatting -------------------------------------------------------------------------


def _fmt_bound(b: float) -> str:
    """A target as the user wrote it: 2, 0.5, 15."""
    return str(int(b)) if float(b).is_integer() else f"{b:g}"


def _bound_text(bound: Bound, unit: str) -> str:
    parts = []
    if bound.min is not None:
        parts.append(f">= {_fmt_bound(bound.min)}{unit}")
    if bound.max is not None:
        parts.append(f"<= {_fmt_bound(bound.max)}{unit}")
    return " and ".join(parts) or "(no bound)"


def _bound_dict(bound: Bound) -> dict[str, float | None]:
    return {"min": bound.min, "max": bound.max}


def _check_bound(spec: MetricSpec, value: Any, bound: Bound, fault: str | None = None) -> Check:
    prefix = f"{fault}: " if fault else ""
    unit = spec.unit_suffix()
    v = spec.fmt_verdict(value)
    if bound.max is not None and value > bound.max:
        reason = f"{prefix}{spec.label} {v} > target {_fmt_bound(bound.max)}{unit}"
        return _check(spec.key, False, value, _bound_dict(bound), reason, fault)
    if bound.min is not None and value < bound.min:
        reason = f"{prefix}{spec.label} {v} < target {_fmt_bound(bound.min)}{unit}"
        return _check(spec.key, False, value, _bound_dict(bound), reason, fault)
    reason = f"{prefix}{spec.label} {v} {_bound_text(bound, unit)}"
    return _check(spec.key, True, value, _bound_dict(bound), reason, fault)


def _metric_check(spec: MetricSpec, bound: Bound, owner: Any, fault: str | None) -> Check:
    """One metric target against its value on ``owner`` (a FaultMetrics or the RunMetrics)."""
    value = getattr(owner, spec.key, None)
    unknown = (getattr(owner, "unknown", None) or {}).get(spec.key)
    if value is None and unknown:
        # Not measurable in this workload: the tool's gap, said as such with its fix.
        why = f"fault {fault}: {spec.label} unknown: {unknown}" if fault else f"{spec.label} unknown: {unknown}"
        if fault is not None:
            why += f" (target {spec.key} {_bound_text(bound, spec.unit_suffix())})"
        return _check(spec.key, False, None, _bound_dict(bound), why, fault)
    if value is None:
        why = spec.missing_reason(owner) if spec.missing_reason else f"{spec.label} unknown"
        if fault is not None:  # per fault, the sentence quotes the target missed
            why += f" (target {spec.key} {_bound_text(bound, spec.unit_suffix())})"
        return _check(spec.key, False, None, _bound_dict(bound), why, fault)
    check = _check_bound(spec, value, bound, fault)
    if spec.detail is not None:
        check.reason = (check.reason or "") + spec.detail(owner, value)
    return check


def _targeted(targets: Targets, scope: str) -> list[tuple[MetricSpec, Bound]]:
    """The catalogue's metrics of ``scope`` that the scenario sets a bound on, in order."""
    found = []
    for spec in target_specs():
        bound = targets.bound(spec.key)
        if spec.scope == scope and bound is not None:
            found.append((spec, bound))
    return found


# -- per-fault checks -------------------------------------------------------------------


def _fault_checks(targets: Targets, fm: FaultMetrics) -> list[Check]:
    fid = fm.fault_id
    checks = [_metric_check(spec, bound, fm, fid) for spec, bound in _targeted(targets, "fault")
              if spec.applies is None or spec.applies(fm)]
    if targets.attribution == "correct":
        if fm.attribution == "correct":
            checks.append(_check("attribution", True, "correct", "correct",
                                f"{fid}: attribution correct: {fm.attribution_detail}", fid))
        elif fm.attribution == "unknown":
            checks.append(_check("attribution", False, "unknown", "correct",
                                f"{fid}: attribution unknown: {fm.unknown.get('attribution') or fm.attribution_detail}",
                                fid))
        elif fm.attribution == "wrong":
            checks.append(_check("attribution", False, "wrong", "correct",
                                f"{fid}: wrong attribution: {fm.attribution_detail}", fid))
        else:
            checks.append(_check("attribution", False, "none", "correct",
                                f"{fid}: no attribution ({fm.attribution_detail})", fid))
    return checks


def _has_fault_targets(t: Targets) -> bool:
    return t.attribution is not None or bool(_targeted(t, "fault"))


# -- run-level checks -------------------------------------------------------------------


def _loss_within(m: RunMetrics, tolerance: float, prefix: str) -> Check:
    bound = {"max": tolerance}
    if m.nonfinite_loss_step is not None:
        return _check("final_state", False, None, bound,
                     f"{prefix}loss is not finite at step {m.nonfinite_loss_step}")
    if m.max_rel_loss_dev is None:
        return _check("final_state", False, None, bound,
                     f"{prefix}no step in common with the baseline to compare losses")
    steps = m.loss_dev_steps
    span = f"steps {steps[0]}-{steps[-1]}" if len(steps) > 1 else f"step {steps[0]}"
    dev = m.max_rel_loss_dev
    ok = dev <= tolerance
    op = "<=" if ok else "> tolerance"
    return _check("final_state", ok, dev, bound,
                 f"{prefix}max relative loss deviation {dev:.3g} {op} {tolerance:g} "
                 f"over {span}")


def _final_state(targets: Targets, m: RunMetrics) -> Check:
    mode = targets.final_state
    if not m.has_baseline:
        return _check("final_state", False, None, mode,
                     f"final_state {mode} needs a baseline run (set baseline: true)")
    if m.baseline_health_problem:
        return _check("final_state", False, None, mode,
                     f"final_state inconclusive: the fault-free baseline is not healthy "
                     f"({m.baseline_health_problem}), so matching it proves nothing")
    if mode == "loss_within":
        return _loss_within(m, targets.loss_tolerance, "")
    if m.world_size_changed:
        return _loss_within(
            m, targets.loss_tolerance,
            f"world size changed ({m.baseline_world_size} -> {m.final_world_size}), digest not "
            "comparable, judged by loss_within instead: ",
        )
    if m.baseline_digest is None:
        return _loss_within(m, targets.loss_tolerance,
                            "baseline has no digest, judged by loss_within instead: ")
    base = m.baseline_digest[:12]
    if m.final_digest is None:
        return _check("final_state", False, None, mode,
                     f"no final digest: the run did not finish (baseline {base})")
    if m.digest_match:
        return _check("final_state", True, m.final_digest, mode,
                     f"final digest {m.final_digest[:12]} matches baseline")
    return _check("final_state", False, m.final_digest, mode,
                 f"final digest {m.final_digest[:12]} != baseline {base}")


def _data(targets: Targets, m: RunMetrics | MetricsRecord) -> Check:
    """The exactly-once data checker's target (chaos/metrics/families/data.py)."""
    mode = targets.data
    bound = {"mode": mode, "max_lost": targets.data_max_lost, "max_duplicated": targets.data_max_duplicated}
    lost, dup = getattr(m, "data_lost", None), getattr(m, "data_duplicated", None)
    if lost is None or dup is None:
        return _check("data", False, None, bound, f"data {mode}: no sample reports: the workload reports none "
                     "(the harness does; a script calls probe.samples or wraps its dataset in probe.track)")
    rolled = getattr(m, "data_rolled_back_only", 0) or 0
    epochs = m.data_epochs or []
    value = {"lost": lost, "duplicated": dup, "rolled_back_only": rolled}
    problems = []
    if targets.data_max_lost is not None and lost > targets.data_max_lost:
        why = f" ({rolled} trained only by a rolled-back incarnation)" if rolled else ""
        problems.append(f"{lost} samples lost{why} > {targets.data_max_lost}")
    if targets.data_max_duplicated is not None and dup > targets.data_max_duplicated:
        problems.append(f"{dup} samples duplicated > {targets.data_max_duplicated}")
    where = ""
    bad = [r for r in epochs if r.get("lost") or r.get("duplicated")]
    if problems and bad:
        where = "; first in epoch {epoch}: {lost} lost, {duplicated} duplicated of {expected}".format(**bad[0])
    against = " (against the fault-free twin)" if m.has_baseline else ""
    if problems:
        return _check("data", False, value, bound, f"data {mode}: " + ", ".join(problems) + where + against)
    return _check("data", True, value, bound,
                 f"data {mode}: {m.data_samples} samples trained, {lost} lost, {dup} duplicated over "
                 f"{len(epochs)} epoch(s){against}")


def _completes(m: RunMetrics, status: str) -> Check:
    where = f"last step {m.final_step if m.final_step is not None else 'none'} of {m.steps_target}"
    if status == "completed" and m.completed:
        return _check("completes", True, status, True,
                     f"completed {m.final_step} of {m.steps_target} steps")
    if status == "completed":
        reason = f"run ended without reaching its last step ({where})"
    elif status == "hung":
        timeout = f" ({_fmt_bound(m.timeout_s)} s)" if m.timeout_s is not None else ""
        reason = f"run hung: no progress until timeout_s{timeout}; {where}"
    elif status == "failed":
        reason = f"run failed after {m.restart_count} restart(s); {where}"
    elif status == "interrupted":
        reason = f"run interrupted; {where}"
    else:
        reason = f"run {status}; {where}"
    return _check("completes", False, status, True, reason)


def judge_twin(targets: Targets, twin: MetricsRecord) -> list[Check]:
    """The scenario's correctness targets on the fault-free twin's own figures: its data
    (each sample once per epoch, as its own reports show), each catalogue metric marked
    ``correctness`` it measured (its checkpoints against its own step digests), and its
    health. A target the twin could not measure is left to the faulted run's check, which
    says why; a miss is the job's own bug, found before any fault."""
    checks: list[Check] = []
    if targets.data is not None and twin.data_lost is not None and twin.data_duplicated is not None:
        beyond = _beyond_padding(twin)
        checks.append(_data(targets, beyond))
        if beyond.data_duplicated != twin.data_duplicated:
            checks[-1].reason = (f"{checks[-1].reason} (not counting up to {(twin.world_size or 1) - 1} per "
                                 "epoch: a sampler's padding)")
    checks.extend(_metric_check(spec, bound, twin, None) for spec, bound in _targeted(targets, "run")
                  if spec.correctness and twin.value(spec.key) is not None)
    if twin.healthy is False:
        checks.append(_check("training_health", False, twin.first_nonfinite_step, "finite",
                             f"training is not healthy: {twin.health_problem}"))
    for c in checks:
        c.twin = True
        c.reason = f"fault-free twin: {c.reason}" + (
            "" if c.ok else "; the job's own bug before any fault (the twin ran none)")
    return checks


def _beyond_padding(twin: MetricsRecord) -> MetricsRecord:
    """The twin's duplicates less a sampler's padding: a DistributedSampler repeats up to
    world size - 1 samples per epoch so that every rank gets as many (the faulted run is
    held to the twin's repeats; the twin alone to this)."""
    padding = max((twin.world_size or 1) - 1, 0)
    epochs = [dict(r, duplicated=max(int(r.get("duplicated") or 0) - padding, 0)) for r in twin.data_epochs or []]
    return twin.model_copy(update={"data_epochs": epochs,
                                   "data_duplicated": sum(int(r["duplicated"]) for r in epochs)})


def _against_wrong_reference(checks: list[Check], misses: list[Check]) -> None:
    """Flag each comparison that a twin's own miss (``misses``) makes wrong."""
    for c in checks:
        why = [m.name for m in misses if c.name in _INVALIDATES.get(m.name, _AGAINST_TWIN)]
        if why:
            c.wrong_reference = True
            c.reason = (f"{c.reason} [against a wrong reference: the fault-free twin itself missed "
                        f"{', '.join(dict.fromkeys(why))}]")


def judge(targets: Targets, metrics: RunMetrics, status: str | None = None,
          twin: list[Check] | None = None) -> Verdict:
    """Check every target the scenario sets; ``status`` defaults to ``metrics.status``.
    ``twin``: the fault-free twin's own checks (``judge_twin``); its misses come first, and
    every comparison with it is flagged as against a wrong reference."""
    status = status or metrics.status
    misses = [c.model_copy() for c in twin or () if not c.ok]
    checks: list[Check] = []

    judge_unfired = _has_fault_targets(targets)
    for fm in metrics.faults:
        if fm.fired:
            continue
        if judge_unfired and fm.skipped:
            checks.append(_check("fault_fired", True, False, True,
                                f"fault {fm.fault_id} skipped ({fm.skipped}); its targets "
                                "were not exercised", fm.fault_id))
        elif judge_unfired:
            checks.append(_check("fault_fired", False, False, True,
                                f"planned fault {fm.fault_id} never fired", fm.fault_id))
        elif not fm.skipped and fm.planned_step is not None and status == "completed":
            # The job trained to its end past the planned step and the fault never fired (an
            # in-process fault at a fault point the job never calls): the experiment the
            # scenario names did not happen, so run-level targets alone cannot pass it.
            checks.append(_check("fault_fired", False, False, True,
                                f"planned fault {fm.fault_id} never fired although the job "
                                f"trained past step {fm.planned_step} (an in-process fault "
                                "needs the job to call its fault point)", fm.fault_id))
    for fm in metrics.faults:
        if fm.fired:
            checks.extend(_fault_checks(targets, fm))

    checks.extend(_metric_check(spec, bound, metrics, None) for spec, bound in _targeted(targets, "run"))
    if targets.final_state is not None:
        checks.append(_final_state(targets, metrics))
    if targets.data is not None:
        checks.append(_data(targets, metrics))
    if targets.completes:
        checks.append(_completes(metrics, status))
    if not metrics.healthy:
        # Always checked: a run that trains to NaN fails whatever targets it set.
        checks.append(_check("training_health", False, metrics.first_nonfinite_step, "finite",
                            f"training is not healthy: {metrics.health_problem}"))
    if misses:
        _against_wrong_reference(checks, misses)
    checks = misses + checks
    return Verdict(passed=all(c.ok for c in checks), checks=checks)
