"""A game-day plan: the exercise as ordered steps against a live run's nodes.

```yaml
name: freeze-a-node
run: latest                  # the newest live docker run, or a run id (trainchaos-...)
window_s: 10                 # the pace window: goodput = pace now / pace before the first inject
stop_when: ["goodput < 0.3", "dead_s > 60"]
steps:
  - observe: {seconds: 5}
  - name: freeze
    inject: {type: container_pause, target: {node: 1}}
  - check: {condition: "detections >= 1", within_s: 20, since: freeze}
  - ask: "Did the on-call page fire?"
  - revert: freeze
  - wait: {condition: "steps_per_s > 0", within_s: 60}
```

Conditions are ``<metric> <op> <number>`` over the metrics ``chaos.gameday.observe`` keeps
(``METRICS``); a plan is validated whole (every error with its location) before anything is
resolved or touched.
"""

from __future__ import annotations

import operator
import re
from typing import Any

from pydantic import Field, ValidationError, model_validator

from chaos.errors import ScenarioError, ValidationIssue
from chaos.model.types import StrictModel

__all__ = ["METRICS", "Condition", "Plan", "Step", "load_plan", "parse_condition"]

METRICS: dict[str, str] = {
    "step": "highest training step reported so far",
    "steps_per_s": "steps per second over the last window_s (after an inject: only steps since it)",
    "goodput": "steps_per_s now / steps_per_s before the first inject (1.0 until then)",
    "dead_s": "seconds since the last step_end of any rank",
    "detections": "detected events since the plan started (a check or wait with since: STEP: since that inject began)",
    "nodes_running": "the run's nodes running (a container or Slurm task not paused, suspended, exited or down)",
    "containers_running": "nodes_running by its docker name (each node a container)",
}
_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
        "!=": operator.ne}
_COND = re.compile(r"\s*([a-z_]+)\s*(<=|>=|==|!=|<|>)\s*(-?[0-9]+(?:\.[0-9]+)?)"
                   r"(?:\s+for\s+([0-9]+(?:\.[0-9]+)?)\s*s)?\s*")


class Condition(StrictModel):
    metric: str
    op: str
    value: float
    for_s: float = 0.0
    """A stop condition trips once it has held this long (``goodput < 0.3 for 20s``), as an
    alarm with evaluation periods does; checks and waits ignore it."""

    def holds(self, metrics: dict[str, float]) -> bool:
        return _OPS[self.op](float(metrics[self.metric]), self.value)

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.value:g}" + (f" for {self.for_s:g}s" if self.for_s else "")


def parse_condition(text: str) -> Condition:
    m = _COND.fullmatch(text)
    if m is None:
        raise ValueError(f"condition {text!r} is not '<metric> <op> <number> [for <seconds>s]' (op one of "
                         f"{', '.join(_OPS)}; metrics: {', '.join(METRICS)})")
    if m.group(1) not in METRICS:
        raise ValueError(f"unknown metric {m.group(1)!r} in {text!r}; known: {', '.join(METRICS)}")
    return Condition(metric=m.group(1), op=m.group(2), value=float(m.group(3)),
                     for_s=float(m.group(4)) if m.group(4) else 0.0)


class InjectStep(StrictModel):
    type: str
    """A fault type (``trainchaos faults``) that works on a backend a game day attaches to (the
    run's own: checked once the run is found)."""
    target: dict[str, Any]
    """``{node: N}``, ``{nodes: [..]}``, ``{rank: N}``, ``{power_domain: NAME}``, ``{rack: NAME}``,
    or ``{container: NAME}`` (a run whose nodes are containers: one of them)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """The fault type's parameters."""


class WaitStep(StrictModel):
    seconds: float | None = Field(None, ge=0)
    """Wait this long; or, with ``condition``, at most ``within_s`` for it."""
    condition: str | None = None
    within_s: float = Field(60.0, gt=0)
    since: str | None = None
    """The name of an earlier inject step: ``detections`` counts from when it began (default:
    from the start of the plan). Skipped with that step when it was skipped."""


class ObserveStep(StrictModel):
    seconds: float = Field(gt=0)
    """Watch the job this long and record its metrics (the report's snapshot)."""


class CheckStep(StrictModel):
    condition: str
    """Must hold within ``within_s`` (0: right now); if not, ``on_fail``."""
    within_s: float = Field(0.0, ge=0)
    on_fail: str = Field("abort", pattern="^(abort|continue)$")
    """abort: revert everything and stop the exercise; continue: record it and go on."""
    since: str | None = None
    """The name of an earlier inject step: ``detections`` counts from when it began (default:
    from the start of the plan). Skipped with that step when it was skipped."""


class Step(StrictModel):
    name: str | None = None
    """A name other steps refer to (``revert: NAME``); default ``step-<i>``."""
    note: str | None = None
    """Shown to the operator before the step, kept in the report."""
    inject: InjectStep | None = None
    wait: WaitStep | None = None
    observe: ObserveStep | None = None
    check: CheckStep | None = None
    revert: str | None = None
    """The name of an earlier inject step, or ``all``."""
    ask: str | None = None
    """A question for the operator; the answer goes into the report as a note."""
    skip_if_absent: bool = False
    """An inject whose target is not there or not running just before it (its precondition)
    is skipped, the reason recorded in the report; default: the exercise stops there, exit 2."""

    @model_validator(mode="after")
    def _one_action(self) -> Step:
        actions = [k for k in ("inject", "wait", "observe", "check", "revert", "ask") if getattr(self, k) is not None]
        if len(actions) != 1:
            raise ValueError(f"a step has exactly one of inject, wait, observe, check, revert, ask "
                             f"(has {', '.join(actions) or 'none'})")
        return self

    @property
    def action(self) -> str:
        return next(k for k in ("inject", "wait", "observe", "check", "revert", "ask") if getattr(self, k) is not None)


class Plan(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    run: str = "latest"
    """The run to exercise: ``latest`` (the newest live run on a backend that can be attached
    to: docker, slurm) or its id."""
    hosts: list[str] = Field(default_factory=list)
    """Docker engines the run's containers are on; empty: the run's own, else ``DOCKER_HOST``."""
    window_s: float = Field(10.0, gt=0)
    """Seconds over which the job's pace (steps_per_s, goodput) is measured."""
    stop_when: list[str] = Field(default_factory=list)
    """Conditions checked continuously (every 0.5 s) from the start: any that holds aborts the
    exercise and reverts every fault. A target outside the run's labels always aborts."""
    steps: list[Step] = Field(min_length=1)


def load_plan(path: str) -> Plan:
    """The plan at ``path``, checked whole: every problem with its location, exit 2."""
    from chaos.util.yamlio import UNREADABLE, read_yaml

    issues: list[ValidationIssue] = []
    data = read_yaml(path, issues, "a game-day plan")
    if data is UNREADABLE or issues:
        raise ScenarioError(issues)
    plan = None
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        issues += _issues(path, exc)
    # The checks that need more than a field, on every step that parsed: a structural error
    # in one step does not hide the others' problems.
    steps: list[tuple[int, Step]] = []
    raw_steps = data.get("steps") if isinstance(data, dict) else None
    for i, raw in enumerate(raw_steps if isinstance(raw_steps, list) else []):
        try:
            steps.append((i, Step.model_validate(raw)))
        except ValidationError:
            continue  # already reported above, located
    stop_when = data.get("stop_when") if isinstance(data, dict) else None
    issues += _semantic_issues(path, [c for c in stop_when if isinstance(c, str)] if isinstance(stop_when, list) else [],
                               steps)
    if issues or plan is None:
        raise ScenarioError(issues)
    return plan


def _issues(path: str, exc: ValidationError, prefix: str = "") -> list[ValidationIssue]:
    out = []
    for err in exc.errors():
        loc = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in err["loc"]).replace(".[", "[")
        out.append(ValidationIssue(path, f"{prefix}{loc}".rstrip("."), err["msg"].removeprefix("Value error, ")))
    return out


def _semantic_issues(path: str, stop_when: list[str], steps: list[tuple[int, Step]]) -> list[ValidationIssue]:
    from chaos.cluster import known_backends
    from chaos.cluster.capabilities import Attachable, providers
    from chaos.faults.base import known_types

    issues = []
    types = known_types()
    attachable = providers((Attachable,), known_backends())
    names: set[str] = set()
    for i, cond in enumerate(stop_when):
        try:
            parse_condition(cond)
        except ValueError as exc:
            issues.append(ValidationIssue(path, f"stop_when[{i}]", str(exc)))
    for i, step in steps:
        where = f"steps[{i}]"
        if step.inject is not None:
            cls = types.get(step.inject.type)
            if cls is None:
                issues.append(ValidationIssue(path, f"{where}.inject.type", f"unknown fault type "
                                              f"{step.inject.type!r}; known: {', '.join(types)}"))
            elif cls.in_process or not set(cls.supported_backends()) & set(attachable):
                issues.append(ValidationIssue(path, f"{where}.inject.type", f"{step.inject.type} does not work "
                                              f"on a live {' or '.join(attachable)} run (in-process or another "
                                              "backend's)"))
            else:
                try:
                    cls.params_model.model_validate(step.inject.params)
                except ValidationError as exc:
                    issues += _issues(path, exc, f"{where}.inject.params.")
            keys = set(step.inject.target)
            allowed = {"node", "nodes", "rank", "ranks", "power_domain", "rack", "container"}
            if len(keys) != 1 or not keys <= allowed:
                issues.append(ValidationIssue(path, f"{where}.inject.target",
                                              f"one of {', '.join(sorted(allowed))} (got {sorted(keys)})"))
        for key, sub in (("wait", step.wait), ("check", step.check)):
            if sub is not None and sub.condition is not None:
                try:
                    parse_condition(sub.condition)
                except ValueError as exc:
                    issues.append(ValidationIssue(path, f"{where}.{key}.condition", str(exc)))
            if sub is not None and sub.since is not None and sub.since not in names:
                issues.append(ValidationIssue(path, f"{where}.{key}.since", f"no earlier inject step named "
                                              f"{sub.since!r}; named so far: {', '.join(sorted(names)) or 'none'}"))
        if step.skip_if_absent and step.inject is None:
            issues.append(ValidationIssue(path, f"{where}.skip_if_absent", "only an inject step has a target "
                                          f"to be absent (this is a {step.action} step)"))
        if step.wait is not None and step.wait.seconds is None and step.wait.condition is None:
            issues.append(ValidationIssue(path, f"{where}.wait", "give seconds or a condition"))
        if step.revert is not None and step.revert != "all" and step.revert not in names:
            issues.append(ValidationIssue(path, f"{where}.revert", f"no earlier inject step named "
                                          f"{step.revert!r}; named so far: {', '.join(sorted(names)) or 'none'}"))
        name = step.name or f"step-{i}"
        if step.name and step.name in names:
            issues.append(ValidationIssue(path, f"{where}.name", f"duplicate step name {step.name!r}"))
        if step.inject is not None:
            names.add(name)
    return issues
