"""Shared helpers of the report writers: value formatting, and the short texts a run record
reads as in the tables (attribution, final state, a metric in its unit).

What a run's outcome is and why (pass, fail, xfail, xpass, error, and the reasons) is the
record's own (``RunRecord.outcome``, ``RunRecord.reasons()``), not a report's. Every function
here tolerates missing parts of a record: an interrupted run has no metrics and no verdict,
and its reports must still be written.
"""

from __future__ import annotations

import math
import re
from typing import Any

from chaos.metrics.catalogue import missing_label, spec
from chaos.runfiles.record import (
    FaultMetricsRecord,
    FaultOutcome,
    Outcome,
    PlannedFaultInfo,
    RunRecord,
)
from chaos.util.fileio import atomic_write_text  # noqa: F401  (re-exported for the report modules)
from chaos.util.jsonsafe import jsonable  # noqa: F401  (re-exported for the report modules)
from chaos.util.textfmt import DASH, fmt_value

__all__ = ["DASH", "as_number", "attribution_text", "blast_radius_text", "fidelity_of", "final_state_text",
           "finite_number", "fmt_fraction", "fmt_metric", "fmt_metric_value", "fmt_seconds", "fmt_steps",
           "fmt_value", "md_cell", "md_table", "outcome_counts", "planned_target_text", "target_text"]

# ----------------------------------------------------------------------------- record texts


def outcome_counts(kinds: list[Outcome], sep: str = "; ") -> str:
    """``; 1 missed a target; 2 expected failures (XFAIL)``: what is not a plain pass, for
    the one-line totals of the console and the suite pages."""
    words: dict[Outcome, tuple[str, str]] = {"fail": ("missed a target", "missed a target"),
             "error": ("ended without a verdict", "ended without a verdict"),
             "xfail": ("expected failure (XFAIL)", "expected failures (XFAIL)"),
             "xpass": ("unexpectedly passed (XPASS)", "unexpectedly passed (XPASS)")}
    parts = [f"{sep}{n} {one if n == 1 else many}" for kind, (one, many) in words.items()
             if (n := kinds.count(kind))]
    return "".join(parts)


def attribution_text(record: RunRecord) -> str:
    """One fault: its attribution; several: ``f0: correct, f1: wrong``."""
    per_fault = record.metrics.faults if record.metrics is not None else []
    values = [(str(f.fault_id), f.attribution) for f in per_fault if f.attribution is not None]
    if not values:
        return DASH
    if len(values) == 1:
        return str(values[0][1])
    return ", ".join(f"{fid}: {a}" for fid, a in values)


def target_text(target: Any) -> str:
    """``rank 3``, ``ranks 0,1 / node 1`` from a resolved target dict (``{"ranks": [3]}``), or
    the target as the scenario wrote it (``{"rank": 3}``, ``{"rack": "r1"}``)."""
    if not isinstance(target, dict):
        return DASH if target is None else str(target)
    parts = []
    for key, singular in (("ranks", "rank"), ("nodes", "node")):
        values = target.get(key) or []
        if values:
            word = singular if len(values) == 1 else key
            parts.append(f"{word} {','.join(map(str, values))}")
    if not parts:
        parts = [f"{key} {fmt_value(value)}" for key, value in target.items()
                 if key not in ("ranks", "nodes", "pids") and value not in (None, [], {})]
    return " / ".join(parts) if parts else DASH


def fidelity_of(fault: FaultOutcome | PlannedFaultInfo) -> str | None:
    """A fault's fidelity statement: from its outcome's record, else from its fault type (a
    plan entry, or a record that does not carry it); None when neither knows."""
    text = fault.fidelity if isinstance(fault, FaultOutcome) else (fault.model_extra or {}).get("fidelity")
    if isinstance(text, str) and text.strip():
        return text.strip()
    name = fault.type
    try:
        from chaos.faults.base import lookup

        return str(lookup(name).fidelity).strip() or None
    except Exception:  # noqa: BLE001 - an unknown or plugin type: the report goes on without it
        return None


def planned_target_text(planned: PlannedFaultInfo) -> str:
    """A plan entry's target: resolved from the topology when the plan has it, else as written."""
    for target in (planned.planned_target, planned.target):
        text = target_text(target)
        if text != DASH:
            return text
    return DASH


def blast_radius_text(fm: FaultMetricsRecord) -> str:
    """A power fault's reach and the way back, in one line; empty for other faults."""
    if fm.blast_nodes is None:
        return ""
    text = f"{fm.blast_nodes} node(s) and {fm.blast_ranks or 0} rank(s) lost"
    spread = as_number(fm.kill_spread_ms, finite=True)
    if spread is not None:
        text += f", all within {spread:.1f} ms"
    if fm.resumed_from is not None:
        where = ", ".join(f"{k} {v}" for k, v in (("tier", fm.resumed_tier), ("copy", fm.resumed_copy)) if v)
        text += (f"; resumed after {fmt_seconds(fm.recovery_s)} from step {fm.resumed_from}"
                 + (f" ({where})" if where else ""))
    full = fm.full_size_s
    text += f"; full size again after {fmt_seconds(full)}" if full is not None else "; never back to full size"
    return text


def final_state_text(record: RunRecord) -> str:
    """Correctness in a few words: ``bitwise match``, ``differs (loss dev 0.3%)``,
    ``loss dev 0.12%`` (world size changed: no bitwise comparison), ``not finite``; a dash
    without a baseline."""
    metrics = record.metrics
    if metrics is None:
        return DASH
    if metrics.healthy is False:
        return "not finite" if metrics.first_nonfinite_step is not None else "unhealthy"
    match, dev = metrics.digest_match, as_number(metrics.max_rel_loss_dev)
    dev_text = None if dev is None else f"loss dev {dev * 100:.2g}%"
    if match is True:
        return "bitwise match"
    if match is False:
        return "differs" + (f" ({dev_text})" if dev_text else "")
    if dev_text and metrics.has_baseline:
        return dev_text
    return DASH


# -------------------------------------------------------------------------------- formatting


def finite_number(value: Any) -> float | None:
    return as_number(value, finite=True)


def as_number(value: Any, *, finite: bool = False) -> float | None:
    """A journal value as a float: None for null, bools, text and NaN (and, with ``finite``,
    for infinities too)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if math.isnan(number) or (finite and math.isinf(number)):
        return None
    return number


def fmt_seconds(value: Any, missing: str = DASH) -> str:
    number = as_number(value)
    if number is None:
        return missing
    if abs(number) < 10:
        return f"{number:.2f} s"
    if abs(number) < 100:
        return f"{number:.1f} s"
    return f"{number:.0f} s"


def fmt_steps(value: Any, missing: str = DASH) -> str:
    number = as_number(value)
    if number is None:
        return missing
    return str(int(number)) if number == int(number) else f"{number:.1f}"


def fmt_fraction(value: Any, missing: str = DASH) -> str:
    """Goodput is a fraction of wall time; shown as a percentage."""
    number = as_number(value)
    return missing if number is None else f"{number * 100:.1f}%"


def fmt_metric(record: RunRecord, key: str) -> str:
    """A run-level metric for tables, formatted as its kind in the metric catalogue says:
    ``undetected`` where None means that (a run with faults), else a dash."""
    if key == "wall_s":
        return fmt_seconds(record.measured_wall_s)
    if record.metrics is None:
        return DASH
    return fmt_metric_value(key, record.metric(key), missing_label(key, DASH) if record.had_faults else DASH)


def fmt_metric_value(key: str, value: Any, missing: str = DASH) -> str:
    """A value of metric ``key`` in its kind: seconds, a count, a fraction in %, else as is."""
    found = spec(key)
    kind = found.kind if found is not None else ("seconds" if key.endswith("_s") else "value")
    if kind == "count":
        return fmt_steps(value, missing)
    if kind == "fraction":
        return fmt_fraction(value, missing)
    if kind == "seconds":
        return fmt_seconds(value, missing)
    if value is None:
        return missing
    if found is not None and found.unit and as_number(value) is not None:
        return f"{fmt_value(float(value))} {found.unit}"  # lost work: 12.5 rank·s
    return fmt_value(value)


# ------------------------------------------------------------------------------ JSON and files


_MD_SPECIAL = re.compile(r"([|])")


def md_cell(value: Any) -> str:
    """Text safe inside a Markdown table cell: pipes escaped, newlines as <br>."""
    text = value if isinstance(value, str) else fmt_value(value)
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return text.replace("\r\n", "\n").replace("\n", "<br>") or " "


def md_table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(md_cell(h) for h in headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    return lines
