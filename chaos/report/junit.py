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
from chaos.report._format import atomic_write_text, attribution_text, fmt_metric
from chaos.runfiles.record import RunRecord

__all__ = ["render_junit", "write_junit"]

# XML 1.0 forbids most control characters; tracebacks and process output can contain them.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: Any) -> str:
    return _INVALID_XML.sub("\ufffd", str(text))


def _seconds(value: float | None) -> str:
    return f"{value or 0.0:.3f}"


def write_junit(path: str, records: list[RunRecord], suite_name: str, strict: bool = False) -> str:
    """Write the JUnit XML report to ``path``; returns the path."""
    return atomic_write_text(path, render_junit(records, suite_name, strict))


def render_junit(records: list[RunRecord], suite_name: str, strict: bool = False) -> str:
    outcomes = [r.outcome for r in records]
    total_time = sum(r.measured_wall_s or 0.0 for r in records)
    counts = {
        "tests": str(len(records)),
        "failures": str(outcomes.count("fail") + (outcomes.count("xpass") if strict else 0)),
        "errors": str(outcomes.count("error")),
        "skipped": str(outcomes.count("xfail")),
        "time": _seconds(total_time),
    }
    root = ET.Element("testsuites", {"name": "trainchaos", **counts})
    suite = ET.SubElement(root, "testsuite", {
        "name": _clean(suite_name),
        **counts,
        "timestamp": _first_start(records),
    })
    for record in records:
        _testcase(suite, record, suite_name, strict)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _first_start(records: list[RunRecord]) -> str:
    starts = sorted(str(r.started_at) for r in records if r.started_at)
    return starts[0] if starts else datetime.now(UTC).isoformat(timespec="seconds")


def _testcase(suite: ET.Element, record: RunRecord, suite_name: str, strict: bool) -> None:
    case = ET.SubElement(suite, "testcase", {
        "classname": _clean(f"trainchaos.{suite_name}"),
        "name": _clean(record.label),
        "time": _seconds(record.measured_wall_s),
    })
    kind = record.outcome
    why = record.reasons()
    if kind == "fail":
        failure = ET.SubElement(case, "failure", {"message": _clean(why[0]), "type": "TargetMissed"})
        failure.text = _clean("\n".join(why))
    elif kind == "xfail":
        skipped = ET.SubElement(case, "skipped", {"message": _clean(why[0]), "type": "xfail"})
        skipped.text = _clean("\n".join(why))
    elif kind == "xpass" and strict:
        failure = ET.SubElement(case, "failure", {"message": _clean(why[0]), "type": "XPASS"})
        failure.text = _clean(f"[XPASS(strict)] {record.expectation_text}")
    elif kind == "error":
        status = record.status
        error = ET.SubElement(case, "error", {
            "message": _clean(why[0].splitlines()[0] if why[0] else status),
            "type": status,
        })
        error.text = _clean("\n".join(why))
    out = ET.SubElement(case, "system-out")
    out.text = _clean("\n".join(_system_out(record)))


def _system_out(record: RunRecord) -> list[str]:
    lines = [
        f"run_dir: {record.run_dir or '-'}",
        f"status: {record.status}",
        f"seed: {record.seed if 'seed' in record.model_fields_set else '-'}",
    ]
    expected = record.expectation_text
    if expected:
        lines.append(f"{record.outcome_label}: expected to fail: {expected}")
    # The gated metrics of the catalogue: what `trainchaos compare` follows.
    lines += [f"{spec.label}: {fmt_metric(record, spec.key)}" for spec in gated()]
    lines.append(f"attribution: {attribution_text(record)}")
    return lines
