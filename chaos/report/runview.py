"""What the HTML report draws, as plain data: lanes, the segments a process was alive in each,
the marks on them (injection, detection, exit, restart, checkpoint save and load, recovery,
catch-up), step progress over time and the loss against the fault-free baseline.

Built from a journal and its run's events alone (no plotting here), so that it is cheap to
test and ``trainchaos report`` can rebuild the page from the files a run left.

Lanes: one per node of the topology (spares included) and one per rank, each rank under the
node it first started on. A node lane is alive while at least one of its ranks is; a rank
lane has one segment per incarnation, from ``rank_start`` to ``rank_exit`` (or its last event:
a killed process leaves no exit event, so its segment ends at the kill when a fault hit it).
Times are seconds since the run started (``metrics.t_start``, else the first event).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from chaos.metrics.families.data import baseline_samples, step_coverage
from chaos.metrics.families.freshness import stale_text
from chaos.report._format import finite_number
from chaos.runfiles.events import read_events
from chaos.runfiles.record import FaultOutcome, RunRecord
from chaos.runfiles.record_metrics import MetricsRecord
from chaos.runfiles.rundir import RunDir

__all__ = ["Lane", "Mark", "MarkKind", "RunView", "Segment", "build_run_view", "baseline_events"]

MarkKind = Literal[
    "fault_injected", "fault_reverted", "detected", "false_detection", "teardown_detection",
    "rank_exit", "restart", "ckpt_save", "ckpt_load", "recovery", "catchup", "job_stop",
    "stale_checkpoint", "torn_checkpoint",
]


@dataclass
class Lane:
    name: str
    """``node-1`` or ``rank-3``: the event ``src`` it shows."""
    kind: Literal["node", "rank"]
    node: int | None = None


@dataclass
class Segment:
    lane: str
    t0: float
    t1: float
    incarnation: int
    first_step: int | None = None
    last_step: int | None = None
    end: str = ""
    """How it ended, in words: ``exit 75: peer monitor: ...``, ``killed (f0-kill_rank)``."""


@dataclass
class Mark:
    t: float
    kind: MarkKind
    lane: str | None
    """None: a run-wide moment (recovery, catch-up), drawn across every lane."""
    label: str
    to_lane: str | None = None
    """For a detection: the lane of the process blamed."""
    fault_id: str | None = None


@dataclass
class RunView:
    t0: float
    duration: float
    lanes: list[Lane] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    steps: dict[tuple[str, int], list[tuple[float, int]]] = field(default_factory=dict)
    """(src, incarnation) -> [(t, step)]: step progress over time."""
    losses: dict[int, list[tuple[int, float]]] = field(default_factory=dict)
    """incarnation -> [(step, loss)] of the reference rank (rank-0, else the lowest)."""
    baseline_losses: list[tuple[int, float]] = field(default_factory=list)
    t_stop: float | None = None
    """When trainchaos began stopping the job (relative); None when it ended on its own."""
    steps_target: int | None = None
    coverage: list[tuple[int, int, str]] = field(default_factory=list)
    """The samples lane: (step, incarnation, once | duplicate | rolled_back) for each step a
    rank reported samples for (chaos/metrics/families/data.py; empty: none reported)."""

    def lane_names(self) -> list[str]:
        return [lane.name for lane in self.lanes]


def _int(value: Any) -> int | None:
    number = finite_number(value)
    return None if number is None else int(number)


def _rank_index(src: str) -> int | None:
    prefix, _, rest = src.partition("-")
    return int(rest) if prefix == "rank" and rest.isdigit() else None


def _node_index(src: str) -> int | None:
    prefix, _, rest = src.partition("-")
    return int(rest) if prefix == "node" and rest.isdigit() else None


def baseline_events(record: RunRecord, run_dir: str | None = None) -> list[dict[str, Any]]:
    """The fault-free twin's events: from a ``baseline`` folder next to the run (where the run
    is now, ``run_dir``, else where the record says it was), else from the directory the
    record names for the baseline."""
    baseline = record.baseline
    if baseline is None:
        return []
    candidates = []
    for where in (run_dir, record.run_dir):
        if where:
            candidates.append(os.path.join(os.path.dirname(os.path.abspath(str(where))), "baseline"))
    candidates.append(str(baseline.run_dir or ""))
    for candidate in candidates:
        events_dir = RunDir(candidate).events
        if candidate and os.path.isdir(events_dir):
            return read_events(events_dir)
    return []


def _reference_rank(events: list[dict[str, Any]]) -> str | None:
    ranks = {str(e.get("src")) for e in events if e.get("kind") == "step_end"}
    ranked = sorted((r for r in ranks if _rank_index(r) is not None), key=lambda r: _rank_index(r) or 0)
    return ranked[0] if ranked else None


def _loss_curve(events: list[dict[str, Any]], src: str | None) -> dict[int, list[tuple[int, float]]]:
    curves: dict[int, list[tuple[int, float]]] = {}
    for e in events:
        if e.get("kind") != "step_end" or e.get("src") != src:
            continue
        step, loss = _int(e.get("step")), finite_number(e.get("loss"))
        if step is None or loss is None:
            continue
        curves.setdefault(_int(e.get("incarnation")) or 0, []).append((step, loss))
    return curves


def build_run_view(record: RunRecord, events: list[dict[str, Any]],
                   base_events: list[dict[str, Any]] | None = None) -> RunView:
    """Lanes, segments, marks and curves of one run (see the module docstring)."""
    events = sorted((e for e in events if isinstance(e, dict) and finite_number(e.get("t")) is not None),
                    key=lambda e: float(e["t"]))
    metrics = record.metrics or MetricsRecord()
    t_start = finite_number(metrics.t_start)
    if t_start is None:
        t_start = float(events[0]["t"]) if events else 0.0
    t_end = finite_number(metrics.t_end)
    if t_end is None:
        t_end = float(events[-1]["t"]) if events else t_start + (finite_number(record.wall_s) or 0.0)
    view = RunView(t0=t_start, duration=max(0.0, t_end - t_start),
                   steps_target=_int(metrics.steps_target))

    def rel(t: float) -> float:
        return float(t) - t_start

    stops = [e for e in events if e.get("kind") == "job_stop"]
    if stops and record.status != "completed":
        view.t_stop = rel(stops[0]["t"])
    t_stop_abs = float(stops[0]["t"]) if stops else math.inf

    view.lanes = _lanes(record, events)
    faults = record.faults
    view.segments = _segments(view.lanes, events, faults, rel)
    _step_series(view, events, rel)
    ref = _reference_rank(events)
    view.losses = _loss_curve(events, ref)
    if base_events:
        curves = _loss_curve(base_events, _reference_rank(base_events))
        # The baseline never restarts; should it have, the last incarnation's value stands.
        merged: dict[int, float] = {}
        for inc in sorted(curves):
            merged.update(dict(curves[inc]))
        view.baseline_losses = sorted(merged.items())

    view.marks = _marks(record, events, faults, metrics, rel, t_stop_abs)
    view.coverage = step_coverage(events, baseline_samples(base_events) if base_events else None)
    return view


def _lanes(record: RunRecord, events: list[dict[str, Any]]) -> list[Lane]:
    topology = record.scenario.topology
    n_nodes = (_int(topology.get("nodes")) or 0) + (_int(topology.get("spares")) or 0)
    rank_node: dict[int, int | None] = {}
    nodes: set[int] = set(range(n_nodes))
    for e in events:
        src = str(e.get("src") or "")
        rank = _rank_index(src)
        if rank is not None:
            node = _int(e.get("node")) if e.get("kind") == "rank_start" else None
            if rank not in rank_node or (rank_node[rank] is None and node is not None):
                rank_node[rank] = node
            if node is not None:
                nodes.add(node)
        elif (node_index := _node_index(src)) is not None:
            nodes.add(node_index)
    lanes: list[Lane] = []
    for node in sorted(nodes):
        lanes.append(Lane(f"node-{node}", "node", node))
        lanes += [Lane(f"rank-{r}", "rank", node) for r in sorted(rank_node) if rank_node[r] == node]
    lanes += [Lane(f"rank-{r}", "rank", None) for r in sorted(rank_node) if rank_node[r] is None]
    return lanes


def _segments(lanes: list[Lane], events: list[dict[str, Any]], faults: list[FaultOutcome],
              rel: Callable[[float], float]) -> list[Segment]:
    by_proc: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for e in events:
        src = str(e.get("src") or "")
        if _rank_index(src) is not None:
            by_proc.setdefault((src, _int(e.get("incarnation")) or 0), []).append(e)
    kills = [(float(f.t_inject), f.fault_id, set(f.target_srcs))
             for f in faults if f.t_inject is not None and finite_number(f.t_inject) is not None]
    segments: list[Segment] = []
    for (src, inc), evs in sorted(by_proc.items(), key=lambda kv: (_rank_index(kv[0][0]), kv[0][1])):
        start = next((e for e in evs if e.get("kind") == "rank_start"), evs[0])
        exit_ev = next((e for e in evs if e.get("kind") == "rank_exit"), None)
        steps = [s for s in (_int(e.get("step")) for e in evs if e.get("kind") == "step_end") if s is not None]
        t1 = float((exit_ev or evs[-1])["t"])
        if exit_ev is not None:
            end = f"exit {exit_ev.get('code')}: {exit_ev.get('reason') or ''}".rstrip(": ")
        else:
            next_start = min((float(o[0]["t"]) for (s, i), o in by_proc.items() if s == src and i > inc),
                             default=math.inf)
            hit = [(t, fid) for t, fid, srcs in kills if src in srcs and t1 <= t <= next_start]
            if hit:
                t1, end = hit[0][0], f"killed or stopped by {hit[0][1]}"
            else:
                end = "no exit event (the process was stopped)"
        segments.append(Segment(src, rel(start["t"]), rel(t1), inc, min(steps) if steps else None,
                                max(steps) if steps else None, end))
    # A node is alive while one of its ranks is: the union of their segments.
    for lane in lanes:
        if lane.kind != "node":
            continue
        spans = sorted((s.t0, s.t1) for s in segments
                       if any(r.name == s.lane and r.node == lane.node for r in lanes if r.kind == "rank"))
        merged: list[list[float]] = []
        for t0, t1 in spans:
            if merged and t0 <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], t1)
            else:
                merged.append([t0, t1])
        segments += [Segment(lane.name, t0, t1, 0, end="no rank left on the node") for t0, t1 in merged]
    return segments


def _step_series(view: RunView, events: list[dict[str, Any]], rel: Callable[[float], float]) -> None:
    for e in events:
        if e.get("kind") != "step_end" or _rank_index(str(e.get("src") or "")) is None:
            continue
        step = _int(e.get("step"))
        if step is not None:
            key = (str(e["src"]), _int(e.get("incarnation")) or 0)
            view.steps.setdefault(key, []).append((rel(e["t"]), step))


def _false_keys(metrics: MetricsRecord) -> set[tuple[float, str]]:
    keys = set()
    for fe in metrics.false_detection_events or []:
        if isinstance(fe, dict) and finite_number(fe.get("t")) is not None:
            keys.add((round(float(fe["t"]), 6), str(fe.get("by") or fe.get("src") or "")))
    return keys


def _marks(record: RunRecord, events: list[dict[str, Any]], faults: list[FaultOutcome],
           metrics: MetricsRecord, rel: Callable[[float], float], t_stop_abs: float) -> list[Mark]:
    marks: list[Mark] = []
    for f in faults:
        t = finite_number(f.t_inject)
        if t is None:
            continue
        fid = f.fault_id or "fault"
        targets: list[str | None] = [s for s in f.target_srcs if isinstance(s, str)] or [None]
        step = f.step_at_inject
        where = f" at step {step}" if step is not None else ""
        for src in targets:
            marks.append(Mark(rel(t), "fault_injected", src,
                              f"{fid} injected ({f.type}){where}", fault_id=fid))
        t_revert = finite_number(f.t_revert)
        if t_revert is not None and t_revert < t_stop_abs:
            marks.append(Mark(rel(t_revert), "fault_reverted", targets[0], f"{fid} reverted", fault_id=fid))
    false_keys = _false_keys(metrics)
    stale = {(str(i.get("path")), _int(i.get("step"))): i for i in metrics.stale_checkpoint_list or []
             if isinstance(i, dict)}
    torn_seen: set[str] = set()
    for e in events:
        kind, src = e.get("kind"), str(e.get("src") or "")
        t = rel(e["t"])
        if kind == "detected":
            suspect = e.get("suspect")
            blamed = f"blamed {suspect}" if suspect else "blamed no one"
            label = f"{e.get('by') or src} {blamed} ({e.get('failure_class') or 'unknown'}): {e.get('reason') or ''}"
            if float(e["t"]) >= t_stop_abs:
                mk: MarkKind = "teardown_detection"
                label += " [while trainchaos stopped the job: not counted]"
            elif (round(float(e["t"]), 6), str(e.get("by") or src)) in false_keys:
                mk = "false_detection"
                label = "FALSE ALARM: " + label
            else:
                mk = "detected"
            marks.append(Mark(t, mk, src, label.rstrip(": "), to_lane=str(suspect) if suspect else None))
        elif kind == "rank_exit" and _rank_index(src) is not None:
            marks.append(Mark(t, "rank_exit", src, f"{src} exited {e.get('code')}: {e.get('reason') or ''}".rstrip(": ")))
        elif kind == "rank_start" and (_int(e.get("incarnation")) or 0) > 0:
            resumed = e.get("resumed_from")
            extra = f", resumes from step {resumed}" if resumed is not None else ""
            marks.append(Mark(t, "restart", src, f"{src} restarted (incarnation {e.get('incarnation')}){extra}"))
        elif kind == "ckpt_save_end":
            size = finite_number(e.get("bytes"))
            size_text = f", {size / 1e6:.1f} MB" if size is not None else ""
            secs = finite_number(e.get("seconds"))
            secs_text = f" in {secs:.2f} s" if secs is not None else ""
            marks.append(Mark(t, "ckpt_save", src, f"{src} saved checkpoint step {e.get('step')}{size_text}{secs_text}"))
        elif kind == "ckpt_load":
            verified = "verified" if e.get("verified") else "not verified"
            skipped = e.get("skipped") or []
            extra = f", skipped {len(skipped)} corrupt" if skipped else ""
            marks.append(Mark(t, "ckpt_load", src, f"{src} loaded checkpoint step {e.get('step')} ({verified}{extra})"))
            for item in skipped:  # each checkpoint the load found torn or corrupt, marked once
                if isinstance(item, list | tuple) and len(item) >= 2 and str(item[0]) not in torn_seen:
                    torn_seen.add(str(item[0]))
                    marks.append(Mark(t, "torn_checkpoint", src, f"TORN checkpoint skipped on load: "
                                      f"{os.path.basename(str(item[0]))}: {item[1]}"))
        elif kind == "ckpt_image" and (item := stale.get((str(e.get("path")), _int(e.get("step"))))):
            marks.append(Mark(t, "stale_checkpoint", str(e.get("saved_by") or "") or None,
                              f"STALE checkpoint: {stale_text(item)} ({e.get('path')})"))
        elif kind == "job_stop" and record.status != "completed":
            marks.append(Mark(t, "job_stop", None, f"trainchaos stops the job ({e.get('status') or record.status})"))
    for fm in metrics.faults:
        t_inject = finite_number(fm.t_inject)
        if t_inject is None:
            continue
        fid = str(fm.fault_id or "fault")
        recovery, catchup = finite_number(fm.recovery_s), finite_number(fm.catchup_s)
        if recovery is not None:
            how = "restart" if fm.restarted else "no restart"
            marks.append(Mark(rel(t_inject + recovery), "recovery", None,
                              f"{fid} recovered: first productive step +{recovery:.2f} s ({how})", fault_id=fid))
        if catchup is not None and (recovery is None or abs(catchup - recovery) > 1e-9):
            marks.append(Mark(rel(t_inject + catchup), "catchup", None,
                              f"{fid} caught up: step {fm.last_step_before} reached again +{catchup:.2f} s",
                              fault_id=fid))
    marks.sort(key=lambda m: m.t)
    return marks
