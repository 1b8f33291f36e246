"""``trainchaos report DIR``: write a run's or a suite's derived reports again from the
journal files (and each run's ``events/``), e.g. after an upgrade of trainchaos, or for a
folder copied off a CI machine. The journals themselves are never rewritten.
"""

from __future__ import annotations

import json
import os
from typing import Any

from chaos.contract import EVENTS_SUBDIR, SHARED_CHECKPOINTS_SUBDIR
from chaos.report.html import SUITE_HTML, write_run_html
from chaos.report.summary import write_summary
from chaos.runfiles.record import RunRecord, RunRecordError, load_run_record
from chaos.runfiles.rundir import LOGS_SUBDIR, RUN_RECORD_FILE, RunDir
from chaos.runfiles.suite_record import SUITE_JSON, SuiteRecordError, load_suite_record

__all__ = ["find_run_dirs", "rebuild"]

_NOT_RUNS = {SHARED_CHECKPOINTS_SUBDIR, EVENTS_SUBDIR, LOGS_SUBDIR}


def find_run_dirs(root: str) -> list[str]:
    """Every directory under ``root`` that holds a journal, in path order."""
    found = []
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _NOT_RUNS and not d.startswith("."))
        if RUN_RECORD_FILE in files:
            found.append(here)
            dirs[:] = []  # a run directory holds no other run
    return found


def _rebuild_run(run_dir: str) -> tuple[RunRecord, list[str]]:
    record = load_run_record(run_dir)
    paths = [write_run_html(run_dir, record), write_summary(run_dir, record)]
    return record, paths


def rebuild(path: str) -> list[str]:
    """Rebuild ``path``: a run directory (its ``report.html`` and ``summary.md``), or a suite
    directory (every run's, then ``suite.json``, ``suite.md`` and ``index.html``)."""
    from chaos.report.writers import write_suite_reports

    path = os.path.normpath(path)
    if not os.path.isdir(path):
        raise RunRecordError(f"{path}: not a directory (expected a run or a suite directory)")
    if RunDir(path).has_run_record():
        _, paths = _rebuild_run(path)
        return paths
    run_dirs = find_run_dirs(path)
    if not run_dirs:
        raise RunRecordError(f"{path}: no {RUN_RECORD_FILE} under it (is this a run or a suite directory?)")
    records: list[RunRecord] = []
    dirs: list[str] = []
    written: list[str] = []
    for run_dir in run_dirs:
        record, paths = _rebuild_run(run_dir)
        written += paths
        # The fault-free twin is a reference for its scenario, not one of the suite's runs.
        if os.path.basename(run_dir) != "baseline":
            records.append(record)
            dirs.append(run_dir)
    if not records:
        return written
    suite = _suite_name(path)
    suite_paths = write_suite_reports(path, records, suite, run_dirs=dirs, comparison=_comparison(path))
    index = [p for p in suite_paths if p.endswith(SUITE_HTML)]
    return index + [p for p in suite_paths if p not in index] + written


def _comparison(path: str) -> dict[str, Any] | None:
    """The gate's last result for this suite (``compare.json``), shown again on its page."""
    try:
        with open(os.path.join(path, "compare.json"), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _suite_name(path: str) -> str:
    """The name the suite's record gives, else the folder's (no suite.json yet, or one this
    trainchaos cannot read: it is written again)."""
    if os.path.exists(os.path.join(path, SUITE_JSON)):
        try:
            name = load_suite_record(path).suite
            if name:
                return name
        except SuiteRecordError:
            pass
    return os.path.basename(os.path.abspath(path)) or "suite"

