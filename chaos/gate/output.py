"""The regression gate's report (``compare.md``, ``compare.json``) and the stored baseline
(``--update-baseline``)."""

from __future__ import annotations

import json
import os
import shutil

from chaos.gate.suites import (
    Comparison,
    MetricComparison,
    fmt_change,
    format_value,
    higher_is_better,
)
from chaos.report._format import atomic_write_text, md_table
from chaos.runfiles.suite_record import SUITE_JSON, load_suite_record

__all__ = ["BASELINE_FILES", "render_markdown", "update_baseline", "write_comparison"]

BASELINE_FILES = (SUITE_JSON, "suite.md")
"""What ``--update-baseline`` stores: the numbers, and the same as a table for reviewers."""


def render_markdown(comparison: Comparison) -> str:
    """A Markdown report fit for a pull-request comment or ``$GITHUB_STEP_SUMMARY``: the
    verdict, the regressions, then every comparison in a collapsed table."""
    regressions = comparison.regressions
    scenarios = list(dict.fromkeys(r.scenario for r in comparison.rows))
    if regressions:
        names = ", ".join(f"{r.scenario} {r.metric}" for r in regressions)
        head = f"### trainchaos resilience gate: FAIL, {len(regressions)} regression(s): {names}"
    else:
        head = "### trainchaos resilience gate: PASS, no regression"
    lines = [head, "",
             f"`{comparison.current_label}` against the baseline `{comparison.baseline_label}`: "
             f"{len(scenarios)} scenario(s), medians across repeats; allowed worsening = "
             "max(abs, rel × baseline).", ""]
    headers = ["scenario", "metric", "baseline", "current", "change", "allowed", "result"]

    def row(r: MetricComparison) -> list[str]:
        result = {"regression": "**REGRESSION**", "improved": "improved", "ok": "ok", "n/a": "—"}[r.result]
        allowed = "—" if r.allowance is None else "+" + fmt_change(r.metric, r.allowance, signed=False)
        if higher_is_better(r.metric) and r.allowance is not None:
            allowed = "−" + allowed[1:]  # for these, lower is worse
        return [r.scenario, f"`{r.metric}`", format_value(r.metric, r.baseline), format_value(r.metric, r.current), r.note,
                allowed, result]

    if regressions:
        lines += md_table(headers, [row(r) for r in regressions]) + [""]
    lines += [f"<details><summary>All {len(comparison.rows)} comparisons</summary>", ""]
    lines += md_table(headers, [row(r) for r in comparison.rows if r.result != "n/a" or r.note])
    lines += ["", "</details>", ""]
    if comparison.notes:
        lines += [f"- {note}" for note in comparison.notes] + [""]
    return "\n".join(lines)


def update_baseline(suite_dir: str, baseline_dir: str) -> list[str]:
    """Store a suite output as the baseline (``suite.json`` and ``suite.md``); a
    ``tolerances.yaml`` already there is kept. Returns the paths written."""
    load_suite_record(suite_dir)  # refuse to store something that is not a suite output
    os.makedirs(baseline_dir, exist_ok=True)
    written = []
    for name in BASELINE_FILES:
        source = os.path.join(suite_dir, name)
        if os.path.exists(source):
            target = os.path.join(baseline_dir, name)
            if os.path.abspath(source) != os.path.abspath(target):
                tmp = f"{target}.tmp-{os.getpid()}"
                shutil.copyfile(source, tmp)
                os.replace(tmp, target)
            written.append(target)
    return written


def write_comparison(out_dir: str, comparison: Comparison, markdown: str) -> list[str]:
    """``compare.md`` and ``compare.json`` next to the suite's other reports."""
    return [atomic_write_text(os.path.join(out_dir, "compare.md"), markdown),
            atomic_write_text(os.path.join(out_dir, "compare.json"),
                              json.dumps(comparison.to_dict(), indent=2, allow_nan=False, default=str) + "\n")]
