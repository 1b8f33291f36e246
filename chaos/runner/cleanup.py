"""``trainchaos cleanup``: undo what a crashed controller left, from its journals alone; and
``cleanup --check``: list what is left, changing nothing.

A run is left behind when its controller is gone (SIGKILL, a crash, a reboot of the CI
runner) and its registry entry is still there. Its fault journal says which faults to revert,
its resource journal which resources to tear down (newest first); its processes are found by
the run id in their environment. Beyond the registry, every process carrying a run id whose
controller is gone, and every resource a kind finds by the project's naming that belongs to
no live run, is a leftover too. A live run (its controller still runs) is never touched unless
named with ``--run-dir`` and ``--force``.

A damaged line of a fault journal, or a damaged registry entry, is named (file and line) and
skipped; every record around it is still acted on. A damaged registry entry is a failure
(cleanup cannot tell which run directory it meant); a damaged journal line is said, and the
run is cleaned from the rest.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass, field

from chaos.faults.base import UnknownFaultType, lookup
from chaos.runfiles.record import RunRecordError, load_run_record
from chaos.runfiles.resources import known_kinds, pending_resources, release_records
from chaos.runfiles.rollback import (
    FaultJournal,
    active_runs,
    live_run_ids,
    prune_live_marks,
    registry_problems,
    run_is_live,
    unregister_run,
)
from chaos.runfiles.rundir import RunDir
from chaos.runner.aborted import write_aborted_record
from chaos.util.procs import find_run_processes, kill_pids

__all__ = ["CleanupReport", "cleanup_runs", "find_leftovers"]


@dataclass
class CleanupReport:
    lines: list[str] = field(default_factory=list)
    """What was done, one line each."""
    failures: list[str] = field(default_factory=list)
    """What could not be undone: cleanup exits non-zero when any."""


def _clean_one(run_id: str, run_dir: str, report: CleanupReport) -> None:
    rundir = RunDir(run_dir)
    fault_journal = FaultJournal(rundir.fault_journal)
    report.lines.extend(f"{run_id}: skipped a damaged line of the fault journal: {line}"
                        for line in fault_journal.damaged())
    for fault in fault_journal.pending():
        label = f"{fault['fault_id']} ({fault['type']})"
        try:
            lookup(fault["type"]).revert_record(fault["details"])
        except UnknownFaultType:
            report.failures.append(f"{run_id}: cannot revert {label}: unknown fault type")
            continue
        except Exception as exc:  # go on: every other fault and resource still gets undone
            report.failures.append(f"{run_id}: cannot revert {label}: {exc}")
            continue
        fault_journal.reverted(fault["fault_id"], None)
        report.lines.append(f"{run_id}: reverted {label}")
    # Processes before resources: a helper must be gone before its directory or device is.
    procs = find_run_processes(run_id)
    if procs:
        kill_pids([p.pid for p in procs])
        report.lines.append(f"{run_id}: killed {len(procs)} process(es): " + ", ".join(str(p.pid) for p in procs))
    resources_path = rundir.resources_journal
    pending = pending_resources(resources_path)
    failures = release_records(resources_path, pending)
    report.failures.extend(f"{run_id}: {f}" for f in failures)
    if len(pending) > len(failures):
        report.lines.append(f"{run_id}: released {len(pending) - len(failures)} resource(s)")
    try:
        written = write_aborted_record(run_dir, "the controller was gone (killed or crashed); "
                                                "journal written by trainchaos cleanup")
    except Exception as exc:  # the run record is a record, not a revert: report and go on
        report.failures.append(f"{run_id}: journal not written: {exc}")
    else:
        if written:
            report.lines.append(f"{run_id}: wrote {written} (status aborted)")
    if not failures:
        unregister_run(run_id)


def cleanup_runs(run_dirs: list[str], force: bool = False) -> CleanupReport:
    """Clean the given run directories, or every run whose controller is gone; then every
    orphaned process and leftover resource found on the machine (none of a live run)."""
    report = CleanupReport()
    targets: list[tuple[str, str, bool]] = []
    registered = {os.path.abspath(r["run_dir"]): r for r in active_runs()}
    if run_dirs:
        for d in run_dirs:
            d = os.path.abspath(d)
            reg = registered.get(d)
            run_id = reg["run_id"] if reg else _run_id_of(d)
            if run_id is None:
                report.failures.append(f"{d}: no run id found (not a trainchaos run directory?)")
                continue
            targets.append((run_id, d, reg is not None and run_is_live(reg)))
    else:
        targets = [(r["run_id"], r["run_dir"], run_is_live(r)) for r in registered.values()]
        report.failures.extend(f"{problem}: left in place (remove it once the run it meant is dealt with)"
                               for problem in registry_problems())
    for run_id, run_dir, live in targets:
        if live and not force:
            report.lines.append(f"{run_id}: its controller is still running; skipped (--force to clean it anyway)")
            continue
        _clean_one(run_id, run_dir, report)
    if not run_dirs:
        _clean_unregistered(report)
    return report


def _clean_unregistered(report: CleanupReport) -> None:
    """Leftovers no registry entry leads to (an entry removed by hand, a foreign state dir).
    A run of another state dir whose controller runs is alive, not a leftover (its mark)."""
    prune_live_marks()
    live = live_run_ids()
    orphans = [p for p in find_run_processes() if p.orphaned and p.run_id not in live]
    if orphans:
        kill_pids([p.pid for p in orphans])
        report.lines.append(f"killed {len(orphans)} orphaned process(es) of gone controllers: "
                            + ", ".join(f"{p.pid} ({p.run_id})" for p in orphans))
    # Newest kinds first, as release_all goes newest first: a later kind's resources live in
    # an earlier kind's (a FUSE mount inside a node's scratch directory).
    for kind, cls in reversed(known_kinds().items()):
        for left in cls.scan():
            if left.run_id in live:
                continue
            try:
                cls.destroy(left.spec, {})
                report.lines.append(f"removed leftover {kind} {left.name}")
            except Exception as exc:
                report.failures.append(f"leftover {kind} {left.name}: {exc}")


def find_leftovers() -> list[str]:
    """What runs whose controller is gone left on this machine; changes nothing."""
    found: list[str] = []
    live = live_run_ids()
    listed = set(live)  # a dead registered run's resources are listed under it, once
    for entry in active_runs():
        if run_is_live(entry):
            continue
        listed.add(entry["run_id"])
        run_id, run_dir = entry["run_id"], entry["run_dir"]
        rundir = RunDir(run_dir)
        journal = FaultJournal(rundir.fault_journal)
        faults = journal.pending()
        resources = pending_resources(rundir.resources_journal)
        found.append(f"run {run_id} ({run_dir}): controller gone; {len(faults)} fault(s) not "
                     f"reverted, {len(resources)} resource(s) not released")
        found.extend(f"  fault {f['fault_id']} ({f['type']})" for f in faults)
        found.extend(f"  damaged fault journal line {line}" for line in journal.damaged())
        found.extend(f"  {r['kind']} {r['spec'].get('path') or r['spec'].get('name') or r['details']}"
                     for r in resources)
    found.extend(f"damaged registry entry {problem}" for problem in registry_problems())
    for proc in find_run_processes():
        if proc.orphaned and proc.run_id not in live:
            found.append(f"process {proc.pid} of run {proc.run_id} (controller gone): {proc.cmdline[:120]}")
    for kind, cls in known_kinds().items():
        found.extend(f"{kind} {left.name} (run {left.run_id})" for left in cls.scan()
                     if left.run_id not in listed)
    return found


def _run_id_of(run_dir: str) -> str | None:
    """The run id from the run record, else from the injector's ``job_start`` event (the
    controller died before it wrote the record)."""
    rundir = RunDir(run_dir)
    try:
        run_id = load_run_record(rundir.run_record).run_id
    except RunRecordError:
        run_id = None
    if run_id:
        return run_id
    for path in glob.glob(os.path.join(rundir.events, "injector.*.jsonl")):
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    try:
                        event = json.loads(line)
                    except ValueError:
                        continue  # a torn or garbage line: the job_start may follow
                    if isinstance(event, dict) and event.get("kind") == "job_start":
                        return event.get("run_id")
        except OSError:
            continue
    return None
