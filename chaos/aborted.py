"""The journal of a run whose controller was killed: written by ``trainchaos cleanup``.

A SIGKILLed controller writes nothing more, but the run's record (``run.json``: scenario,
seed, plan, written before the job started), its fault journal and every process's events
are on disk. From them cleanup builds the journal with status ``aborted`` (no verdict: the
run never ended), so that the run can still be explained and reported.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from chaos import __version__
from chaos.events import read_events
from chaos.faults.base import UnknownFaultType, lookup
from chaos.metrics import FaultRecord, RunInfo, compute_metrics
from chaos.report import write_run_reports
from chaos.report._format import atomic_write_text
from chaos.rollback import FaultJournal

__all__ = ["RUN_RECORD", "write_aborted_journal", "write_run_record"]

RUN_RECORD = "run.json"
JOURNAL = "journal.json"


def write_run_record(run_dir: str, record: dict[str, Any]) -> None:
    atomic_write_text(os.path.join(run_dir, RUN_RECORD), json.dumps(record, default=str, indent=1))


def write_aborted_journal(run_dir: str, reason: str) -> str | None:
    """Write ``journal.json`` (status ``aborted``) unless the run wrote its own; returns the
    path, or None when there is nothing to write it from."""
    if os.path.exists(os.path.join(run_dir, JOURNAL)):
        return None
    try:
        with open(os.path.join(run_dir, RUN_RECORD), encoding="utf-8") as fh:
            record = json.load(fh)
    except (OSError, json.JSONDecodeError):
        return None
    events = read_events(os.path.join(run_dir, "events"))
    faults = _fault_records(run_dir)
    t_end = max((e["t"] for e in events), default=record["t_start"])
    run = RunInfo(status="aborted", t_start=record["t_start"], t_end=t_end,
                  steps_target=record["steps_target"], world_size=record["world_size"],
                  timeout_s=record.get("timeout_s"), t_stop=t_end)
    metrics = compute_metrics(events, faults, run)
    journal = {
        "format": 1, "scenario": record["scenario"], "run_id": record["run_id"],
        "run_dir": os.path.abspath(run_dir), "status": "aborted", "error": reason,
        "tool_errors": [], "traceback": None, "backend": record.get("backend"),
        "started_at": record["started_at"], "ended_at": None, "wall_s": round(t_end - record["t_start"], 3),
        "versions": {"trainchaos": __version__}, "seed": record["seed"],
        "plan_seed": record.get("plan_seed"), "plan": record["plan"],
        "faults": [{"fault_id": f.fault_id, "type": f.type, "failure_class": f.failure_class,
                    "target_srcs": f.target_srcs, "t_inject": f.t_inject} for f in faults],
        "metrics": metrics.to_dict(), "verdict": None, "baseline": None,
        "journal_written_by": f"trainchaos cleanup at {time.strftime('%Y-%m-%dT%H:%M:%S%z')}",
    }
    write_run_reports(run_dir, journal, events)
    return os.path.join(run_dir, JOURNAL)


def _fault_records(run_dir: str) -> list[FaultRecord]:
    """Faults as the fault journal saw them applied (targets resolved at injection)."""
    records: dict[str, FaultRecord] = {}
    for rec in FaultJournal(os.path.join(run_dir, "fault_journal.jsonl")).records():
        if rec.get("op") != "apply" or "unresolved" in (rec.get("target") or {}):
            continue
        try:
            fault_type = lookup(rec["type"])
            failure_class, also = fault_type.failure_class, tuple(fault_type.also_detected_as)
            family: str | None = fault_type.family
        except UnknownFaultType:
            failure_class, also, family = "unknown", (), None
        target = rec.get("target") or {}
        srcs = [f"rank-{r}" for r in target.get("ranks", [])] + [f"node-{n}" for n in target.get("nodes", [])]
        records[rec["fault_id"]] = FaultRecord(fault_id=rec["fault_id"], type=rec["type"],
                                               failure_class=failure_class, also_classes=also, family=family,
                                               target_srcs=srcs,
                                               t_inject=rec.get("t"))
    return list(records.values())
