"""``trainchaos simulate``: configuration (+ measured runs) -> engine -> summarised results.

One call of :func:`run_simulation` reads and validates everything first (the config, every
``--sweep`` variant of it, the ``--from-runs`` journals), raising one ScaleInputError with
every issue, and only then simulates. Each variant runs with the same seed, so a sweep
compares policies on the same failures (common random numbers), and so does the search for
the best checkpoint interval, which re-costs one set of drawn failures under each interval.

``--from-stacks DIR`` costs each recovery design of a ``bench-stacks`` report the same way:
the config once per stack, with that stack's measured detection and restart figures (and,
where none of its runs lost a step, no rollback), on the same drawn failures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chaos.errors import ValidationIssue
from chaos.scale import analytic
from chaos.scale.config import ScaleConfig, read_config_yaml, validate_config
from chaos.scale.engine import (
    CheckpointSpec,
    ClassSpec,
    Events,
    JobModel,
    RecoverySpec,
    TierSpec,
    account,
    draw_events,
)
from chaos.scale.issues import ScaleInputError
from chaos.scale.runs import Measured, RunSamples, read_runs, read_stack_runs
from chaos.scale.sweep import apply, combinations, parse_sweep

__all__ = ["Outcome", "build_model", "run_simulation", "search_interval", "stat", "summarize"]

Z95 = 1.959963984540054
SEARCH_SPAN = 8.0
"""The interval search scans Young's interval / SEARCH_SPAN .. x SEARCH_SPAN."""


@dataclass
class Outcome:
    """Everything ``simulate`` prints and writes."""

    config_path: str
    name: str
    trials: int
    seed: int
    summary: dict[str, Any]
    sweep_keys: list[str] = field(default_factory=list)
    sweep: list[dict[str, Any]] = field(default_factory=list)
    """One row per combination: {"values": {key: value}, "summary": {...}}."""
    runs: dict[str, Any] | None = None
    designs: list[dict[str, Any]] = field(default_factory=list)
    """``--from-stacks``: one row per stack: {"design", "runs", "figures", "summary"}."""
    from_stacks: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"config": self.config_path, "name": self.name, "trials": self.trials,
                "seed": self.seed, "from_runs": self.runs, "summary": self.summary,
                "sweep": {"keys": self.sweep_keys, "rows": self.sweep} if self.sweep else None,
                "from_stacks": {"dir": self.from_stacks, "designs": self.designs} if self.designs else None}


def run_simulation(config_path: str, *, from_runs: str | None = None, sweeps: list[str] | None = None,
                   trials: int | None = None, seed: int | None = None, search: bool = True,
                   from_stacks: str | None = None) -> Outcome:
    """Validate every input, then simulate the config and each sweep combination (or, with
    ``from_stacks``, each stack's recovery design)."""
    if from_stacks is not None:
        return _simulate_designs(config_path, from_stacks, from_runs, sweeps, trials, seed)
    raw = read_config_yaml(config_path)
    runs = read_runs(from_runs) if from_runs is not None else None
    measured = (runs.fault_types, runs.lost_work_types) if runs else (set(), set())
    parsed = [parse_sweep(s) for s in sweeps or ()]
    issues: list[ValidationIssue] = []
    cfg = _validated(raw, config_path, measured, from_runs, issues)
    variants: list[tuple[dict[str, Any], ScaleConfig | None]] = []
    for values in combinations(parsed):
        label = f"{config_path} (--sweep {', '.join(f'{k}={v}' for k, v in values.items())})"
        try:
            data = apply(raw, values)
        except ScaleInputError as exc:
            issues.extend(exc.issues)
            continue
        variants.append((values, _validated(data, label, measured, from_runs, issues)))
    if issues:
        raise ScaleInputError(_unique(issues))
    assert cfg is not None

    def summary_of(c: ScaleConfig) -> dict[str, Any]:
        model, inputs = build_model(c, runs)
        return summarize(c, model, inputs, trials if trials is not None else c.trials,
                         seed if seed is not None else c.seed, search=search)

    summary = summary_of(cfg)
    rows = []
    for values, variant in variants:
        assert variant is not None
        rows.append({"values": values, "summary": summary_of(variant)})
    runs_info = None
    if runs is not None:
        runs_info = {"dir": runs.root, "journals": runs.journals, "samples": len(runs.samples),
                     "fault_types": sorted(runs.fault_types), "unusable": runs.unusable,
                     "unreadable": runs.unreadable}
    return Outcome(config_path=config_path, name=cfg.name, trials=summary["trials"],
                   seed=summary["seed"], summary=summary, sweep_keys=[s.key for s in parsed],
                   sweep=rows, runs=runs_info)


def _simulate_designs(config_path: str, from_stacks: str, from_runs: str | None, sweeps: list[str] | None,
                      trials: int | None, seed: int | None) -> Outcome:
    """The config once as written (the summary) and once per stack of a bench-stacks report."""
    clash = [flag for flag, given in (("--from-runs", from_runs), ("--sweep", sweeps)) if given]
    if clash:
        raise ScaleInputError([ValidationIssue(from_stacks, "--from-stacks", f"not with {' or '.join(clash)}: "
                                               "each design is costed with its own measured figures")])
    raw = read_config_yaml(config_path)
    stacks = read_stack_runs(from_stacks)
    issues: list[ValidationIssue] = []
    cfg = _validated(raw, config_path, (set(), set()), None, issues)
    configs = {stack: _validated(raw, f"{config_path} (--from-stacks {stack})",
                                 (runs.fault_types, runs.lost_work_types), f"{from_stacks} ({stack})", issues)
               for stack, runs in stacks.items()}
    if issues:
        raise ScaleInputError(_unique(issues))
    assert cfg is not None
    n_trials = trials if trials is not None else cfg.trials
    run_seed = seed if seed is not None else cfg.seed
    summary = summarize(cfg, *build_model(cfg, None), n_trials, run_seed, search=False)
    designs = []
    for stack, runs in stacks.items():
        stack_cfg = configs[stack]
        assert stack_cfg is not None
        model, inputs = build_model(stack_cfg, runs, design=True)
        overall = runs.overall()
        assert overall is not None  # read_stack_runs keeps stacks with samples only
        designs.append({
            "design": stack,
            "runs": {"journals": runs.journals, "samples": len(runs.samples),
                     "fault_types": sorted(runs.fault_types), "unusable": runs.unusable},
            "rolled_back": {t: (m.lost_steps_max is None or m.lost_steps_max > 0)
                            for t in sorted(runs.fault_types) if (m := runs.for_types([t])) is not None},
            "figures": {"detection_s": overall.detection_s, "detection_range": overall.detection_range,
                        "restart_s": overall.restart_s, "restart_range": overall.restart_range,
                        "lost_steps_max": overall.lost_steps_max,
                        "rollback": overall.lost_steps_max is None or overall.lost_steps_max > 0},
            "summary": summarize(stack_cfg, model, inputs, n_trials, run_seed, search=False),
        })
    return Outcome(config_path=config_path, name=cfg.name, trials=n_trials, seed=run_seed,
                   summary=summary, designs=designs, from_stacks=from_stacks)


def _validated(data: dict[str, Any], label: str, measured: tuple[set[str], set[str]],
               from_runs: str | None, issues: list[ValidationIssue]) -> ScaleConfig | None:
    try:
        return validate_config(data, label, measured_types=measured[0],
                               measured_lost_types=measured[1], from_runs=from_runs)
    except ScaleInputError as exc:
        issues.extend(exc.issues)
        return None


def _unique(issues: list[ValidationIssue]) -> list[ValidationIssue]:
    seen: set[tuple[str, str]] = set()
    out = []
    for issue in issues:  # a base-config problem repeats in every sweep variant: say it once
        key = (issue.location, issue.message)
        if key not in seen:
            seen.add(key)
            out.append(issue)
    return out


# --------------------------------------------------------------------------- config -> model


def build_model(cfg: ScaleConfig, runs: RunSamples | None, *,
                design: bool = False) -> tuple[JobModel, list[dict[str, Any]]]:
    """The engine's numeric model, and per class where each figure came from. ``design``:
    ``runs`` are one recovery design's (``--from-stacks``), and a class left to the simulated
    rollback loses no work when none of the design's runs of it lost a step (its survivors
    train on, as torchft's do, rather than rolling back to a checkpoint)."""
    defaults = cfg.class_defaults
    specs, inputs = [], []
    for c in cfg.classes:
        measured = runs.for_types(c.mapped_fault_types()) if runs is not None else None
        figures, sources = {}, {}
        for name in ("detection_s", "restart_s"):
            value, source = _figure(c, name, measured, defaults)
            figures[name], sources[name] = value, source
        lost: float | None = None
        if c.lost_work == "fixed":
            lost, sources["lost_work"] = c.lost_work_s, "config (fixed)"
        elif c.lost_work == "measured":
            # validate_config checked that a measurement with a step time exists
            assert measured is not None and measured.lost_work_s is not None
            lost, sources["lost_work"] = measured.lost_work_s, _measured_source(measured)
        elif design and measured is not None and measured.lost_steps_max == 0:
            lost, sources["lost_work"] = 0.0, f"none: no step lost in {measured.n} measured run(s) (no rollback)"
        else:
            sources["lost_work"] = "rollback (simulated)"
        spec = ClassSpec(name=c.name, per_hour=c.failures_per_hour(cfg.job),
                         detection_s=figures["detection_s"], restart_s=figures["restart_s"],
                         scope=c.effective_scope, nodes_out=c.nodes_out, lost_work_s=lost)
        specs.append(spec)
        inputs.append({"name": c.name, "label": c.label or c.name, "per_hour": spec.per_hour,
                       "scope": spec.scope, "nodes_out": spec.nodes_out,
                       "detection_s": spec.detection_s, "restart_s": spec.restart_s,
                       "lost_work_s": lost, "sources": sources,
                       "measured_n": measured.n if measured else 0,
                       "measured_unusable": measured.unusable if measured else 0})
    ck = cfg.checkpoint
    tiers = tuple(TierSpec(every=t.every, blocking_s=t.blocking_s, persist_s=t.persist_s,
                           survives=tuple(t.survives)) for t in ck.effective_tiers())
    rec = cfg.recovery
    spacing = None
    if cfg.maintenance is not None:
        if cfg.maintenance.count is not None:
            spacing = cfg.job.window_s / cfg.maintenance.count if cfg.maintenance.count else None
        else:
            spacing = (cfg.maintenance.every_h or 0.0) * 3600.0
    model = JobModel(
        devices=cfg.job.devices, devices_per_node=cfg.job.devices_per_node,
        window_s=cfg.job.window_s, classes=tuple(specs),
        checkpoint=CheckpointSpec(interval_s=ck.interval_s, tiers=tiers),
        recovery=RecoverySpec(mode=rec.mode, spare_nodes=rec.spare_nodes or 0,
                              repair_s=rec.repair_h * 3600.0, replace_s=rec.replace_s),
        maintenance_spacing_s=spacing,
        maintenance_duration_s=cfg.maintenance.duration_s if cfg.maintenance else 0.0,
    )
    return model, inputs


def _figure(c: Any, name: str, measured: Measured | None, defaults: Any) -> tuple[float, str]:
    # Precedence: a figure written on the class, then a measurement, then class_defaults
    # (the config validated that one of them exists).
    value = getattr(c, name)
    if value is not None:
        return float(value), "config"
    if measured is not None:
        got = measured.detection_s if name == "detection_s" else measured.restart_s
        if got is not None:
            return float(got), _measured_source(measured)
    default = getattr(defaults, name, None) if defaults is not None else None
    assert default is not None, f"{c.name}.{name}: validated config without a figure"
    return float(default), "class_defaults"


def _measured_source(measured: Measured) -> str:
    return f"measured (median of {measured.n}: {', '.join(measured.fault_types)})"


# --------------------------------------------------------------------------- statistics


def stat(values: np.ndarray) -> dict[str, float]:
    """Mean with its 95 % confidence interval (normal approximation over trials), and the
    5th-95th percentile range of single trials (what one run of the job may see)."""
    values = np.asarray(values, dtype=float)
    n = values.size
    mean = float(values.mean())
    half = Z95 * float(values.std(ddof=1)) / math.sqrt(n) if n > 1 else 0.0
    lo, hi = np.percentile(values, [5, 95])
    return {"mean": mean, "ci_low": mean - half, "ci_high": mean + half,
            "p5": float(lo), "p95": float(hi)}


def summarize(cfg: ScaleConfig, model: JobModel, inputs: list[dict[str, Any]], trials: int,
              seed: int, *, search: bool = True) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    events = draw_events(model, trials, rng)
    res = account(model, events)
    gpu_h = model.devices / 3600.0
    window_h = model.window_s / 3600.0
    unplanned = res.interruptions[:-1].sum(axis=0)
    expected_total = model.unplanned_per_hour * window_h
    classes = []
    for i, spec in enumerate(model.classes):
        counts = res.interruptions[i]
        lost = (res.detection_s[i] + res.restart_s[i] + res.wait_s[i] + res.lost_work_s[i]) * gpu_h
        classes.append({
            **inputs[i],
            "expected": spec.per_hour * window_h,
            "interruptions": stat(counts),
            "share": float(counts.mean() / unplanned.mean()) if unplanned.mean() > 0 else 0.0,
            "lost_gpu_h": {
                "detection": float(res.detection_s[i].mean() * gpu_h),
                "restart": float(res.restart_s[i].mean() * gpu_h),
                "waiting_for_node": float(res.wait_s[i].mean() * gpu_h),
                "lost_work": float(res.lost_work_s[i].mean() * gpu_h),
                "total": stat(lost),
            },
        })
    mtbf_s = 3600.0 / model.unplanned_per_hour if model.unplanned_per_hour > 0 else math.inf
    blocking = model.checkpoint.mean_blocking_s
    intervals: dict[str, Any] = {"configured_s": model.checkpoint.interval_s,
                                 "checkpoint_cost_s": blocking, "mtbf_s": mtbf_s}
    if math.isfinite(mtbf_s) and blocking > 0:
        intervals["young_s"] = analytic.young_interval(mtbf_s, blocking)
        intervals["daly_s"] = analytic.daly_interval(mtbf_s, blocking)
        if search:
            intervals["search"] = search_interval(model, events, intervals["young_s"])
    else:
        intervals["note"] = ("no failures: checkpoints only cost" if not math.isfinite(mtbf_s)
                             else "checkpoints cost nothing: a shorter interval is always better")
    total_lost = model.window_s - res.productive_s + res.degraded_s
    return {
        "name": cfg.name,
        "source": cfg.source,
        "job": {"devices": model.devices, "devices_per_node": model.devices_per_node,
                "nodes": model.devices // model.devices_per_node, "days": cfg.job.days,
                "gpu_hours": model.devices * window_h},
        "recovery": {"mode": model.recovery.mode, "spare_nodes": model.recovery.spare_nodes,
                     "repair_h": model.recovery.repair_s / 3600.0, "replace_s": model.recovery.replace_s},
        "checkpoint": {"interval_s": model.checkpoint.interval_s, "mode": cfg.checkpoint.mode,
                       "tiers": [t.model_dump() for t in cfg.checkpoint.effective_tiers()]},
        "trials": trials,
        "seed": seed,
        "interruptions": {"unplanned": stat(unplanned), "expected_unplanned": expected_total,
                          "poisson_se": analytic.poisson_se(expected_total, trials),
                          "planned": stat(res.interruptions[-1])},
        "classes": classes,
        "ettr": stat(res.ettr),
        "goodput": stat(res.goodput),
        "lost_gpu_h": {
            "failures": stat((res.detection_s + res.restart_s + res.wait_s + res.lost_work_s).sum(axis=0) * gpu_h),
            "checkpointing": stat(res.checkpoint_s * gpu_h),
            "planned_maintenance": stat(res.maintenance_s * gpu_h),
            "elastic_capacity": stat(res.degraded_s * gpu_h),
            "total": stat(total_lost * gpu_h),
        },
        "first_order_ettr": _first_order(model),
        "intervals": intervals,
    }


def _first_order(model: JobModel) -> float | None:
    """The closed form (chaos.scale.analytic) for this model, where it applies: one tier,
    rollback losses; downtime is the rate-weighted mean over classes."""
    if len(model.checkpoint.tiers) != 1 or model.unplanned_per_hour <= 0:
        return None
    if any(c.lost_work_s is not None for c in model.classes):
        return None
    tier = model.checkpoint.tiers[0]
    rate = model.unplanned_per_hour
    downtime = sum(c.per_hour * (c.detection_s + c.restart_s) for c in model.classes) / rate
    if model.recovery.mode == "restart":
        downtime += sum(c.per_hour for c in model.classes if c.nodes_out) / rate * (model.recovery.replace_s or 0.0)
    value = analytic.first_order_ettr(3600.0 / rate, model.checkpoint.interval_s, tier.blocking_s,
                                      downtime, tier.persist_s)
    if model.maintenance_spacing_s:
        value -= model.maintenance_duration_s / model.maintenance_spacing_s
    return value


# --------------------------------------------------------------------------- interval search


def search_interval(model: JobModel, events: Events, young_s: float) -> dict[str, Any]:
    """The checkpoint interval with the best mean ETTR, by re-costing the same failures.

    A coarse log grid over young/8 .. young*8, a fine one around its best point, and the
    vertex of a parabola fitted to ETTR over log(interval) on the fine grid (the curve is
    flat near the optimum, so the fit is steadier than the best single point).
    """
    floor = model.window_s / 4_000_000  # keep the engine's checkpoint table bounded
    lo, hi = max(young_s / SEARCH_SPAN, floor), max(young_s * SEARCH_SPAN, floor * 2)

    def ettr(interval: float) -> float:
        spec = CheckpointSpec(interval_s=float(interval), tiers=model.checkpoint.tiers)
        return float(account(model, events, spec).ettr.mean())

    coarse = np.geomspace(lo, hi, 13)
    coarse_y = np.array([ettr(x) for x in coarse])
    best = int(np.argmax(coarse_y))
    fine = np.geomspace(coarse[max(best - 1, 0)], coarse[min(best + 1, coarse.size - 1)], 9)
    fine_y = np.array([ettr(x) for x in fine])
    x = np.log(fine)
    a, b, _ = np.polyfit(x, fine_y, 2)
    if a < 0 and x[0] <= -b / (2 * a) <= x[-1]:
        optimum = float(np.exp(-b / (2 * a)))
        how = "parabola vertex"
    else:
        optimum = float(fine[int(np.argmax(fine_y))])
        how = "best grid point"
    points = sorted(zip(np.concatenate([coarse, fine]).tolist(),
                        np.concatenate([coarse_y, fine_y]).tolist(), strict=True))
    return {"optimum_s": optimum, "ettr_at_optimum": ettr(optimum), "method": how,
            "curve": [{"interval_s": p, "ettr": y} for p, y in points]}
