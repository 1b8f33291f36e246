"""The checkpoint durability sweep (``trainchaos run --crash-points``): one power loss at each
durability boundary of one save, the ALICE / LazyFS method applied to a training job's
checkpointer (docs/checkers.md).

1. The fault-free twin (the reference for the final digest and checkpoint freshness).
2. A trace run: the fault layer over the shared checkpoint tier counts the boundaries of the
   save of ``save_step`` (each fsync, each rename: a directory moved into place, a pointer
   replaced) and reports them (``chaos.storage.crashpoints``).
3. One run per boundary ``k`` (and ``k = 0``, before the first): the layer freezes right after
   boundary ``k``, and a ``lose_unfsynced`` of the writer's node, triggered by that
   ``crash_point`` event, kills its ranks and drops every unfsynced write there. The layer
   keeps the crash image; the job restarts and trains on to the end. ``points`` narrows
   this to chosen boundaries (``--crash-after``: re-check the ones a full sweep found wrong,
   or one boundary of each kind where the full sweep costs too much); the trace is whole.

Each boundary's outcome (``ok`` or what went wrong, several at once possible):

- ``dangling_pointer``: in the crash image the "latest" pointer names a checkpoint that is
  not complete;
- ``torn``: a checkpoint under its finished name that is not complete (a loader that trusts
  names loads it);
- ``loaded_torn``: the restart loaded a checkpoint the crash image has torn;
- ``lost_saved``: the restart resumed from before a checkpoint the job had reported saved
  (``ckpt_save_end``) before the crash;
- ``lost_interval``: it lost more than one checkpoint interval of steps;
- ``stale`` / ``wrong_result`` / ``failed``: a checkpoint not the twin's state at its step,
  final weights unlike the twin's, or a job that did not complete;
- ``not_reached``: the crash point never froze (the save took another path than traced), or
  a chosen boundary the trace did not find (not run).
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml

from chaos.ckptformat import check_format_env
from chaos.errors import ToolError
from chaos.faults.family import CrashSweep, crash_sweep
from chaos.model.scenario import Scenario
from chaos.runfiles.events import Event, read_events
from chaos.runfiles.record import MetricsRecord, RunRecord
from chaos.runfiles.rundir import RunDir
from chaos.runner.run import run_baseline, run_scenario_once
from chaos.runner.state import RunProgress
from chaos.scenario.load import parse_scenario
from chaos.workload import workload_for

__all__ = ["BoundaryOutcome", "SweepResult", "classify", "crash_point_sweep", "default_save_step", "run_sweeps",
           "sweep_plan", "sweep_table"]

SWEEP_FILE = "crash_points.json"
WRITER_NODE = 0
"""The node of rank 0, which writes the harness's (replicated DDP) checkpoints."""


@dataclass
class BoundaryOutcome:
    after: int
    """Boundaries completed before the power loss (0: before the first)."""
    op: str
    path: str
    outcomes: list[str]
    detail: str
    resumed_from: int | None = None
    pointer: int | None = None
    complete: list[int] = field(default_factory=list)
    torn: dict[int, str] = field(default_factory=dict)
    run_dir: str = ""

    @property
    def ok(self) -> bool:
        return self.outcomes == ["ok"]


@dataclass
class SweepResult:
    scenario: str
    save_step: int
    boundaries: list[dict[str, Any]]
    """The trace: each boundary's seq, op and path."""
    results: list[BoundaryOutcome]
    wall_s: float
    twin_status: str
    trace_status: str

    @property
    def problems(self) -> list[BoundaryOutcome]:
        return [r for r in self.results if not r.ok]

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "save_step": self.save_step, "boundaries": self.boundaries,
                "results": [{**asdict(r), "ok": r.ok} for r in self.results], "wall_s": round(self.wall_s, 1),
                "twin_status": self.twin_status, "trace_status": self.trace_status,
                "problems": [r.after for r in self.problems]}


def default_save_step(scenario: Scenario) -> int | None:
    """The workload's second save (so that an older checkpoint exists to fall back to), by
    the checkpoint cadence it declares (``StorageLayout.every_steps``); None: no cadence
    declared, or no second save before its last step."""
    workload = workload_for(scenario.workload)
    layout = workload.storage()
    every = layout.every_steps if layout is not None else None
    if not every or not workload.steps or 2 * every >= workload.steps:
        return None
    return 2 * every


def _no_default_save(scenario: Scenario) -> tuple[str, str]:
    """(location, message) of a scenario whose save to sweep must be given."""
    workload = workload_for(scenario.workload)
    layout = workload.storage()
    if layout is None:
        return "workload", workload.storage_refusal("shared") + ": the crash-point sweep needs one"
    give = "give --crash-save-step N, a step the job checkpoints"
    if not layout.every_steps_key:
        return "workload", f"no save to sweep by default (the workload declares no checkpoint cadence): {give}"
    if not layout.every_steps:
        return layout.every_steps_key, (f"no save to sweep by default: declare how often the job "
                                        f"saves ({layout.every_steps_key}), or {give}")
    return layout.every_steps_key, (f"no save to sweep by default (the second save, 2 x {layout.every_steps}, "
                                    f"must come before the last step{'' if workload.steps else ', which is not declared'}): "
                                    f"{give}")


def _variant(scenario: Scenario, name: str, faults: list[dict[str, Any]]) -> Scenario:
    with open(scenario.path, encoding="utf-8") as fh:
        doc = copy.deepcopy(yaml.safe_load(fh))
    doc.update(name=name, faults=faults, baseline=False, repeat=1)
    doc.pop("expect", None)
    # What a power loss is judged by here is the sweep's, not the scenario's targets.
    doc["targets"] = {}
    return parse_scenario(doc, scenario.path)


def _sweep() -> CrashSweep:
    """The sweep's fault types, from the family that has them (the storage layer's)."""
    sweep = crash_sweep()
    if sweep is None:
        raise ToolError("no fault family provides the crash-point sweep's faults (FamilySpec.crash_sweep)")
    return sweep


def _arm(save_step: int, after: int) -> dict[str, Any]:
    return {"type": _sweep().arm_type, "target": {"node": WRITER_NODE}, "trigger": {"at_step": 1},
            "params": {"tier": "shared", "save_step": save_step, "after": after}}


def _power_loss() -> dict[str, Any]:
    sweep = _sweep()
    return {"type": sweep.power_loss_type, "target": {"node": WRITER_NODE},
            "trigger": {"after_event": {"event": sweep.event}}, "params": {"tier": "shared"}}


def classify(record: RunRecord, events: list[Event], audit: Any, save_step: int,
             twin_digest: str | None) -> tuple[list[str], str, int | None]:
    """(outcomes, detail, resumed step) of one crash run (module docstring)."""
    crash = next((e for e in events if e.get("kind") == _sweep().event), None)
    if crash is None:
        return ["not_reached"], "the crash point never froze the layer", None
    t_crash = float(crash["t"])
    saved = [int(e["step"]) for e in events if e.get("kind") == "ckpt_save_end" and e["t"] <= t_crash
             and isinstance(e.get("step"), int)]
    before = [int(e["step"]) for e in events if e.get("kind") == "step_end" and e["t"] <= t_crash
              and e.get("src") == "rank-0"]
    loads = [e for e in events if e.get("kind") == "ckpt_load" and e.get("src") == "rank-0"
             and int(e.get("incarnation") or 0) >= 1]
    resumed = int(loads[0]["step"]) if loads else (0 if any(
        e.get("kind") == "rank_start" and int(e.get("incarnation") or 0) >= 1 for e in events) else None)
    interval = save_step - max([s for s in saved if s < save_step], default=0)
    outcomes: list[str] = []
    notes: list[str] = []
    if audit is not None:
        if audit.dangling:
            outcomes.append("dangling_pointer")
            why = audit.torn.get(audit.pointer, "it does not exist")
            notes.append(f"LATEST names step {audit.pointer}, which is not complete ({why})")
        if audit.torn:
            outcomes.append("torn")
            notes.append("torn under a finished name: " + ", ".join(f"step {s}" for s in sorted(audit.torn)))
        if resumed is not None and resumed in audit.torn:
            outcomes.append("loaded_torn")
            notes.append(f"the restart loaded step {resumed}, torn in the crash image")
    if resumed is not None and saved and resumed < max(saved):
        outcomes.append("lost_saved")
        notes.append(f"resumed from step {resumed}, but step {max(saved)} was reported saved before the crash")
    if resumed is not None and before and max(before) - resumed > interval:
        outcomes.append("lost_interval")
        notes.append(f"lost {max(before) - resumed} steps (step {max(before)} -> {resumed}), "
                     f"more than one interval ({interval})")
    metrics = record.metrics or MetricsRecord()
    if metrics.stale_checkpoints:
        outcomes.append("stale")
        notes.append(f"{metrics.stale_checkpoints} stale checkpoint(s)")
    if record.status != "completed":
        outcomes.append("failed")
        notes.append(f"run {record.status}: {record.error or ''}".rstrip(": "))
    elif twin_digest is not None and metrics.final_digest != twin_digest:
        outcomes.append("wrong_result")
        notes.append("final weights differ from the twin's")
    if resumed is None and not outcomes:
        outcomes.append("failed")
        notes.append("no restart after the power loss")
    if not outcomes:
        outcomes.append("ok")
        notes.append(f"resumed from step {resumed}")
    return outcomes, "; ".join(notes), resumed


def crash_point_sweep(scenario: Scenario, out_dir: str, save_step: int,
                      note: Callable[[str], None] = lambda _text: None,
                      points: Sequence[int] | None = None) -> SweepResult:
    """Twin, trace, one crash run per boundary (each of ``points`` only, when given: 0 is
    before the first); writes ``<out_dir>/crash_points.json``."""
    started = time.monotonic()
    check_format_env()  # the auditor's format, before a run is spent on it
    workload = workload_for(scenario.workload)
    progress = RunProgress(on_note=None)
    base = _variant(scenario, scenario.name, [])
    twin, twin_journal = run_baseline(base, os.path.join(out_dir, "baseline"), scenario.seed, progress)
    note(f"twin: {twin_journal.status} ({len(twin.digests)} step digests)")
    trace_journal = run_scenario_once(_variant(scenario, f"{scenario.name}-trace", [_arm(save_step, -1)]),
                                      os.path.join(out_dir, "trace"), scenario.seed, twin, progress)
    boundaries = [{k: e[k] for k in ("seq", "op", "path")}
                  for e in read_events(RunDir(str(trace_journal.run_dir)).events)
                  if e.get("kind") == "storage_boundary"]
    note(f"trace: {trace_journal.status}, {len(boundaries)} durability boundaries in the save of "
         f"step {save_step}")
    results: list[BoundaryOutcome] = []
    for after in (range(0, len(boundaries) + 1) if points is None else sorted(set(points))):
        if after > len(boundaries):
            results.append(BoundaryOutcome(after=after, op="", path="", outcomes=["not_reached"],
                                           detail=f"not run: the trace found {len(boundaries)} boundaries"))
            note(f"crash after boundary {after}: not run, the save has {len(boundaries)} boundaries")
            continue
        name = f"{scenario.name}-crash-{after:02d}"
        journal = run_scenario_once(_variant(scenario, name, [_arm(save_step, after), _power_loss()]),
                                    os.path.join(out_dir, f"crash-{after:02d}"), scenario.seed, twin, progress)
        rundir = RunDir(str(journal.run_dir))
        events = read_events(rundir.events)
        audit = (workload.audit_checkpoints(rundir.crash_image)
                 if os.path.isdir(rundir.crash_image) else None)
        outcomes, detail, resumed = classify(journal, events, audit, save_step, twin.digest)
        # A save without a boundary froze where its window closed (the next save's first op).
        froze = next((e for e in events if e.get("kind") == _sweep().event), {"op": "", "path": ""})
        where = boundaries[after - 1] if after else (boundaries[0] if boundaries else froze)
        outcome = BoundaryOutcome(after=after, op=("before " if after == 0 else "") + str(where["op"]),
                                  path=str(where["path"]), outcomes=outcomes, detail=detail, resumed_from=resumed,
                                  pointer=audit.pointer if audit else None,
                                  complete=list(audit.complete) if audit else [],
                                  torn=dict(audit.torn) if audit else {}, run_dir=str(journal.run_dir))
        results.append(outcome)
        note(f"crash after boundary {after} ({outcome.op} {outcome.path}): {', '.join(outcomes)}: {detail}")
    result = SweepResult(scenario=scenario.name, save_step=save_step, boundaries=boundaries, results=results,
                         wall_s=time.monotonic() - started, twin_status=twin_journal.status,
                         trace_status=trace_journal.status)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, SWEEP_FILE), "w", encoding="utf-8") as fh:
        json.dump(result.to_dict(), fh, indent=1)
    return result


def sweep_table(result: SweepResult) -> list[str]:
    """The sweep as text: one row per boundary tried, its outcome."""
    every = len(result.boundaries) + 1
    losses = f"{len(result.results)}" + ("" if len(result.results) == every else f" of {every}")
    rows = [f"crash-point sweep of {result.scenario}: the save of step {result.save_step}, "
            f"{len(result.boundaries)} boundaries, {losses} power losses, {result.wall_s:.0f} s",
            f"{'after':>5}  {'boundary':<42} {'outcome':<22} detail"]
    for r in result.results:
        where = f"{r.op} {r.path}"
        rows.append(f"{r.after:>5}  {where[:42]:<42} {','.join(r.outcomes)[:22]:<22} {r.detail}")
    bad = result.problems
    rows.append(f"{len(result.results) - len(bad)}/{len(result.results)} boundaries ok"
                + (f"; problems after boundaries {', '.join(str(r.after) for r in bad)}" if bad else ""))
    return rows


def sweep_plan(scenarios: Sequence[Scenario], save_step: int | None,
               points: Sequence[int] | None = None) -> tuple[dict[str, int], list[Scenario]]:
    """The one judge of what a sweep can serve, asked by ``--dry-run`` and by the real run
    before anything starts: each scenario's save step, and the scenarios of its trace and
    crash runs, each validated as the real run builds it (a backend or workload the storage
    layer cannot serve is refused here, not after the twin). Raises ScenarioError (exit 2)
    with every problem, located in the scenario's file."""
    from chaos.errors import ScenarioError, ValidationIssue

    steps: dict[str, int] = {}
    runs: list[Scenario] = []
    issues: list[ValidationIssue] = []
    for sc in scenarios:
        step = save_step or default_save_step(sc)
        if step is None or workload_for(sc.workload).storage() is None:
            issues.append(ValidationIssue(sc.path, *_no_default_save(sc)))
            continue
        steps[sc.name] = step
        faults = [[_arm(step, -1)]] + [[_arm(step, after), _power_loss()]
                                       for after in sorted(set(points if points is not None else [1]))]
        try:
            runs += [_variant(sc, f"{sc.name}-sweep", run) for run in faults]
        except ScenarioError as exc:
            # The location is in the run the sweep writes: its faults, not the file's.
            issues += [ValidationIssue(sc.path, _sweep_location(i.location, faults[-1]),
                                       f"--crash-points cannot sweep this scenario: {i.message}")
                       for i in exc.issues]
    if issues:
        raise ScenarioError(list(dict.fromkeys(issues)))
    return steps, runs


def _sweep_location(location: str, faults: list[dict[str, Any]]) -> str:
    """``faults[0].type`` of a sweep's run as the sweep's fault it is (``crash_point.type``)."""
    head, dot, rest = location.partition(".")
    for index, fault in enumerate(faults):
        if head == f"faults[{index}]":
            return f"{fault['type']}{dot}{rest}"
    return location


def run_sweeps(paths: list[str], out_dir: str, save_step: int | None, dry_run: bool,
               echo: Callable[[str], None], points: Sequence[int] | None = None,
               check_host: bool = True) -> int:
    """``trainchaos run --crash-points PATHS``: each scenario's sweep (of ``points`` only,
    ``--crash-after``, when given), its table; the exit code (1 when a boundary is not
    ``ok``; 2, nothing started, when ``sweep_plan`` or the host refuses). ``check_host``:
    with ``dry_run``, the preflight too (the real run always does it)."""
    from chaos.errors import EXIT_OK, EXIT_TARGET_MISSED
    from chaos.runner.suite import preflight
    from chaos.scenario.load import load_suite

    scenarios = load_suite(paths)
    steps, runs = sweep_plan(scenarios, save_step, points)
    if check_host or not dry_run:
        preflight(runs)  # the runs the sweep starts: their backend, the sweep's faults
    if dry_run:
        where = ("per durability boundary of it" if points is None else
                 "after each of its durability boundaries " + ", ".join(map(str, sorted(set(points)))))
        for sc in scenarios:
            echo(f"{sc.name}: the twin, a trace of the save of step {steps[sc.name]}, then one power "
                 f"loss ({_sweep().power_loss_type}) {where}")
        return EXIT_OK
    code = EXIT_OK
    for sc in scenarios:
        result = crash_point_sweep(sc, os.path.join(out_dir, sc.name), steps[sc.name],
                                   note=lambda text: echo(f"  {text}"), points=points)
        for line in sweep_table(result):
            echo(line)
        echo(f"journal: {os.path.join(out_dir, sc.name, SWEEP_FILE)}")
        if result.problems or result.twin_status != "completed" or not result.boundaries:
            code = EXIT_TARGET_MISSED
    return code
