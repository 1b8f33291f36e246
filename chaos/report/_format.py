"""Shared helpers of the report writers: safe access to a journal dict, value formatting,
the pass/fail/error outcome of a run.

Every function here tolerates missing or None parts of a journal: an interrupted run has no
metrics and no verdict, and its reports must still be written.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from chaos.fileio import atomic_write_text  # noqa: F401  (re-exported for the report modules)
from chaos.jsonsafe import jsonable  # noqa: F401  (re-exported for the report modules)
from chaos.metrics.catalogue import missing_label, spec

Outcome = Literal["pass", "fail", "error", "xfail", "xpass"]
"""xfail: a scenario that expects to fail (``expect``) missed its targets; xpass: it met them."""

DASH = "—"

# ---------------------------------------------------------------------------- journal access


def metrics_of(journal: dict[str, Any]) -> dict[str, Any] | None:
    metrics = journal.get("metrics")
    return metrics if isinstance(metrics, dict) else None


def metric(journal: dict[str, Any], key: str) -> Any:
    metrics = metrics_of(journal)
    return None if metrics is None else metrics.get(key)


def scenario_name(journal: dict[str, Any]) -> str:
    scenario = journal.get("scenario") or {}
    return str(scenario.get("name") or "unnamed")


def repeat_of(journal: dict[str, Any]) -> int:
    try:
        return int(journal.get("repeat_index") or 0)
    except (TypeError, ValueError):
        return 0


def run_label(journal: dict[str, Any]) -> str:
    """``rank-kill-mid-step[0]``: the scenario and repeat, as tests and tables name a run."""
    return f"{scenario_name(journal)}[{repeat_of(journal)}]"


def wall_s_of(journal: dict[str, Any]) -> float | None:
    """The run's wall time: the metric when there is one, else the journal's own clock."""
    value = metric(journal, "wall_s")
    if value is None:
        value = journal.get("wall_s")
    return as_number(value)


def had_faults(journal: dict[str, Any]) -> bool:
    """True when a fault was injected, so a missing detection means *undetected*."""
    return bool(journal.get("faults"))


def outcome(journal: dict[str, Any]) -> Outcome:
    """``pass``/``fail`` from the verdict, ``xfail``/``xpass`` for a scenario that expects to
    fail (``expect``); ``error`` when the tool failed or no verdict exists (an interrupted run
    is not a pass, and calling it a missed target would be a lie; nor is it an expected
    failure: the finding was not reproduced)."""
    if journal.get("status") in ("error", "tool_error"):
        return "error"
    verdict = journal.get("verdict")
    if not isinstance(verdict, dict) or verdict.get("passed") is None:
        return "error"
    if expectation(journal) is not None:
        return "xpass" if verdict.get("passed") else "xfail"
    return "pass" if verdict.get("passed") else "fail"


def expectation(journal: dict[str, Any]) -> dict[str, Any] | None:
    """The scenario's ``expect`` (``{"fail": reason, "issue": url}``), None when it has none."""
    expect = (journal.get("scenario") or {}).get("expect")
    return expect if isinstance(expect, dict) and expect.get("fail") else None


def expectation_text(journal: dict[str, Any]) -> str:
    """``REASON (URL)``: the expected failure as the reports quote it; empty without one."""
    expect = expectation(journal)
    if expect is None:
        return ""
    return str(expect["fail"]).strip() + (f" ({expect['issue']})" if expect.get("issue") else "")


def blocks(kind: Outcome, strict: bool = False) -> bool:
    """Whether an outcome fails the suite (exit code, suite badge, JUnit failure): a missed
    target or no verdict always; an unexpected pass only with ``strict``."""
    return kind in ("fail", "error") or (strict and kind == "xpass")


def met_targets(kind: Outcome) -> bool:
    """Every target was met (a pass, or an unexpected one)."""
    return kind in ("pass", "xpass")


def outcome_label(journal: dict[str, Any]) -> str:
    if journal.get("status") == "tool_error":
        return "TOOL ERROR"
    return {"pass": "PASS", "fail": "FAIL", "error": "ERROR", "xfail": "XFAIL",
            "xpass": "XPASS"}[outcome(journal)]


def outcome_counts(kinds: list[Outcome], sep: str = "; ") -> str:
    """``; 1 missed a target; 2 expected failures (XFAIL)``: what is not a plain pass, for
    the one-line totals of the console and the suite pages."""
    words = {"fail": ("missed a target", "missed a target"),
             "error": ("ended without a verdict", "ended without a verdict"),
             "xfail": ("expected failure (XFAIL)", "expected failures (XFAIL)"),
             "xpass": ("unexpectedly passed (XPASS)", "unexpectedly passed (XPASS)")}
    parts = [f"{sep}{n} {one if n == 1 else many}" for kind, (one, many) in words.items()
             if (n := kinds.count(kind))]
    return "".join(parts)


def failed_checks(journal: dict[str, Any]) -> list[dict[str, Any]]:
    verdict = journal.get("verdict")
    if not isinstance(verdict, dict):
        return []
    return [c for c in verdict.get("checks") or [] if isinstance(c, dict) and not c.get("ok")]


def check_reason(check: dict[str, Any]) -> str:
    reason = check.get("reason")
    if reason:
        return str(reason)
    name = check.get("name", "check")
    return f"{name}: {fmt_value(check.get('value'))} (bound {fmt_value(check.get('bound'))})"


def reasons(journal: dict[str, Any]) -> list[str]:
    """Why the run is not a pass, one line each; empty for a pass. An expected failure says
    so first (with its reason and issue), then the targets it missed."""
    kind = outcome(journal)
    if kind == "pass":
        return []
    if kind == "xpass":
        return [f"unexpectedly met every target; expected to fail: {expectation_text(journal)}"]
    if kind == "error":
        status = journal.get("status") or "unknown"
        message = journal.get("error")
        if message:
            return [str(message)]
        return [f"run {status}: no verdict"]
    found = [check_reason(c) for c in failed_checks(journal)]
    found = found or ["verdict failed (no failing check recorded)"]
    if kind == "xfail":
        found.insert(0, f"expected failure: {expectation_text(journal)}")
    return found


def fault_metrics(journal: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per-fault metrics keyed by fault_id."""
    metrics = metrics_of(journal) or {}
    return {
        str(f.get("fault_id")): f for f in metrics.get("faults") or [] if isinstance(f, dict)
    }


def attribution_text(journal: dict[str, Any]) -> str:
    """One fault: its attribution; several: ``f0: correct, f1: wrong``."""
    per_fault = [f for f in (metrics_of(journal) or {}).get("faults") or [] if isinstance(f, dict)]
    values = [(str(f.get("fault_id")), f.get("attribution")) for f in per_fault]
    values = [(fid, a) for fid, a in values if a is not None]
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


def fidelity_of(fault: dict[str, Any]) -> str | None:
    """A fault's fidelity statement: from its journal record, else from its fault type (a
    journal written before records carried it); None when neither knows."""
    text = fault.get("fidelity")
    if isinstance(text, str) and text.strip():
        return text.strip()
    name = fault.get("type")
    if not isinstance(name, str):
        return None
    try:
        from chaos.faults.base import lookup

        return str(lookup(name).fidelity).strip() or None
    except Exception:  # noqa: BLE001 - an unknown or plugin type: the report goes on without it
        return None


def planned_target_text(planned: dict[str, Any]) -> str:
    """A plan entry's target: resolved from the topology when the plan has it, else as written."""
    for key in ("planned_target", "target"):
        text = target_text(planned.get(key))
        if text != DASH:
            return text
    return DASH


def blast_radius_text(fm: dict[str, Any]) -> str:
    """A power fault's reach and the way back, in one line; empty for other faults."""
    if fm.get("blast_nodes") is None:
        return ""
    text = f"{fm['blast_nodes']} node(s) and {fm.get('blast_ranks') or 0} rank(s) lost"
    spread = as_number(fm.get("kill_spread_ms"), finite=True)
    if spread is not None:
        text += f", all within {spread:.1f} ms"
    if fm.get("resumed_from") is not None:
        where = ", ".join(f"{k} {fm[k2]}" for k, k2 in (("tier", "resumed_tier"), ("copy", "resumed_copy"))
                          if fm.get(k2))
        text += (f"; resumed after {fmt_seconds(fm.get('recovery_s'))} from step {fm['resumed_from']}"
                 + (f" ({where})" if where else ""))
    full = fm.get("full_size_s")
    text += f"; full size again after {fmt_seconds(full)}" if full is not None else "; never back to full size"
    return text


def final_state_text(journal: dict[str, Any]) -> str:
    """Correctness in a few words: ``bitwise match``, ``differs (loss dev 0.3%)``,
    ``loss dev 0.12%`` (world size changed: no bitwise comparison), ``not finite``; a dash
    without a baseline."""
    metrics = metrics_of(journal)
    if metrics is None:
        return DASH
    if metrics.get("healthy") is False:
        return "not finite" if metrics.get("first_nonfinite_step") is not None else "unhealthy"
    match, dev = metrics.get("digest_match"), as_number(metrics.get("max_rel_loss_dev"))
    dev_text = None if dev is None else f"loss dev {dev * 100:.2g}%"
    if match is True:
        return "bitwise match"
    if match is False:
        return "differs" + (f" ({dev_text})" if dev_text else "")
    if dev_text and metrics.get("has_baseline"):
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


def fmt_value(value: Any) -> str:
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={fmt_value(v)}" for k, v in value.items()) or DASH
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt_value(v) for v in value) or DASH
    return str(value)


def fmt_metric(journal: dict[str, Any], key: str) -> str:
    """A run-level metric for tables, formatted as its kind in the metric catalogue says:
    ``undetected`` where None means that (a run with faults), else a dash."""
    if key == "wall_s":
        return fmt_seconds(wall_s_of(journal))
    if metrics_of(journal) is None:
        return DASH
    return fmt_metric_value(key, metric(journal, key), missing_label(key, DASH) if had_faults(journal) else DASH)


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
