"""The regression gate (``trainchaos compare``, ``run --baseline-from``): one suite's metrics
against a stored baseline's, with tolerances.

A run that meets a loose target can still be a regression (recovery went from 6 s to 15 s
under a 20 s target). ``compare_suites`` takes two suite records (``suite.json`` as
``trainchaos run`` writes it, read by ``chaos.runfiles.suite_record.load_suite_record``) and compares, per scenario, each metric's **median across
repeats**, how often it was missing (undetected in 1/3 where it never was), and the pass rate.

A metric regresses when it got worse by more than its allowance,
``max(abs, rel × |baseline median|)`` (``abs`` in the metric's unit, ``rel`` a fraction).
Both parts matter: ``rel`` alone would flag 0.05 s → 0.12 s of detection, noise on a loaded
machine; ``abs`` alone would miss 60 s → 90 s of recovery. Defaults (``DEFAULT_TOLERANCES``)
are sized for the noise measured on a 2-core machine and written in the metric catalogue
(``chaos.metrics.catalogue``: a gated metric's ``MetricSpec.tolerance``, so a metric family's
gated metric is compared too); a YAML file overrides them, for every scenario or for one::

    metrics:                    # every scenario
      recovery_s: {rel: 0.3, abs: 2}
      wall_s: {rel: 0.5, abs: 20}   # wall time is shown but not gated unless given here
    scenarios:
      kill-rank:
        lost_steps: {abs: 0}    # rel keeps the metric's default
        goodput: off            # shown, never gates

Baselines are stored and refreshed the way snapshot-testing tools (jest, syrupy) do it: the
baseline is a small file in the repository (``reports/baselines/<suite>/suite.json``, with its
``suite.md`` for reviewers and optionally ``tolerances.yaml``), ``--update-baseline`` rewrites
it from a run, and a gate against a baseline that does not list exactly the suite's scenarios
is an input error (exit 2), never a silent pass.

Parts: ``tolerances`` (the defaults and the YAML file), ``suites`` (reading two suite
outputs and comparing them), ``output`` (the Markdown report, the stored baseline) and
``baseline`` (the gate of ``run --baseline-from``).
"""

from __future__ import annotations

from chaos.gate.baseline import BaselineGate
from chaos.gate.errors import ComparisonInputError
from chaos.gate.output import BASELINE_FILES, render_markdown, update_baseline, write_comparison
from chaos.gate.suites import (
    Comparison,
    MetricComparison,
    check_same_scenarios,
    compare_suites,
    format_value,
)
from chaos.gate.tolerances import DEFAULT_TOLERANCES, Tolerance, load_tolerances, tolerances_for
from chaos.runfiles.suite_record import SuiteRecord, load_suite_record

__all__ = [
    "BASELINE_FILES",
    "DEFAULT_TOLERANCES",
    "BaselineGate",
    "Comparison",
    "ComparisonInputError",
    "MetricComparison",
    "SuiteRecord",
    "Tolerance",
    "check_same_scenarios",
    "compare_suites",
    "format_value",
    "load_suite_record",
    "load_tolerances",
    "render_markdown",
    "tolerances_for",
    "update_baseline",
    "write_comparison",
]
