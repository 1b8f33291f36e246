"""Everything a run writes and prints, built from its run records (``chaos.runfiles.record.RunRecord``).

Per run (``reports/<suite>/<scenario>/<repeat>/``): ``journal.json`` (the run record,
``chaos.runfiles.record``), ``summary.md``, ``timeline.csv``, ``timeline.parquet`` and
``report.html``. Per suite: ``suite.json``, ``suite.md``, ``index.html`` and JUnit XML. On the console: the verdict table and the
progress display. ``rebuild_reports`` writes the derived files again from the journals
(``trainchaos report``).
"""

from __future__ import annotations

from chaos.report.aggregate import aggregate, render_suite_md, suite_name_of, write_suite_report
from chaos.report.console import ProgressDisplay, print_verdict_table, verdict_table
from chaos.report.html import RUN_HTML, SUITE_HTML, write_run_html, write_suite_html
from chaos.report.junit import render_junit, write_junit
from chaos.report.summary import render_summary, write_summary
from chaos.report.timeline import timeline_frame, write_timeline
from chaos.report.writers import write_run_reports, write_suite_reports

__all__ = [
    "ProgressDisplay",
    "RUN_HTML",
    "SUITE_HTML",
    "aggregate",
    "print_verdict_table",
    "rebuild_reports",
    "render_junit",
    "render_suite_md",
    "render_summary",
    "suite_name_of",
    "timeline_frame",
    "verdict_table",
    "write_junit",
    "write_run_html",
    "write_run_reports",
    "write_suite_html",
    "write_suite_report",
    "write_suite_reports",
    "write_summary",
    "write_timeline",
]

def rebuild_reports(path: str) -> list[str]:
    """Write every derived report under ``path`` (a run or a suite directory) again from its
    journals; returns the paths, the HTML page of ``path`` itself first."""
    from chaos.report.rebuild import rebuild

    return rebuild(path)
