"""A run's and a suite's files in one call each: the record first (its failure propagates),
then the derived reports (a failure is logged and skipped). Apart from the package's
``__init__`` so that ``rebuild`` uses them without importing the package back."""

from __future__ import annotations

import logging
from typing import Any

from chaos.report.aggregate import suite_name_of, write_suite_report
from chaos.report.html import RUN_HTML, SUITE_HTML, write_run_html, write_suite_html
from chaos.report.summary import write_summary
from chaos.report.timeline import write_timeline
from chaos.runfiles.record import RunRecord, write_run_record

__all__ = ["write_run_reports", "write_suite_reports"]

log = logging.getLogger(__name__)


def write_run_reports(run_dir: str, record: RunRecord, events: list[dict[str, Any]]) -> list[str]:
    """Write one run's record (``journal.json``), summary, timeline and HTML page into
    ``run_dir``; returns the paths.

    The record goes first and its failure propagates: it is the record of the run. A bug
    in a derived report (summary, timeline, HTML) is logged with its traceback and skipped,
    so that it costs a file, not the run's verdict and exit code; the record holds the same
    data.
    """
    paths = [write_run_record(run_dir, record)]
    try:
        paths.append(write_summary(run_dir, record))
    except Exception:  # noqa: BLE001
        log.exception("summary.md not written for %s", run_dir)
    try:
        paths.extend(write_timeline(run_dir, events))
    except Exception:  # noqa: BLE001
        log.exception("timeline not written for %s", run_dir)
    try:
        paths.append(write_run_html(run_dir, record, events))
    except Exception:  # noqa: BLE001
        log.exception("%s not written for %s", RUN_HTML, run_dir)
    return paths


def write_suite_reports(out_dir: str, records: list[RunRecord], suite_name: str | None = None,
                        run_dirs: list[str] | None = None, comparison: dict[str, Any] | None = None) -> list[str]:
    """``suite.json`` and ``suite.md`` (failures propagate: they are the suite's record), then
    ``index.html`` (a failure is logged and skipped, as for a run's derived reports)."""
    suite = suite_name or suite_name_of(records)
    paths = write_suite_report(out_dir, records, suite)
    try:
        paths.append(write_suite_html(out_dir, records, suite, run_dirs, comparison))
    except Exception:  # noqa: BLE001
        log.exception("%s not written for %s", SUITE_HTML, out_dir)
    return paths
