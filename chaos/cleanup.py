"""``trainchaos cleanup``: undo what a crashed controller left, from its journals alone."""

from __future__ import annotations

import json
import os

from chaos.faults.base import UnknownFaultType, lookup
from chaos.procs import find_run_processes, kill_pids
from chaos.rollback import FaultJournal, active_runs, unregister_run

__all__ = ["cleanup_runs"]


def _controller_alive(pid: int | None) -> bool:
    if not pid or pid == os.getpid():
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read()
    except OSError:
        return False
    return b"trainchaos" in cmd or b"chaos" in cmd


def _clean_one(run_id: str, run_dir: str) -> list[str]:
    lines = []
    journal = FaultJournal(os.path.join(run_dir, "fault_journal.jsonl"))
    for pending in journal.pending():
        try:
            lookup(pending["type"]).revert_record(pending["details"])
            journal.reverted(pending["fault_id"], None)
            lines.append(f"{run_id}: reverted {pending['fault_id']} ({pending['type']})")
        except UnknownFaultType:
            lines.append(f"{run_id}: cannot revert {pending['fault_id']}: unknown fault type {pending['type']!r}")
    procs = find_run_processes(run_id)
    if procs:
        kill_pids([p.pid for p in procs])
        lines.append(f"{run_id}: killed {len(procs)} process(es): " + ", ".join(str(p.pid) for p in procs))
    unregister_run(run_id)
    return lines


def cleanup_runs(run_dirs: list[str], force: bool = False) -> list[str]:
    """Clean the given run directories, or every registered active run whose controller is gone."""
    lines: list[str] = []
    targets: list[tuple[str, str, int | None]] = []
    if run_dirs:
        registered = {os.path.abspath(r["run_dir"]): r for r in active_runs()}
        for d in run_dirs:
            d = os.path.abspath(d)
            reg = registered.get(d)
            run_id = reg["run_id"] if reg else _run_id_from_journal(d)
            if run_id is None:
                lines.append(f"{d}: no run id found (not a trainchaos run directory?)")
                continue
            targets.append((run_id, d, reg.get("pid") if reg else None))
    else:
        targets = [(r["run_id"], r["run_dir"], r.get("pid")) for r in active_runs()]
    for run_id, run_dir, pid in targets:
        if _controller_alive(pid) and not force:
            lines.append(f"{run_id}: controller (pid {pid}) is still running; skipped (use --force)")
            continue
        lines.extend(_clean_one(run_id, run_dir))
    return lines


def _run_id_from_journal(run_dir: str) -> str | None:
    try:
        with open(os.path.join(run_dir, "journal.json"), encoding="utf-8") as fh:
            return json.load(fh).get("run_id")
    except (OSError, json.JSONDecodeError):
        pass
    import glob

    for path in glob.glob(os.path.join(run_dir, "events", "injector.*.jsonl")):
        try:
            with open(path, encoding="utf-8") as fh:
                for line in fh:
                    event = json.loads(line)
                    if event.get("kind") == "job_start":
                        return event.get("run_id")
        except (OSError, json.JSONDecodeError):
            continue
    return None
