"""JUnit XML for CI UIs: one ``<testcase>`` per scenario × repeat.

A missed target is a ``<failure>`` (message: the first reason; text: every reason, one per
line); a run that reached no verdict (the tool failed, or the run was interrupted) is an
``<error>``, so that CI never shows it as a resilience regression nor as a pass.

A scenario that expects to fail (``expect``) follows pytest's junitxml: a run that missed its
targets as expected (XFAIL) is ``<skipped type="xfail">`` with the reason and the issue; one
that met them (XPASS) is a pass with the news in its output, or, with ``strict``, a
``<failure type="XPASS">``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from typing import Any

from chaos.metrics.catalogue import gated
from chaos.report._format import (
    atomic_write_text,
    attribution_text,
    expectation_text,
    fmt_metric,
    outcome,
    outcome_label,
    reasons,
    repeat_of,
    scenario_name,
    wall_s_of,
)

__all__ = ["render_junit", "write_junit"]

# XML 1.0 forbids most control characters; tracebacks and process output can contain them.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: Any) -> str:
    return _INVALID_XML.sub("\ufffd", str(text))


def _seconds(value: float | None) -> str:
    return f"{value or 0.0:.3f}"


def write_junit(path: str, journals: list[dict[str, Any]], suite_name: str, strict: bool = False) -> str:
    """Write the JUnit XML report to ``path``; returns the path."""
    return atomic_write_text(path, render_junit(journals, suite_name, strict))


def render_junit(journals: list[dict[str, Any]], suite_name: str, strict: bool = False) -> str:
    outcomes = [outcome(j) for j in journals]
    total_time = sum(wall_s_of(j) or 0.0 for j in journals)
    counts = {
        "tests": str(len(journals)),
        "failures": str(outcomes.count("fail") + (outcomes.count("xpass") if strict else 0)),
        "errors": str(outcomes.count("error")),
        "skipped": str(outcomes.count("xfail")),
        "time": _seconds(total_time),
    }
    root = ET.Element("testsuites", {"name": "trainchaos", **counts})
    suite = ET.SubElement(root, "testsuite", {
        "name": _clean(suite_name),
        **counts,
        "timestamp": _first_start(journals),
    })
    for journal in journals:
        _testcase(suite, journal, suite_name, strict)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _first_start(journals: list[dict[str, Any]]) -> str:
    starts = sorted(str(j["started_at"]) for j in journals if j.get("started_at"))
    return starts[0] if starts else datetime.now(UTC).isoformat(timespec="seconds")


def _testcase(suite: ET.Element, journal: dict[str, Any], suite_name: str, strict: bool) -> None:
    case = ET.SubElement(suite, "testcase", {
        "classname": _clean(f"trainchaos.{suite_name}"),
        "name": _clean(f"{scenario_name(journal)}[{repeat_of(journal)}]"),
        "time": _seconds(wall_s_of(journal)),
    })
    kind = outcome(journal)
    why = reasons(journal)
    if kind == "fail":
        failure = ET.SubElement(case, "failure", {"message": _clean(why[0]), "type": "TargetMissed"})
        failure.text = _clean("\n".join(why))
    elif kind == "xfail":
        skipped = ET.SubElement(case, "skipped", {"message": _clean(why[0]), "type": "xfail"})
        skipped.text = _clean("\n".join(why))
    elif kind == "xpass" and strict:
        failure = ET.SubElement(case, "failure", {"message": _clean(why[0]), "type": "XPASS"})
        failure.text = _clean(f"[XPASS(strict)] {expectation_text(journal)}")
    elif kind == "error":
        status = str(journal.get("status") or "unknown")
        error = ET.SubElement(case, "error", {
            "message": _clean(why[0].splitlines()[0] if why[0] else status),
            "type": status,
        })
        error.text = _clean("\n".join(why))
    out = ET.SubElement(case, "system-out")
    out.text = _clean("\n".join(_system_out(journal)))


def _system_out(journal: dict[str, Any]) -> list[str]:
    lines = [
        f"run_dir: {journal.get('run_dir') or '-'}",
        f"status: {journal.get('status') or 'unknown'}",
        f"seed: {journal.get('seed', '-')}",
    ]
    expected = expectation_text(journal)
    if expected:
        lines.append(f"{outcome_label(journal)}: expected to fail: {expected}")
    # The gated metrics of the catalogue: what `trainchaos compare` follows.
    lines += [f"{spec.label}: {fmt_metric(journal, spec.key)}" for spec in gated()]
    lines.append(f"attribution: {attribution_text(journal)}")
    return lines
