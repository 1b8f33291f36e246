"""The record of a run whose controller was killed: written by ``trainchaos cleanup``.

A SIGKILLed controller writes nothing more, but the run's start record (``run.json``:
scenario, seed, plan, written before the job started), its fault journal and every process's
events are on disk. From them cleanup builds the run record with status ``aborted`` (no
verdict: the run never ended), through the same constructor as every other run, so that the
run can still be explained and reported.
"""

from __future__ import annotations

import os
import time

from chaos import __version__
from chaos.faults.base import UnknownFaultType, lookup
from chaos.metrics import FaultRecord, RunInfo, compute_metrics
from chaos.report import write_run_reports
from chaos.runfiles.events import read_events
from chaos.runfiles.record import MetricsRecord, build_run_record, fault_outcome, load_run_start
from chaos.runfiles.rollback import FaultJournal
from chaos.runfiles.rundir import RunDir

__all__ = ["write_aborted_record"]


def write_aborted_record(run_dir: str, reason: str) -> str | None:
    """Write the run record (status ``aborted``) unless the run wrote its own; returns the
    path, or None when there is nothing to write it from (no ``run.json``: the controller
    died before the run started). A malformed ``run.json`` is a RunRecordError."""
    rundir = RunDir.of(run_dir)
    if rundir.has_run_record() or not os.path.exists(rundir.run_start):
        return None
    start = load_run_start(rundir)
    events = read_events(rundir.events)
    faults = _fault_records(rundir)
    t_end = max((e["t"] for e in events), default=start.t_start)
    run = RunInfo(status="aborted", t_start=start.t_start, t_end=t_end,
                  steps_target=start.steps_target, world_size=start.world_size,
                  timeout_s=start.timeout_s, t_stop=t_end)
    metrics = compute_metrics(events, faults, run)
    record = build_run_record(
        start, run_dir=rundir.path, status="aborted", t_end=t_end, error=reason,
        faults=[fault_outcome(f) for f in faults], metrics=MetricsRecord.of(metrics), verdict=None,
        versions={"trainchaos": __version__},
        written_by=f"trainchaos cleanup at {time.strftime('%Y-%m-%dT%H:%M:%S%z')}")
    write_run_reports(rundir.path, record, events)
    return rundir.run_record


def _fault_records(rundir: RunDir) -> list[FaultRecord]:
    """Faults as the fault journal saw them applied (targets resolved at injection)."""
    records: dict[str, FaultRecord] = {}
    journal = FaultJournal(rundir.fault_journal).records()
    applied = {rec.get("fault_id"): rec for rec in journal if rec.get("op") == "applied"}
    for rec in journal:
        if rec.get("op") != "apply" or "unresolved" in (rec.get("target") or {}):
            continue
        if "armed" in rec:
            # Journaled ahead of its time (chaos.runner.lifecycle.arm): injected only if its
            # ``applied`` followed, which says what it hit and when.
            done = applied.get(rec["fault_id"])
            if done is None:
                continue
            rec = {**rec, "target": done.get("target") or rec.get("target"), "t": done.get("t_inject", done.get("t"))}
        failure_class: str  # a journal may name a type this install does not know: "unknown"
        try:
            fault_type = lookup(rec["type"])
            failure_class, also = fault_type.failure_class, tuple(fault_type.also_detected_as)
            family: str | None = fault_type.family
        except UnknownFaultType:
            failure_class, also, family = "unknown", (), None
        target = rec.get("target")
        if not isinstance(target, dict):  # a damaged line's: the fault counts, its target unknown
            target = {}
        srcs = [f"rank-{r}" for r in target.get("ranks") or []] + [f"node-{n}" for n in target.get("nodes") or []]
        records[rec["fault_id"]] = FaultRecord(fault_id=rec["fault_id"], type=rec["type"],
                                               failure_class=failure_class, also_classes=also, family=family,
                                               target_srcs=srcs,
                                               t_inject=rec.get("t"))
    return list(records.values())
