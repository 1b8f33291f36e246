"""The checkpoint durability sweep (``trainchaos run --crash-points``): one crash at each
point of one save, the ALICE / LazyFS method applied to a training job's checkpointer
(docs/checkers.md). Two crash models (``--crash-model``): **power**, one power loss after
each durability boundary (unfsynced writes lost); **process**, one process crash before and
after each file operation of the save and half-way through each file it writes (the page
cache kept), what a checkpointer with no fsync and no rename still has to get right;
``both``, the two from one trace.

1. The trace run, which is also the fault-free twin: the fault layer over the shared
   checkpoint tier counts the boundaries of the save of ``save_step`` (each fsync, each
   rename: a directory moved into place, a pointer replaced) and reports them
   (``chaos.storage.crashpoints``), without ever freezing; the job records its state at
   every step, the reference for checkpoint freshness and the restarts' state.
2. One run per boundary ``k`` (and ``k = 0``, before the first): the layer freezes right after
   boundary ``k``, and a ``lose_unfsynced`` of the writer's node, triggered by that
   ``crash_point`` event, kills its ranks and drops every unfsynced write there. The layer
   keeps the crash image; the job restarts (torchrun's budget: that one restart), and the
   run ends once the restarted job has reported its state at its first step past the load,
   or at once when the restart fails (``chaos.runner.crashend``; a job that reports no
   state digests runs on to its end, for its final weights). ``points`` narrows
   this to chosen boundaries (``--crash-after``: re-check the ones a full sweep found wrong,
   or one boundary of each kind where the full sweep costs too much); the trace is whole.
   The process model's points (``chaos.storage.crashpoints``) are ``bK`` / ``aK``, right
   before / after file operation K of the save (an ``aK`` that leaves the same files as
   ``bK+1``, no byte written between the two, is not run twice), and ``tK``, the file that
   operation K closes torn half-way; each is a run with a ``process_crash`` of the writer's
   node, triggered by the ``crash_point`` event.

Each boundary's outcome (``ok`` or what went wrong, several at once possible):

- ``dangling_pointer``: in the crash image the "latest" pointer names a checkpoint that is
  not complete;
- ``torn``: a checkpoint under its finished name that is not complete (a loader that trusts
  names loads it);
- ``loaded_torn``: the restart loaded a checkpoint the crash image has torn;
- ``lost_saved``: the restart resumed from before a checkpoint the job had reported saved
  (``ckpt_save_end``) before the crash, or one complete in the crash image (a newer
  checkpoint was durable and the loader passed over it: Lightning's resume from an older
  ``last.ckpt`` while the step's own file is whole, ckpt-chaos's ``LOST_WORK``);
- ``lost_interval``: it lost more than one checkpoint interval of steps;
- ``stale`` / ``wrong_result`` / ``failed``: a checkpoint saved before the crash not the
  twin's state at its step; the restarted job's state at its first step past the load unlike
  the twin's at that step (its final weights, for a job that reports no state digests); a
  restart that did not get to that step (or a job that did not complete).
- ``not_reached``: the crash point never froze (the save took another path than traced), or
  a chosen boundary the trace did not find (not run).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import yaml

from chaos import contract
from chaos.ckptformat import check_format_env
from chaos.errors import ToolError
from chaos.faults.family import CrashSweep, crash_sweep
from chaos.model.scenario import Scenario
from chaos.runfiles.events import Event, read_events
from chaos.runfiles.record import MetricsRecord, RunRecord
from chaos.runfiles.rundir import RunDir
from chaos.runner.crashend import CrashRunEnd, restart_digest
from chaos.runner.run import run_scenario_once, twin_reference
from chaos.runner.state import RunProgress
from chaos.scenario.load import parse_scenario
from chaos.workload import workload_for

__all__ = ["CRASH_MODELS", "BoundaryOutcome", "CrashModel", "SweepPoint", "SweepResult", "classify",
           "crash_point_sweep", "default_save_step", "own_ops", "parse_points", "process_points", "run_sweeps", "sweep_plan",
           "sweep_starts_warm", "sweep_table"]

SWEEP_FILE = "crash_points.json"
WRITER_NODE = 0
"""The node of rank 0, which writes the harness's (replicated DDP) checkpoints."""

CrashModel = Literal["power", "process", "both"]
CRASH_MODELS: tuple[str, ...] = ("power", "process", "both")
_WHEN_OF = {"b": "before", "a": "after", "t": "torn"}
Point = int | str
"""A power point (boundaries completed before the power loss) or a process point's label (``b3``)."""


@dataclass(frozen=True)
class SweepPoint:
    """One crash point of a sweep: where the layer freezes, and which crash follows."""

    model: str
    label: str
    """Power: the boundaries completed (``3``); process: ``b3``, ``a3``, ``t3``."""
    at: int
    """Power: boundaries completed; process: the file operation (1: the first)."""
    when: str = "after"
    op: str = ""
    path: str = ""
    cut: int = 0
    """A torn point's byte."""
    opened: int = 0
    """A torn point's file: the operation that created it (0: known by its path only)."""


def process_points(ops: Sequence[dict[str, Any]]) -> list[SweepPoint]:
    """The process crash points of a traced save: before each file operation, the file each
    ``close`` ends torn half-way, and after an operation where that leaves other files than
    before the next (bytes written between the two, or the last operation)."""
    points: list[SweepPoint] = []
    for index, op in enumerate(ops):
        seq, name, path = int(op["seq"]), str(op["op"]), str(op["path"])
        if name == "close" and int(op.get("bytes") or 0) >= 2:
            points.append(SweepPoint("process", f"t{seq}", seq, "torn", name, path, int(op["bytes"]) // 2,
                                     int(op.get("opened") or 0)))
        points.append(SweepPoint("process", f"b{seq}", seq, "before", name, path))
        following = ops[index + 1] if index + 1 < len(ops) else None
        if following is None or int(following.get("written_before") or 0) > 0:
            points.append(SweepPoint("process", f"a{seq}", seq, "after", name, path))
    return points


def own_ops(ops: list[dict[str, Any]], look_back: bool) -> list[dict[str, Any]]:
    """The traced operations that are the save's: with a look-back, not those after its last
    operation on its own paths (the next save's look-back takes them: each operation between
    two saves is a point once)."""
    if not look_back:
        return ops
    last = max((i for i, op in enumerate(ops) if op.get("own")), default=len(ops) - 1)
    return ops[:last + 1]


def parse_points(text: str) -> list[Point]:
    """``--crash-after 0,3,b2,t4``: power boundaries (numbers) and process points (``bK``,
    ``aK``, ``tK``: before, after, torn at file operation K). ValueError: not such a list."""
    points: list[Point] = []
    for item in (part.strip() for part in text.split(",")):
        if item.isdigit():
            points.append(int(item))
        elif item[:1] in _WHEN_OF and item[1:].isdigit() and int(item[1:]) >= 1:
            points.append(item)
        else:
            raise ValueError(item)
    return points


def _models(model: str) -> tuple[str, ...]:
    return ("power", "process") if model == "both" else (model,)


@dataclass
class BoundaryOutcome:
    after: int
    """Power: boundaries completed before the power loss (0: before the first); process: the
    file operation of the point."""
    op: str
    path: str
    outcomes: list[str]
    detail: str
    resumed_from: int | None = None
    pointer: int | None = None
    complete: list[int] = field(default_factory=list)
    torn: dict[int, str] = field(default_factory=dict)
    run_dir: str = ""
    model: str = "power"
    """The crash model of the point: power (a power loss), process (a process crash)."""
    point: str = ""
    """The point's label (``3``, ``b3``...: ``--crash-after`` takes it)."""

    @property
    def ok(self) -> bool:
        return self.outcomes == ["ok"]

    @property
    def key(self) -> Point:
        return self.after if self.model == "power" else self.point


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
    model: str = "power"
    ops: list[dict[str, Any]] = field(default_factory=list)
    """The trace's file operations of the save (process model)."""
    crash_s: list[float] = field(default_factory=list)
    """Each crash run's wall time (the cost per crash point)."""

    @property
    def problems(self) -> list[BoundaryOutcome]:
        return [r for r in self.results if not r.ok]

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "save_step": self.save_step, "model": self.model,
                "boundaries": self.boundaries, "ops": self.ops,
                "results": [{**asdict(r), "ok": r.ok} for r in self.results], "wall_s": round(self.wall_s, 1),
                "crash_s": [round(t, 2) for t in self.crash_s],
                "twin_status": self.twin_status, "trace_status": self.trace_status,
                "problems": [r.key for r in self.problems]}


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


CRASH_RUN_RESTARTS = 1
"""torchrun's restart budget in a crash run: the one restart after its crash (a restart that
cannot load has no second try to spend; ``chaos.runner.crashend`` ends the run at its failure)."""


def _variant(scenario: Scenario, name: str, faults: list[dict[str, Any]], crash: bool = False) -> Scenario:
    """The sweep's run of ``scenario`` with ``faults`` (``crash``: a crash run)."""
    with open(scenario.path, encoding="utf-8") as fh:
        doc = copy.deepcopy(yaml.safe_load(fh))
    doc.update(name=name, faults=faults, baseline=False, repeat=1)
    if crash:
        doc["topology"] = {**(doc.get("topology") or {}), "max_restarts": CRASH_RUN_RESTARTS}
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


def _arm(save_step: int, after: int, **process: Any) -> dict[str, Any]:
    return {"type": _sweep().arm_type, "target": {"node": WRITER_NODE}, "trigger": {"at_step": 1},
            "params": {"tier": "shared", "save_step": save_step, "after": after, **process}}


def _trace(save_step: int, model: str, prev_step: int | None) -> dict[str, Any]:
    if model == "power":
        return _arm(save_step, -1)
    return _arm(save_step, -1, trace_ops=True, prev_step=prev_step)


def _arm_point(save_step: int, point: SweepPoint, prev_step: int | None) -> dict[str, Any]:
    if point.model == "power":
        return _arm(save_step, point.at)
    extra: dict[str, Any] = ({"path": point.path, "cut": point.cut, "opened": point.opened}
                             if point.when == "torn" else {})
    return _arm(save_step, -1, model="process", op=point.at, when=point.when, prev_step=prev_step, **extra)


def _power_loss() -> dict[str, Any]:
    sweep = _sweep()
    return {"type": sweep.power_loss_type, "target": {"node": WRITER_NODE},
            "trigger": {"after_event": {"event": sweep.event}}, "params": {"tier": "shared"}}


def _crash(model: str) -> dict[str, Any]:
    """The crash a point's freeze triggers: a power loss, or a process crash."""
    if model == "power":
        return _power_loss()
    sweep = _sweep()
    if not sweep.process_crash_type:
        raise ToolError("the crash-point sweep's family offers no process crash (CrashSweep.process_crash_type)")
    return {"type": sweep.process_crash_type, "target": {"node": WRITER_NODE},
            "trigger": {"after_event": {"event": sweep.event}}, "params": {"tier": "shared"}}


def previous_save(scenario: Scenario, save_step: int) -> int | None:
    """The step of the save before ``save_step`` by the declared cadence (0: it is the first),
    where the process model's look-back starts; None: no cadence, no look-back."""
    layout = workload_for(scenario.workload).storage()
    every = layout.every_steps if layout is not None else None
    if not every or save_step % every:
        return None
    return save_step - every


def classify(record: RunRecord, events: list[Event], audit: Any, save_step: int,
             twin_digest: str | None, twin_digests: Mapping[int, str] | None = None
             ) -> tuple[list[str], str, int | None]:
    """(outcomes, detail, resumed step) of one crash run (module docstring). The restarted
    job's state is judged at its first step past the load against ``twin_digests`` (the
    twin's state at each step), and its final weights against ``twin_digest`` where it ran
    to its end."""
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
    complete = [s for s in audit.complete if s is not None] if audit is not None else []
    if resumed is not None and saved and resumed < max(saved):
        outcomes.append("lost_saved")
        notes.append(f"resumed from step {resumed}, but step {max(saved)} was reported saved before the crash")
    elif resumed is not None and complete and resumed < max(complete):
        outcomes.append("lost_saved")
        notes.append(f"resumed from step {resumed}, but step {max(complete)} was complete in the crash image")
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
    else:
        outcomes_notes = _wrong_state(events, metrics.final_digest, twin_digest, twin_digests or {})
        if outcomes_notes:
            outcomes.append("wrong_result")
            notes.append(outcomes_notes)
    if resumed is None and not outcomes:
        outcomes.append("failed")
        notes.append("no restart after the power loss")
    if not outcomes:
        outcomes.append("ok")
        notes.append(f"resumed from step {resumed}")
    return outcomes, "; ".join(notes), resumed


def _wrong_state(events: list[Event], final_digest: str | None, twin_digest: str | None,
                 twin_digests: Mapping[int, str]) -> str | None:
    """Why the restarted job's state is not the twin's (None: it is): at its first step past
    the load (a crash run ends there: ``chaos.runner.crashend``), and at its end where it ran
    to it."""
    after = restart_digest(events, _sweep().event)
    if after is not None and after[0] in twin_digests and twin_digests[after[0]] != after[1]:
        return f"the state at step {after[0]} after the restart differs from the twin's"
    ended_early = any(e.get("kind") == "job_stop" and e.get("reason") for e in events)
    if twin_digest is not None and not (ended_early and after is not None) and final_digest != twin_digest:
        return "final weights differ from the twin's"
    return None


def _points(boundaries: list[dict[str, Any]], ops: list[dict[str, Any]], model: str,
            chosen: Sequence[Point] | None) -> list[SweepPoint | Point]:
    """The points a sweep runs, in order: every one of its models' (or those ``chosen``; a
    chosen one the trace did not find stays as it was given: not run)."""
    found: list[SweepPoint] = []
    if "power" in _models(model) and (boundaries or model == "power"):
        # both models and no boundary: no power loss to place (the process points cover it)
        found += _power_points(boundaries)
    if "process" in _models(model):
        found += process_points(ops)
    if chosen is None:
        return list(found)
    by_key: dict[Point, SweepPoint] = {(p.at if p.model == "power" else p.label): p for p in found}
    return [by_key.get(k, k) for k in sorted(set(chosen), key=_point_order)]


def _point_order(point: Point) -> tuple[bool, int, str]:
    """Power points first, by number; then process points by file operation (``b3`` ``a3``)."""
    return (True, int(point[1:]), point) if isinstance(point, str) else (False, point, "")


def _power_points(boundaries: list[dict[str, Any]]) -> list[SweepPoint]:
    points = []
    for k in range(len(boundaries) + 1):
        where = boundaries[k - 1] if k else (boundaries[0] if boundaries else {"op": "", "path": ""})
        op = ("before " if k == 0 and boundaries else "") + str(where["op"])
        points.append(SweepPoint("power", str(k), k, "after", op, str(where["path"])))
    return points


def crash_point_sweep(scenario: Scenario, out_dir: str, save_step: int,
                      note: Callable[[str], None] = lambda _text: None,
                      points: Sequence[Point] | None = None, model: str = "power") -> SweepResult:
    """Twin, trace, one crash run per point of ``model`` (each of ``points`` only, when
    given: power 0 is before the first boundary); writes ``<out_dir>/crash_points.json``.

    Its runs start warm where neither the scenario nor TRAINCHAOS_WARM_START says otherwise
    (``sweep_starts_warm``)."""
    with sweep_starts_warm():
        return _crash_point_sweep(scenario, out_dir, save_step, note, points, model)


@contextlib.contextmanager
def sweep_starts_warm() -> Iterator[None]:
    """TRAINCHAOS_WARM_START=1 for the sweep's runs where it is unset: a sweep judges what a
    restart loads and trains, not how long a launch takes, and each of its runs would
    otherwise import torch (and the stack) in every rank twice, the start and the restart
    (docs/checkers.md, cost per crash point). A scenario's own ``warm_start`` still wins, as
    does the variable set to 0; a workload that cannot start warm starts cold."""
    if os.environ.get(contract.WARM_START_ENV):
        yield
        return
    os.environ[contract.WARM_START_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(contract.WARM_START_ENV, None)


def _crash_point_sweep(scenario: Scenario, out_dir: str, save_step: int, note: Callable[[str], None],
                       points: Sequence[Point] | None, model: str) -> SweepResult:
    started = time.monotonic()
    check_format_env()  # the auditor's format, before a run is spent on it
    workload = workload_for(scenario.workload)
    progress = RunProgress(on_note=None)
    prev_step = previous_save(scenario, save_step)
    # The twin and the trace are one run: the trace's crash point only reports (the layer never
    # freezes), so the run is fault-free, and it records its state at every step as the twin does.
    trace_journal = run_scenario_once(_variant(scenario, f"{scenario.name}-trace", [_trace(save_step, model, prev_step)]),
                                      os.path.join(out_dir, "trace"), scenario.seed, None, progress,
                                      record_digests=True)
    twin = twin_reference(scenario, trace_journal)
    note(f"twin: {trace_journal.status} ({len(twin.digests)} step digests)")
    traced = read_events(RunDir(str(trace_journal.run_dir)).events)
    boundaries = [{k: e[k] for k in ("seq", "op", "path")} for e in traced if e.get("kind") == "storage_boundary"]
    ops = own_ops([{k: e.get(k) for k in ("seq", "op", "path", "bytes", "written_before", "own", "opened")}
                   for e in traced if e.get("kind") == "storage_op"], look_back=prev_step is not None)
    note(f"trace: {trace_journal.status}, {len(boundaries)} durability boundaries"
         + (f", {len(ops)} file operations" if model != "power" else "") + f" in the save of step {save_step}")
    results: list[BoundaryOutcome] = []
    crash_s: list[float] = []
    for point in _points(boundaries, ops, model, points):
        if not isinstance(point, SweepPoint):
            found = (f"the trace found {len(boundaries)} boundaries" if isinstance(point, int)
                     else f"the trace found {len(ops)} file operations" + ("" if model != "power" else
                                                                           " (none: --crash-model power)"))
            results.append(BoundaryOutcome(after=point if isinstance(point, int) else int(point[1:]), op="", path="",
                                           outcomes=["not_reached"], detail=f"not run: {found}",
                                           model="power" if isinstance(point, int) else "process", point=str(point)))
            note(f"crash point {point}: not run, {found}")
            continue
        name = f"{scenario.name}-crash-{point.label.zfill(2)}"
        began = time.monotonic()
        journal = run_scenario_once(_variant(scenario, name, [_arm_point(save_step, point, prev_step),
                                                              _crash(point.model)], crash=True),
                                    os.path.join(out_dir, f"crash-{point.label.zfill(2)}"), scenario.seed, twin,
                                    progress, handlers=[CrashRunEnd(_sweep().event, twin.digests, WRITER_NODE)],
                                    record_digests=True)
        crash_s.append(time.monotonic() - began)
        rundir = RunDir(str(journal.run_dir))
        events = read_events(rundir.events)
        audit = (workload.audit_checkpoints(rundir.crash_image)
                 if os.path.isdir(rundir.crash_image) else None)
        outcomes, detail, resumed = classify(journal, events, audit, save_step, twin.digest, twin.digests)
        op, path = (point.op, point.path) if point.model == "power" else (f"{point.when} {point.op}", point.path)
        if point.model == "power" and not boundaries:
            # A save without a boundary froze where its window closed (the next save's first op).
            froze = next((e for e in events if e.get("kind") == _sweep().event), {"op": "", "path": ""})
            op, path = f"before {froze.get('op', '')}", str(froze.get("path", ""))
        outcome = BoundaryOutcome(after=point.at, op=op, path=path, outcomes=outcomes, detail=detail,
                                  resumed_from=resumed, pointer=audit.pointer if audit else None,
                                  complete=list(audit.complete) if audit else [],
                                  torn=dict(audit.torn) if audit else {}, run_dir=str(journal.run_dir),
                                  model=point.model, point=point.label)
        results.append(outcome)
        where = f"after boundary {point.at}" if point.model == "power" else f"process crash {point.label}"
        note(f"crash {where} ({outcome.op} {outcome.path}): {', '.join(outcomes)}: {detail}")
    result = SweepResult(scenario=scenario.name, save_step=save_step, boundaries=boundaries, results=results,
                         wall_s=time.monotonic() - started, twin_status=trace_journal.status,
                         trace_status=trace_journal.status, model=model, ops=ops, crash_s=crash_s)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, SWEEP_FILE), "w", encoding="utf-8") as fh:
        json.dump(result.to_dict(), fh, indent=1)
    return result


def sweep_table(result: SweepResult) -> list[str]:
    """The sweep as text: one row per point tried, its model and outcome."""
    if all(r.model == "power" for r in result.results) and result.model == "power":
        every = len(result.boundaries) + 1
        losses = f"{len(result.results)}" + ("" if len(result.results) == every else f" of {every}")
        head = (f"crash-point sweep of {result.scenario}: the save of step {result.save_step}, "
                f"{len(result.boundaries)} boundaries, {losses} power losses, {result.wall_s:.0f} s")
        noun = "boundaries"
    else:
        power = sum(r.model == "power" for r in result.results)
        head = (f"crash-point sweep of {result.scenario} ({result.model}): the save of step {result.save_step}, "
                f"{len(result.boundaries)} boundaries, {len(result.ops)} file operations; "
                f"{power} power losses, {len(result.results) - power} process crashes, {result.wall_s:.0f} s")
        noun = "crash points"
    rows = [head, f"{'point':>5}  {'model':<7} {'where':<42} {'outcome':<22} detail"]
    for r in result.results:
        where = f"{r.op} {r.path}"
        rows.append(f"{r.point or r.after:>5}  {r.model:<7} {where[:42]:<42} {','.join(r.outcomes)[:22]:<22} {r.detail}")
    bad = result.problems
    after = "after boundaries" if noun == "boundaries" else "at"
    rows.append(f"{len(result.results) - len(bad)}/{len(result.results)} {noun} ok"
                + (f"; problems {after} {', '.join(str(r.key) for r in bad)}" if bad else ""))
    return rows


def sweep_plan(scenarios: Sequence[Scenario], save_step: int | None,
               points: Sequence[Point] | None = None, model: str = "power"
               ) -> tuple[dict[str, int], list[Scenario]]:
    """The one judge of what a sweep can serve, asked by ``--dry-run`` and by the real run
    before anything starts: each scenario's save step, and the scenarios of its trace and
    crash runs, each validated as the real run builds it (a backend or workload the storage
    layer cannot serve is refused here, not after the twin; a point of a model not swept,
    a crash model not known). Raises ScenarioError (exit 2) with every problem, located in
    the scenario's file."""
    from chaos.errors import ScenarioError, ValidationIssue

    steps: dict[str, int] = {}
    runs: list[Scenario] = []
    issues: list[ValidationIssue] = []
    for sc in scenarios:
        if model not in CRASH_MODELS:
            issues.append(ValidationIssue(sc.path, "--crash-model",
                                          f"unknown crash model {model!r}; allowed: {', '.join(CRASH_MODELS)}"))
            continue
        swept = _models(model)
        wrong = [p for p in points or () if ("power" if isinstance(p, int) else "process") not in swept]
        if wrong:
            issues.append(ValidationIssue(sc.path, "--crash-after", (
                f"{', '.join(map(str, wrong))}: not a point of --crash-model {model} (numbers are power "
                f"boundaries; bK, aK, tK process points)")))
            continue
        step = save_step or default_save_step(sc)
        if step is None or workload_for(sc.workload).storage() is None:
            issues.append(ValidationIssue(sc.path, *_no_default_save(sc)))
            continue
        steps[sc.name] = step
        prev = previous_save(sc, step)
        # Each point chosen as its run is built (the trace decides the rest: one of each kind).
        chosen = sorted(set(points if points is not None else
                            ([1] if "power" in swept else []) + (["b1", "t1"] if "process" in swept else [])),
                        key=_point_order)
        sample = [SweepPoint("power", str(p), p) if isinstance(p, int) else
                  SweepPoint("process", p, int(p[1:]), _WHEN_OF[p[0]], path="f", cut=1) for p in chosen]
        faults = [[_trace(step, model, prev)]] + [[_arm_point(step, p, prev), _crash(p.model)] for p in sample]
        try:
            runs += [_variant(sc, f"{sc.name}-sweep", run, crash=index > 0) for index, run in enumerate(faults)]
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
               echo: Callable[[str], None], points: Sequence[Point] | None = None,
               check_host: bool = True, model: str = "power") -> int:
    """``trainchaos run --crash-points PATHS``: each scenario's sweep of ``model``'s points
    (of ``points`` only, ``--crash-after``, when given), its table; the exit code (1 when a
    point is not ``ok``; 2, nothing started, when ``sweep_plan`` or the host refuses).
    ``check_host``: with ``dry_run``, the preflight too (the real run always does it)."""
    from chaos.errors import EXIT_OK, EXIT_TARGET_MISSED
    from chaos.runner.suite import preflight
    from chaos.scenario.load import load_suite

    scenarios = load_suite(paths)
    steps, runs = sweep_plan(scenarios, save_step, points, model)
    if check_host or not dry_run:
        preflight(runs)  # the runs the sweep starts: their backend, the sweep's faults
    if dry_run:
        sweep = _sweep()
        power = [p for p in points or () if isinstance(p, int)]
        process = [str(p) for p in points or () if isinstance(p, str)]
        for sc in scenarios:
            crashes = []
            if "power" in _models(model) and (points is None or power):
                where = ("per durability boundary of it" if points is None else
                         "after each of its durability boundaries " + ", ".join(map(str, sorted(set(power)))))
                crashes.append(f"one power loss ({sweep.power_loss_type}) {where}")
            if "process" in _models(model) and (points is None or process):
                where = ("before and after each file operation of it and half-way through each file it writes"
                         if points is None else "at its points " + ", ".join(sorted(set(process))))
                crashes.append(f"one process crash ({sweep.process_crash_type}) {where}")
            echo(f"{sc.name}: a trace of the save of step {steps[sc.name]} (the fault-free twin too), then "
                 + "; ".join(crashes))
        return EXIT_OK
    code = EXIT_OK
    for sc in scenarios:
        result = crash_point_sweep(sc, os.path.join(out_dir, sc.name), steps[sc.name],
                                   note=lambda text: echo(f"  {text}"), points=points, model=model)
        for line in sweep_table(result):
            echo(line)
        echo(f"journal: {os.path.join(out_dir, sc.name, SWEEP_FILE)}")
        found = result.boundaries if model == "power" else result.boundaries or result.ops
        if result.problems or result.twin_status != "completed" or not found:
            code = EXIT_TARGET_MISSED
    return code
