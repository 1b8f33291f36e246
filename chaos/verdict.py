"""Metrics vs targets -> pass/fail, with a reason per check that names both numbers.

``judge`` turns a scenario's ``Targets`` and one run's ``RunMetrics`` into a ``Verdict``: a
list of ``Check``s, each with the measured value, the bound and a sentence a user can act on
("f0-kill_rank: recovery 14.2 s > target 10 s"). Per-fault targets are checked once per fired
fault, so a run with two faults has two ``recovery_s`` checks. The verdict passes when every
check does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from chaos.metrics import FaultMetrics, RunMetrics, json_safe
from chaos.model import Bound, Targets

__all__ = ["Check", "Verdict", "judge"]


@dataclass
class Check:
    name: str
    """The target checked: detection_s, recovery_s, catchup_s, lost_steps, goodput,
    false_detections, final_state, attribution, completes, fault_fired, training_health,
    sdc_detection_steps, contaminated_checkpoints."""
    ok: bool
    value: Any
    """What was measured (None when it could not be: undetected, never recovered...)."""
    bound: Any
    """The target: ``{"max": 2, "min": None}``, a mode (``matches_baseline``) or True."""
    reason: str
    """One sentence naming the measured value and the bound."""
    fault: str | None = None
    """The fault id for per-fault checks."""

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))


@dataclass
class Verdict:
    passed: bool
    checks: list[Check] = field(default_factory=list)

    def reasons(self) -> list[str]:
        """Why it failed: the failed checks' reasons, in check order (empty when passed)."""
        return [c.reason for c in self.checks if not c.ok]

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "checks": [c.to_dict() for c in self.checks]}


# -- formatting -------------------------------------------------------------------------


def _fmt_s(x: float) -> str:
    """Seconds with 1-2 decimals: 0.8, 0.35, 14.2."""
    if abs(x) >= 10:
        return f"{x:.1f}"
    s = f"{x:.2f}"
    return s[:-1] if s.endswith("0") else s


def _fmt_bound(b: float) -> str:
    """A target as the user wrote it: 2, 0.5, 15."""
    return str(int(b)) if float(b).is_integer() else f"{b:g}"


def _fmt_ratio(x: float) -> str:
    return f"{x:.2f}" if x >= 0.01 else f"{x:.2g}"


def _bound_text(bound: Bound, unit: str) -> str:
    parts = []
    if bound.min is not None:
        parts.append(f">= {_fmt_bound(bound.min)}{unit}")
    if bound.max is not None:
        parts.append(f"<= {_fmt_bound(bound.max)}{unit}")
    return " and ".join(parts) or "(no bound)"


def _bound_dict(bound: Bound) -> dict[str, float | None]:
    return {"min": bound.min, "max": bound.max}


def _check_bound(
    name: str, label: str, value: float, bound: Bound, unit: str, fmt: Any,
    fault: str | None = None,
) -> Check:
    prefix = f"{fault}: " if fault else ""
    v = fmt(value)
    if bound.max is not None and value > bound.max:
        reason = f"{prefix}{label} {v}{unit} > target {_fmt_bound(bound.max)}{unit}"
        return Check(name, False, value, _bound_dict(bound), reason, fault)
    if bound.min is not None and value < bound.min:
        reason = f"{prefix}{label} {v}{unit} < target {_fmt_bound(bound.min)}{unit}"
        return Check(name, False, value, _bound_dict(bound), reason, fault)
    reason = f"{prefix}{label} {v}{unit} {_bound_text(bound, unit)}"
    return Check(name, True, value, _bound_dict(bound), reason, fault)


# -- per-fault checks -------------------------------------------------------------------


def _fault_checks(targets: Targets, fm: FaultMetrics) -> list[Check]:
    checks: list[Check] = []
    fid = fm.fault_id
    how = "restarted but never completed a step" if fm.restarted else "no productive step after the fault"
    # (target name, label, value, unit, formatter, why the value is missing)
    bounded = [
        ("detection_s", "detection", fm.detection_s, " s", _fmt_s, f"fault {fid} undetected"),
        ("recovery_s", "recovery", fm.recovery_s, " s", _fmt_s, f"fault {fid} never recovered: {how}"),
        ("catchup_s", "catch-up", fm.catchup_s, " s", _fmt_s,
         f"fault {fid} never caught up to step {fm.last_step_before}"),
        ("lost_steps", "lost steps", fm.lost_steps, "", str,
         f"fault {fid}: lost steps unknown, training never resumed"),
    ]
    for name, label, value, unit, fmt, missing in bounded:
        bound = getattr(targets, name)
        if bound is None:
            continue
        if value is None:
            checks.append(Check(name, False, None, _bound_dict(bound),
                                f"{missing} (target {name} {_bound_text(bound, unit)})", fid))
            continue
        check = _check_bound(name, label, value, bound, unit, fmt, fid)
        if name == "lost_steps":
            check.reason += (f" (last step {fm.last_step_before}, resumed from {fm.resumed_from})"
                             if fm.restarted else " (no restart)")
        checks.append(check)
    if fm.failure_class == "corruption":
        checks.extend(_sdc_checks(targets, fm))
    if targets.attribution == "correct":
        if fm.attribution == "correct":
            checks.append(Check("attribution", True, "correct", "correct",
                                f"{fid}: attribution correct: {fm.attribution_detail}", fid))
        elif fm.attribution == "wrong":
            checks.append(Check("attribution", False, "wrong", "correct",
                                f"{fid}: wrong attribution: {fm.attribution_detail}", fid))
        else:
            checks.append(Check("attribution", False, "none", "correct",
                                f"{fid}: no attribution ({fm.attribution_detail})", fid))
    return checks


def _sdc_checks(targets: Targets, fm: FaultMetrics) -> list[Check]:
    """Silent-corruption targets, checked for faults of class corruption only."""
    checks: list[Check] = []
    fid = fm.fault_id
    bound = targets.sdc_detection_steps
    if bound is not None:
        if fm.sdc_detection_steps is None:
            checks.append(Check("sdc_detection_steps", False, None, _bound_dict(bound),
                                f"fault {fid} undetected: no corruption detector fired "
                                f"(target sdc_detection_steps {_bound_text(bound, '')})", fid))
        else:
            check = _check_bound("sdc_detection_steps", "corruption detected after",
                                 fm.sdc_detection_steps, bound, " steps", str, fid)
            check.reason += f" (by {fm.detector or fm.detected_by or 'unknown'})"
            checks.append(check)
    bound = targets.contaminated_checkpoints
    if bound is not None:
        check = _check_bound("contaminated_checkpoints", "contaminated checkpoints",
                             fm.contaminated_checkpoints, bound, "", str, fid)
        if fm.sdc_detection_steps is None:
            check.reason += " (undetected: counted to the end of the run)"
        checks.append(check)
    return checks


def _has_fault_targets(t: Targets) -> bool:
    return any(x is not None for x in (t.detection_s, t.recovery_s, t.catchup_s, t.lost_steps,
                                       t.attribution, t.sdc_detection_steps,
                                       t.contaminated_checkpoints))


# -- run-level checks -------------------------------------------------------------------


def _loss_within(m: RunMetrics, tolerance: float, prefix: str) -> Check:
    bound = {"max": tolerance}
    if m.nonfinite_loss_step is not None:
        return Check("final_state", False, None, bound,
                     f"{prefix}loss is not finite at step {m.nonfinite_loss_step}")
    if m.max_rel_loss_dev is None:
        return Check("final_state", False, None, bound,
                     f"{prefix}no step in common with the baseline to compare losses")
    steps = m.loss_dev_steps
    span = f"steps {steps[0]}-{steps[-1]}" if len(steps) > 1 else f"step {steps[0]}"
    dev = m.max_rel_loss_dev
    ok = dev <= tolerance
    op = "<=" if ok else "> tolerance"
    return Check("final_state", ok, dev, bound,
                 f"{prefix}max relative loss deviation {dev:.3g} {op} {tolerance:g} "
                 f"over {span}")


def _final_state(targets: Targets, m: RunMetrics) -> Check:
    mode = targets.final_state
    if not m.has_baseline:
        return Check("final_state", False, None, mode,
                     f"final_state {mode} needs a baseline run (set baseline: true)")
    if m.baseline_health_problem:
        return Check("final_state", False, None, mode,
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
        return Check("final_state", False, None, mode,
                     f"no final digest: the run did not finish (baseline {base})")
    if m.digest_match:
        return Check("final_state", True, m.final_digest, mode,
                     f"final digest {m.final_digest[:12]} matches baseline")
    return Check("final_state", False, m.final_digest, mode,
                 f"final digest {m.final_digest[:12]} != baseline {base}")


def _completes(m: RunMetrics, status: str) -> Check:
    where = f"last step {m.final_step if m.final_step is not None else 'none'} of {m.steps_target}"
    if status == "completed" and m.completed:
        return Check("completes", True, status, True,
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
    return Check("completes", False, status, True, reason)


def judge(targets: Targets, metrics: RunMetrics, status: str | None = None) -> Verdict:
    """Check every target the scenario sets; ``status`` defaults to ``metrics.status``."""
    status = status or metrics.status
    checks: list[Check] = []

    if _has_fault_targets(targets):
        for fm in metrics.faults:
            if fm.fired:
                continue
            if fm.skipped:
                checks.append(Check("fault_fired", True, False, True,
                                    f"fault {fm.fault_id} skipped ({fm.skipped}); its targets "
                                    "were not exercised", fm.fault_id))
            else:
                checks.append(Check("fault_fired", False, False, True,
                                    f"planned fault {fm.fault_id} never fired", fm.fault_id))
    for fm in metrics.faults:
        if fm.fired:
            checks.extend(_fault_checks(targets, fm))

    if targets.goodput is not None:
        if metrics.goodput is None:
            checks.append(Check("goodput", False, None, _bound_dict(targets.goodput),
                                "goodput unknown: no step completed"))
        else:
            checks.append(_check_bound("goodput", "goodput", metrics.goodput, targets.goodput,
                                       "", _fmt_ratio))
    if targets.false_detections is not None:
        check = _check_bound("false_detections", "false detections", metrics.false_detections,
                             targets.false_detections, "", str)
        if metrics.false_detection_events:
            first = metrics.false_detection_events[0]
            check.reason += (f" (first: {first.get('by')} blamed {first.get('suspect')} as "
                             f"{first.get('failure_class')}: {first.get('reason')})")
        checks.append(check)
    for name, label, unit, fmt in (("ckpt_blocked_s", "blocked by checkpoint saves", " s", _fmt_s),
                                   ("failed_saves", "failed checkpoint writes", "", str),
                                   ("rejected_checkpoints", "checkpoints rejected on load", "", str)):
        bound = getattr(targets, name)
        if bound is not None:
            checks.append(_check_bound(name, label, getattr(metrics, name), bound, unit, fmt))
    if targets.final_state is not None:
        checks.append(_final_state(targets, metrics))
    if targets.completes:
        checks.append(_completes(metrics, status))
    if not metrics.healthy:
        # Always checked: a run that trains to NaN fails whatever targets it set.
        checks.append(Check("training_health", False, metrics.first_nonfinite_step, "finite",
                            f"training is not healthy: {metrics.health_problem}"))
    return Verdict(passed=all(c.ok for c in checks), checks=checks)
