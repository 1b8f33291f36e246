"""The side-by-side table of ``trainchaos run --compare KEY=V1,V2``: one row per scenario and
value, the metrics that tell policies apart (blast radius, time to resume and to full size,
lost steps, where the job resumed from), printed and written as ``policies.md``: its own
name, as the regression gate's table (``compare.md``) may sit in the same suite folder."""

from __future__ import annotations

import os
from collections.abc import Iterable

from rich.console import Console
from rich.table import Table

from chaos.metrics.catalogue import spec
from chaos.report._format import (
    DASH,
    atomic_write_text,
    fmt_metric,
    fmt_metric_value,
    fmt_seconds,
    fmt_steps,
    md_table,
)
from chaos.runfiles.record import RunRecord
from chaos.runfiles.record_metrics import FaultMetricsRecord
from chaos.scenario.variants import Variation

__all__ = ["POLICIES_MD", "comparison_rows", "print_comparison", "write_comparison"]

POLICIES_MD = "policies.md"

HEADERS = ["scenario", "value", "repeat", "status", "blast radius", "detection", "resume",
           "full size", "lost steps", "resumed from", "goodput", "verdict"]


def _power_fault(record: RunRecord) -> FaultMetricsRecord:
    """The first fault with a blast radius (a power fault), else the first fault (else none:
    every value unknown)."""
    faults = record.metrics.faults if record.metrics is not None else []
    found = next((f for f in faults if f.blast_nodes is not None), faults[0] if faults else None)
    return found or FaultMetricsRecord()


def _blast(fm: FaultMetricsRecord) -> str:
    if fm.blast_nodes is None:
        return DASH
    spread = fm.kill_spread_ms
    nodes, ranks = fm.blast_nodes, fm.blast_ranks or 0
    return (f"{nodes} node{'s' * (nodes != 1)}, {ranks} rank{'s' * (ranks != 1)}"
            + (f" in {spread:.1f} ms" if isinstance(spread, int | float) else ""))


def _resumed(fm: FaultMetricsRecord) -> str:
    step = fm.resumed_from
    if step is None:
        return DASH
    where = "/".join(str(p) for p in (fm.resumed_tier, fm.resumed_copy) if p)
    return f"step {step}" + (f" ({where})" if where else "")


_SHOWN = frozenset({"detection_s", "recovery_s", "lost_steps", "goodput"})


def targeted_keys(records: Iterable[RunRecord]) -> list[str]:
    """Metrics the scenarios set a bound on that the fixed columns do not show (a
    neighbour's ``victim_slowdown``, ``false_detections``): what the comparison is about."""
    keys: list[str] = []
    for record in records:
        targets = record.scenario.targets
        keys += [k for k, v in targets.items() if isinstance(v, dict) and k not in _SHOWN
                 and k not in keys and spec(k) is not None]
    return keys


def _targeted(record: RunRecord, fm: FaultMetricsRecord, key: str) -> str:
    found = spec(key)
    value = fm.value(key) if found is not None and found.scope == "fault" else record.metric(key)
    return fmt_metric_value(key, value)


def headers(records: Iterable[RunRecord]) -> list[str]:
    extra = [found.label for k in targeted_keys(records) if (found := spec(k)) is not None]
    return [*HEADERS[:-1], *extra, HEADERS[-1]]


def comparison_rows(records: Iterable[RunRecord], variation: Variation) -> list[list[str]]:
    """Rows grouped by scenario, values in the order they ran; before the verdict, a column
    per metric a scenario targets beyond the fixed ones (``targeted_keys``)."""
    runs = list(records)
    extra = targeted_keys(runs)
    rows = []
    for record in runs:
        base, value = variation.split(record.scenario.name)
        fm = _power_fault(record)
        rows.append([
            base, value, str(record.repeat_index), record.status, _blast(fm),
            fmt_seconds(fm.detection_s), fmt_seconds(fm.recovery_s),
            fmt_seconds(fm.full_size_s), fmt_steps(fm.lost_steps), _resumed(fm),
            fmt_metric(record, "goodput"), *(_targeted(record, fm, k) for k in extra),
            record.outcome_label,
        ])
    order: dict[str, int] = {}
    for row in rows:
        order.setdefault(row[0], len(order))
    return sorted(rows, key=lambda r: order[r[0]])


def print_comparison(records: list[RunRecord], variation: Variation,
                     console: Console | None = None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=180)
    table = Table(title=f"trainchaos comparison: {variation.key}", title_justify="left")
    for header in headers(records):
        table.add_column(header, justify="right" if header in ("repeat", "lost steps") else "left")
    previous = None
    for row in comparison_rows(records, variation):
        if previous is not None and row[0] != previous:
            table.add_section()
        previous = row[0]
        table.add_row(*row)
    console.print(table)


def write_comparison(out_dir: str, records: list[RunRecord], variation: Variation) -> str:
    lines = [f"# Comparison: {variation.key}", "",
             f"Each scenario ran once per value of `{variation.key}` "
             f"({', '.join(variation.label(v) for v in variation.values)}).", "",
             *md_table(headers(records), comparison_rows(records, variation)), ""]
    return atomic_write_text(os.path.join(out_dir, POLICIES_MD), "\n".join(lines))
