"""A suite: every scenario x repeat (baseline first where asked), then the suite's reports."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from chaos.ckptformat import check_format_env
from chaos.cluster import lookup_backend
from chaos.errors import ScenarioError, ValidationIssue
from chaos.faults.base import lookup
from chaos.metrics import BaselineInfo
from chaos.model.scenario import Scenario
from chaos.report import (
    SUITE_HTML,
    ProgressDisplay,
    print_verdict_table,
    write_junit,
    write_suite_reports,
)
from chaos.runfiles.record import RunRecord
from chaos.runner.run import run_baseline, run_scenario_once
from chaos.runner.state import RunProgress
from chaos.util.interrupts import Interrupted

__all__ = ["SuiteOutcome", "preflight", "run_suite"]


@dataclass
class SuiteOutcome:
    records: list[RunRecord] = field(default_factory=list)
    interrupted: bool = False
    out_dir: str = ""
    strict: bool = False
    """An unexpected pass (XPASS) of a scenario that expects to fail fails the suite too."""

    @property
    def report_path(self) -> str | None:
        """The suite's HTML page, once written."""
        path = os.path.join(self.out_dir, SUITE_HTML)
        return path if self.out_dir and os.path.exists(path) else None

    @property
    def passed(self) -> bool:
        """Every run met its targets or missed them as its scenario expects (XFAIL); an
        unexpected pass (XPASS) counts against it only when ``strict``."""
        return bool(self.records) and not any(r.blocks(self.strict) for r in self.records)

    @property
    def tool_failed(self) -> bool:
        """trainchaos itself failed in some run (its verdict would say nothing)."""
        return any(r.status == "tool_error" for r in self.records)


def preflight(scenarios: list[Scenario]) -> None:
    """What this machine lacks for each scenario's backend, and what a fault needs of the
    backend's options (``FaultType.preflight``), as located input errors (exit 2), before
    anything starts; and a bad ``TRAINCHAOS_CHECKPOINT_FORMAT`` (the checkpoint checkers')."""
    check_format_env()
    issues = [ValidationIssue(sc.path, "backend", problem)
              for sc in scenarios for problem in lookup_backend(sc.backend.name).preflight(sc)
              + [p for fault in sc.faults for p in lookup(fault.type).preflight(fault, sc)]]
    if issues:
        raise ScenarioError(issues)


def run_suite(scenarios: list[Scenario], out_dir: str, suite_name: str, *, repeat: int | None = None,
              seed: int | None = None, junit_path: str | None = None, fail_fast: bool = False,
              display: ProgressDisplay | None = None, suite_reports: bool = True,
              strict: bool = False) -> SuiteOutcome:
    """Every scenario x repeat; then, unless ``suite_reports`` is False (a caller that gathers
    runs from several calls, such as the pytest plugin, writes them itself), the suite's
    reports and the verdict table. ``strict``: an unexpected pass (XPASS) fails the suite."""
    display = display or ProgressDisplay()
    result = SuiteOutcome(out_dir=out_dir, strict=strict)
    try:
        for scenario in scenarios:
            if seed is not None:
                scenario = replace(scenario, seed=seed)
            repeats = repeat or scenario.repeat
            base_dir = os.path.join(out_dir, scenario.name)
            progress = RunProgress(on_step=lambda s, n: display.update(s, n), on_note=display.event)
            baseline: BaselineInfo | None = None
            baseline_record: RunRecord | None = None
            if scenario.baseline:
                display.start_scenario(f"{scenario.name} (baseline, fault-free)", 0, 1)
                baseline, baseline_record = run_baseline(scenario, os.path.join(base_dir, "baseline"),
                                                         scenario.seed, progress)
                misses = [c.text for c in baseline_record.twin_checks if not c.ok]
                display.end_scenario(None if baseline_record.status != "completed" else not misses,
                                     "; ".join([f"baseline {baseline_record.status}", *misses]))
                if baseline_record.status == "interrupted" or baseline_record.interrupted_after:
                    raise Interrupted("baseline interrupted")
            baseline_run = None
            if baseline_record is not None:
                baseline_run = {"digest": baseline.digest if baseline else None,
                                "wall_s": baseline_record.wall_s,
                                "run_dir": baseline_record.run_dir,
                                "status": baseline_record.status,
                                "checks": [c.model_dump() for c in baseline_record.twin_checks]}
            for index in range(repeats):
                display.start_scenario(scenario.name, index, repeats)
                record = run_scenario_once(scenario, os.path.join(base_dir, str(index)), scenario.seed,
                                           baseline, progress, repeat_index=index, baseline_run=baseline_run)
                result.records.append(record)
                verdict = record.verdict
                passed = verdict.passed if verdict is not None else None
                reasons = verdict.reasons() if verdict is not None else []
                display.end_scenario(passed if record.status != "interrupted" else None,
                                     "; ".join(reasons[:3]), word=record.outcome_label)
                if record.status == "interrupted" or record.interrupted_after:
                    raise Interrupted("run interrupted")
                if record.status == "tool_error":
                    display.event(f"trainchaos failed in {scenario.name}: {record.error}")
                if fail_fast and record.blocks(strict):
                    break
            if fail_fast and result.records and result.records[-1].blocks(strict):
                break
    except Interrupted:
        result.interrupted = True
    finally:
        display.close()
        if result.records and suite_reports:
            os.makedirs(out_dir, exist_ok=True)
            write_suite_reports(out_dir, result.records, suite_name)
            if junit_path:
                write_junit(junit_path, result.records, suite_name, strict=strict)
            print_verdict_table(result.records, strict=strict)
    return result
