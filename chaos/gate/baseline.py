"""``trainchaos run --baseline-from DIR [--update-baseline]``: the regression gate around a
suite run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chaos.errors import EXIT_BAD_INPUT
from chaos.gate.errors import ComparisonInputError
from chaos.gate.output import render_markdown, update_baseline, write_comparison
from chaos.gate.suites import check_same_scenarios, compare_suites
from chaos.gate.tolerances import Tolerance, load_tolerances, tolerances_for
from chaos.runfiles.record import RunRecord
from chaos.runfiles.suite_record import load_suite_record

__all__ = ["BaselineGate"]


@dataclass
class BaselineGate:
    """``trainchaos run --baseline-from DIR [--update-baseline]``: checked before anything
    starts (a baseline that is missing or lists other scenarios is bad input), then applied
    to the suite's output once the runs are over."""

    baseline_dir: str
    update: bool = False
    tolerances_path: str | None = None
    tolerances: dict[str | None, dict[str, Tolerance]] = field(default_factory=dict)

    @classmethod
    def prepare(cls, baseline_dir: str, names: list[str], update: bool = False,
                tolerances_path: str | None = None) -> BaselineGate:
        path = tolerances_for(baseline_dir, tolerances_path)
        gate = cls(baseline_dir, update, path, load_tolerances(path))
        if not update:
            stored = load_suite_record(baseline_dir)
            check_same_scenarios(stored.scenario_names(), list(dict.fromkeys(names)),
                                 baseline_dir, "this run")
        return gate

    def finish(self, out_dir: str, records: list[RunRecord], suite_name: str,
               echo: Any = print) -> int:
        """Store or compare; returns the exit code the gate asks for (0, 1 or 2)."""
        if self.update:
            for path in update_baseline(out_dir, self.baseline_dir):
                echo(f"baseline updated: {path}")
            return 0
        try:
            comparison = compare_suites(load_suite_record(self.baseline_dir), load_suite_record(out_dir),
                                        self.tolerances, self.baseline_dir, out_dir)
        except ComparisonInputError as exc:
            echo(f"trainchaos: cannot compare with the baseline: {exc}")
            return EXIT_BAD_INPUT
        markdown = render_markdown(comparison)
        echo(markdown.rstrip())
        write_comparison(out_dir, comparison, markdown)
        try:
            from chaos.report.html import write_suite_html

            write_suite_html(out_dir, records, suite_name, comparison=comparison.to_dict())
        except Exception:  # noqa: BLE001 - the page is derived; the gate's verdict stands
            import logging

            logging.getLogger(__name__).exception("index.html not rewritten with the comparison")
        return 0 if comparison.passed else 1
