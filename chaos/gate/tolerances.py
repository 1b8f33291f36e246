"""The regression gate's tolerances: the defaults of the metric catalogue, overridden by a
YAML file for every scenario or for one (format: ``chaos.gate``'s docstring and
docs/ci/tolerances.yaml)."""

from __future__ import annotations

import math
import os
from dataclasses import replace
from typing import Any

import yaml

from chaos.errors import ScenarioError, ValidationIssue
from chaos.gate.errors import ComparisonInputError
from chaos.metrics.catalogue import gated
from chaos.metrics.spec import Tolerance

__all__ = ["DEFAULT_TOLERANCES", "TOLERANCES_FILE", "Tolerance", "default_tolerances", "load_tolerances",
           "tolerances_for"]

TOLERANCES_FILE = "tolerances.yaml"


def default_tolerances() -> dict[str, Tolerance]:
    """Metric -> its default tolerance, for every gated metric of the catalogue."""
    return {spec.key: spec.tolerance for spec in gated() if spec.tolerance is not None}


DEFAULT_TOLERANCES: dict[str, Tolerance] = default_tolerances()
"""The defaults of the metrics known when this module was imported (the built-in families and
those of installed plugins)."""

_TOLERANCE_KEYS = ("rel", "abs")


def load_tolerances(path: str | None) -> dict[str | None, dict[str, Tolerance]]:
    """``{None: per-metric defaults, "<scenario>": overrides}`` from the defaults and, when
    given, a YAML file (module docstring). Every problem is reported with its location."""
    table: dict[str | None, dict[str, Tolerance]] = {None: default_tolerances()}
    if path is None:
        return table
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise ComparisonInputError(f"{path}: cannot read tolerances: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError([ValidationIssue(path, "", f"not valid YAML: {exc}")]) from None
    data = data or {}
    issues: list[ValidationIssue] = []
    if not isinstance(data, dict):
        raise ScenarioError([ValidationIssue(path, "", "expected a mapping with 'metrics' and/or 'scenarios'")])
    for key in data:
        if key not in ("metrics", "scenarios"):
            issues.append(ValidationIssue(path, str(key), "unknown key; allowed: metrics, scenarios"))
    defaults = _parse_metrics(data.get("metrics"), "metrics", table[None], path, issues)
    table[None] = defaults
    scenarios = data.get("scenarios") or {}
    if not isinstance(scenarios, dict):
        issues.append(ValidationIssue(path, "scenarios", "expected a mapping of scenario name -> metrics"))
        scenarios = {}
    for name, metrics in scenarios.items():
        table[str(name)] = _parse_metrics(metrics, f"scenarios.{name}", defaults, path, issues)
    if issues:
        raise ScenarioError(issues)
    return table


def _parse_metrics(data: Any, where: str, base: dict[str, Tolerance], path: str,
                   issues: list[ValidationIssue]) -> dict[str, Tolerance]:
    out = dict(base)
    if data is None:
        return out
    if not isinstance(data, dict):
        issues.append(ValidationIssue(path, where, "expected a mapping of metric -> {rel, abs} or off"))
        return out
    for metric, spec in data.items():
        loc = f"{where}.{metric}"
        if metric not in base:
            issues.append(ValidationIssue(path, loc, f"unknown metric; allowed: {', '.join(base)}"))
            continue
        if spec is False or spec == "off":  # YAML 1.1 reads a bare off as False
            out[metric] = replace(out[metric], gate=False)
            continue
        if not isinstance(spec, dict):
            issues.append(ValidationIssue(path, loc, "expected {rel: FRACTION, abs: AMOUNT} or off"))
            continue
        values: dict[str, float] = {}
        for key, value in spec.items():
            if key not in _TOLERANCE_KEYS:
                issues.append(ValidationIssue(path, f"{loc}.{key}", "unknown key; allowed: rel, abs"))
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                issues.append(ValidationIssue(path, f"{loc}.{key}", f"must be a number >= 0, got {value!r}"))
            else:
                values[key] = float(value)
        out[metric] = Tolerance(rel=values.get("rel", out[metric].rel), abs=values.get("abs", out[metric].abs))
    return out


def tolerances_for(baseline_path: str, explicit: str | None) -> str | None:
    """The tolerance file to use: the one given, else ``tolerances.yaml`` stored with the baseline."""
    if explicit:
        return explicit
    stored = os.path.join(baseline_path, TOLERANCES_FILE) if os.path.isdir(baseline_path) else None
    return stored if stored and os.path.exists(stored) else None
