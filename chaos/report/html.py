"""``report.html`` per run and ``index.html`` per suite: the run as a page a person looks at.

One self-contained file each: CSS inline, figures as inline SVG (``chaos.report.figures``),
no script, no external asset, so a page opens the same from a CI artifact, a laptop without
network, or a mail attachment. Links (logs, events, the journal, each run's page) are
relative, so a report folder can be moved or uploaded as a whole.

The run page answers, top to bottom: did it pass and why not; the metrics against their
targets; the timeline (when the fault landed, who noticed and whom they blamed, when each
rank stopped and came back, checkpoints, recovery and catch-up); the loss against the
fault-free twin; each fault with its fidelity statement; the files. The suite page lists
every scenario and repeat with its verdict, and the metrics across repeats.

The run page is ``chaos.report.run_page``, the suite page ``chaos.report.suite_page``, their
shared chrome ``chaos.report._page``; this module is the one name the rest of the tool uses.
"""

from __future__ import annotations

from chaos.report._page import RUN_HTML, SUITE_HTML
from chaos.report.run_page import render_run_html, write_run_html
from chaos.report.suite_page import render_suite_html, write_suite_html

__all__ = [
    "RUN_HTML",
    "SUITE_HTML",
    "render_run_html",
    "render_suite_html",
    "write_run_html",
    "write_suite_html",
]
