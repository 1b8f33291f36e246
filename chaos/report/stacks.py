"""The stacks side by side (``trainchaos bench-stacks``): one table per fault, one column per
stack, the reference (torchrun restart) first, each value the median over the scenario's
repeats; times also as a ratio to the reference measured in the same run. Printed, and
written as ``stacks.md`` and ``stacks.html`` beside the suite's reports.

A standard fault's rows: detection, the survivors' stall, recovery, lost steps, goodput,
the final-state check, the verdict. A sustained run's (many faults at a fixed mean
interval): the failures injected and recovered, the medians of detection, stall and
recovery over them, the steps lost in all, the restarts, the training efficiency (the
run's goodput: productive step time / wall time, ``chaos.metrics``) and the ETTR (the steps
kept against a fault-free twin's, whose step takes the run's mean step less the steps a
failure struck: it also charges a survivor's step that waits out a failure, which productive
step time counts as productive).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from html import escape
from typing import Any

from rich.console import Console
from rich.table import Table

from chaos.report._format import (
    DASH,
    as_number,
    atomic_write_text,
    final_state_text,
    fmt_fraction,
    fmt_seconds,
    fmt_steps,
    md_table,
)
from chaos.report._page import html_page, html_table
from chaos.runfiles.record import RunRecord
from chaos.runfiles.record_metrics import FaultMetricsRecord
from chaos.scenario.stacks import REFERENCE, StackMatrix

__all__ = ["STACKS_HTML", "STACKS_MD", "print_stacks", "stack_tables", "write_stacks"]

STACKS_MD = "stacks.md"
STACKS_HTML = "stacks.html"
NOT_APPLICABLE = "n/a"

Row = tuple[str, Callable[[list[RunRecord]], Any], Callable[[Any], str], bool]
"""(label, value of one stack's runs, how it is shown, whether a ratio to the reference is shown)."""


def _fired(record: RunRecord) -> list[FaultMetricsRecord]:
    faults = record.metrics.faults if record.metrics is not None else []
    # A record that does not say whether a fault fired counts it by its injection time alone.
    return [f for f in faults if (f.fired if "fired" in f.model_fields_set else True) and f.t_inject is not None]


def _median(values: list[Any]) -> float | None:
    numbers = [n for n in (as_number(v, finite=True) for v in values) if n is not None]
    return statistics.median(numbers) if numbers else None


def _first_fault(key: str) -> Callable[[list[RunRecord]], float | None]:
    """The median over repeats of ``key`` of each run's first fired fault."""
    return lambda runs: _median([(_fired(r) or [FaultMetricsRecord()])[0].value(key) for r in runs])


def _over_faults(key: str) -> Callable[[list[RunRecord]], float | None]:
    """The median over every fired fault of every repeat (a sustained run)."""
    return lambda runs: _median([f.value(key) for r in runs for f in _fired(r)])


def _run_metric(key: str) -> Callable[[list[RunRecord]], float | None]:
    return lambda runs: _median([r.metric(key) for r in runs])


def _lost_in_all(runs: list[RunRecord]) -> float | None:
    return _median([sum(int(f.lost_steps or 0) for f in _fired(r)) for r in runs])


def _injected(runs: list[RunRecord]) -> str:
    return ", ".join(f"{len(_fired(r))}/{len(r.plan)}" for r in runs)


def _recovered(runs: list[RunRecord]) -> str:
    return ", ".join(f"{sum(f.recovery_s is not None for f in _fired(r))}/{len(_fired(r))}" for r in runs)


def _final_state(runs: list[RunRecord]) -> str:
    return "; ".join(dict.fromkeys(final_state_text(r) for r in runs))


def _verdict(runs: list[RunRecord]) -> str:
    labels = [r.outcome_label for r in runs]
    counts = {label: labels.count(label) for label in dict.fromkeys(labels)}
    text = labels[0] if len(counts) == 1 else "; ".join(f"{n}/{len(labels)} {label}" for label, n in counts.items())
    expected = next((r.expectation_text for r in runs if r.outcome in ("xfail", "xpass")), "")
    return f"{text} ({expected})" if expected else text


def _launch(runs: list[RunRecord]) -> str:
    """How the ranks started: cold (their imports inside every launch and restart time, as a
    stack restarts) or warm (forked by a zygote that had imported them: times without)."""
    return ", ".join(dict.fromkeys(r.rank_launch for r in runs))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else DASH


STANDARD_ROWS: list[Row] = [
    ("detection", _first_fault("detection_s"), fmt_seconds, True),
    ("survivor stall", _first_fault("survivor_stall_s"), fmt_seconds, True),
    ("recovery", _first_fault("recovery_s"), fmt_seconds, True),
    ("lost steps", _first_fault("lost_steps"), fmt_steps, False),
    ("goodput", _run_metric("goodput"), fmt_fraction, False),
    ("final state", _final_state, _text, False),
    ("verdict", _verdict, _text, False),
    ("ranks started", _launch, _text, False),
]

SUSTAINED_ROWS: list[Row] = [
    ("failures injected", _injected, _text, False),
    ("recovered", _recovered, _text, False),
    ("detection (median)", _over_faults("detection_s"), fmt_seconds, True),
    ("survivor stall (median)", _over_faults("survivor_stall_s"), fmt_seconds, True),
    ("recovery (median)", _over_faults("recovery_s"), fmt_seconds, True),
    ("lost steps (all failures)", _lost_in_all, fmt_steps, False),
    ("restarts", _run_metric("restart_count"), fmt_steps, False),
    ("wall time", lambda runs: _median([r.measured_wall_s for r in runs]), fmt_seconds, False),
    ("training efficiency (goodput)", _run_metric("goodput"), fmt_fraction, False),
    ("ETTR (steps kept x twin's step / window)", _run_metric("ettr"), fmt_fraction, False),
    ("verdict", _verdict, _text, False),
    ("ranks started", _launch, _text, False),
]


def _ratio(value: Any, reference: Any) -> str:
    if not isinstance(value, float | int) or not isinstance(reference, float | int) or reference <= 0:
        return ""
    return f" ({value / reference:.2g}×)"


def stack_tables(matrix: StackMatrix, records: list[RunRecord],
                 sustained: bool = False) -> list[tuple[str, list[str], list[list[str]]]]:
    """(fault, headers, rows) per fault: headers ``metric`` then the stacks; a stack without
    the fault's scenario reads n/a."""
    by_name: dict[str, list[RunRecord]] = {}
    for record in records:
        by_name.setdefault(record.scenario.name, []).append(record)
    rows_spec = SUSTAINED_ROWS if sustained else STANDARD_ROWS
    tables = []
    for fault in matrix.faults:
        headers = ["metric"] + [f"{s} (reference)" if s == REFERENCE else s for s in matrix.stacks]
        runs = {s: by_name.get(matrix.cells.get((fault, s), ""), []) for s in matrix.stacks}
        rows = []
        for label, value_of, show, ratio in rows_spec:
            values = {s: value_of(r) if r else None for s, r in runs.items()}
            reference = values.get(REFERENCE)
            row = [label]
            for stack in matrix.stacks:
                if (fault, stack) not in matrix.cells:
                    row.append(NOT_APPLICABLE)
                elif not runs[stack]:
                    row.append("not run")
                else:
                    extra = _ratio(values[stack], reference) if ratio and stack != REFERENCE else ""
                    row.append(show(values[stack]) + extra)
            rows.append(row)
        tables.append((fault, headers, rows))
    return tables


def _intro(matrix: StackMatrix, sustained: bool) -> str:
    what = ("Each stack's sustained-failure scenario: many failures at a fixed mean interval "
            "over one long run." if sustained else "Each fault on each stack, from the same-named "
            "scenario in each stack's folder.")
    return (f"{what} Medians over repeats; times also as a ratio to the reference "
            f"({REFERENCE}: the bundled harness restarted by torchrun from its checkpoint), measured "
            f"in the same run. {NOT_APPLICABLE}: the stack has no scenario for that fault "
            "(docs/stacks.md says why).")


def write_stacks(out_dir: str, matrix: StackMatrix, records: list[RunRecord],
                 sustained: bool = False) -> list[str]:
    """``stacks.md`` and ``stacks.html`` in ``out_dir``; returns both paths."""
    tables = stack_tables(matrix, records, sustained)
    title = "Stacks side by side" + (": sustained failures" if sustained else "")
    lines = [f"# {title}", "", _intro(matrix, sustained), ""]
    for fault, headers, rows in tables:
        lines += [f"## {fault}", "", *md_table(headers, rows), ""]
    md = atomic_write_text(os.path.join(out_dir, STACKS_MD), "\n".join(lines))
    body = [f"<h1>{escape(title)}</h1>", f"<p>{escape(_intro(matrix, sustained))}</p>"]
    for fault, headers, rows in tables:
        body += [f'<h2 id="{escape(fault)}">{escape(fault)}</h2>',
                 html_table(headers, [[escape(c) for c in row] for row in rows],
                            attrs=f' id="stacks-{escape(fault)}"')]
    page = atomic_write_text(os.path.join(out_dir, STACKS_HTML), html_page(f"trainchaos {title}", body))
    return [md, page]


def print_stacks(matrix: StackMatrix, records: list[RunRecord], sustained: bool = False,
                 console: Console | None = None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=180)
    for fault, headers, rows in stack_tables(matrix, records, sustained):
        table = Table(title=f"{fault}: stacks side by side", title_justify="left")
        for header in headers:
            table.add_column(header, overflow="fold")
        for row in rows:
            table.add_row(*row)
        console.print(table)
