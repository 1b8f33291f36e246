"""The suite record (``suite.json``): one typed model, one writer, one loader.

A suite's runs summed up: each run's outcome and gated metrics, and per scenario the
medians across repeats and the pass counts (``chaos.report.aggregate`` builds it). Users
commit it as the stored baseline of the regression gate (``reports/baselines/<suite>/``),
so the gate and ``trainchaos compare`` read it only through :func:`load_suite_record`, which
upgrades a file of an older version and refuses a newer or malformed one with the file and
the key (exit 2), as ``chaos.runfiles.record`` does for a run's journal.

Versions:

1. ``"format": 1`` and no ``schema_version``: every suite.json written before this module,
   among them the baselines users committed. Upgraded on load (version 2 only adds the key).
2. ``schema_version: 2``; ``format: 1`` still written, so that the keys stay those of
   version 1 plus one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from pydantic import Field, ValidationError

from chaos.errors import EXIT_BAD_INPUT, ChaosError
from chaos.runfiles.record_metrics import Number, OpenPart, validation_problems
from chaos.util.fileio import atomic_write_text
from chaos.util.jsonsafe import jsonable

__all__ = ["SUITE_JSON", "SUITE_SCHEMA_VERSION", "MetricStats", "ScenarioSummary", "SuiteCounts", "SuiteRecord",
           "SuiteRecordError", "SuiteRun", "load_suite_record", "write_suite_record"]

SUITE_JSON = "suite.json"
SUITE_SCHEMA_VERSION = 2
"""Bumped when a key changes meaning or a required key is added, with an upgrade step in
``_UPGRADES``: a stored baseline of every released version must still load."""


class SuiteRecordError(ChaosError):
    """A suite record that is missing, unreadable, malformed, or from a newer trainchaos; the
    message names the file and the key."""

    exit_code = EXIT_BAD_INPUT


class SuiteCounts(OpenPart):
    """The suite's runs by outcome (``RunRecord.outcome``)."""

    runs: int = 0
    passed: int = 0
    failed: int = 0
    errors: int = 0
    xfailed: int = 0
    xpassed: int = 0


class SuiteRun(OpenPart):
    """One run of the suite, as its record concludes (``RunRecord.outcome``, ``reasons()``)."""

    scenario: str
    repeat: int = 0
    status: str | None = None
    outcome: str | None = None
    passed: bool | None = None
    """Every target met (a pass, or an unexpected one)."""
    reasons: list[str] = Field(default_factory=list)
    run_dir: str | None = None
    wall_s: Number | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    """The gated metrics of the catalogue (wall time apart), None where not measured."""


class MetricStats(OpenPart):
    """One metric across a scenario's repeats: a None value is left out of the median, min
    and max but counted in ``missing``, with ``note`` saying why in words."""

    median: Number | None = None
    min: Number | None = None
    max: Number | None = None
    n: int = 0
    """The values used."""
    missing: int = 0
    """The repeats without a value."""
    unknown: int = 0
    """Of ``missing``, those trainchaos could not observe (detection ``unknown``: no source
    reports it in that workload): no failure of the job's."""
    note: str = ""
    """``undetected in 1/3``, ``unknown in 1/3 (why; the fix)``, ``no metrics in 1/3``."""

    @property
    def missing_rate(self) -> float:
        """The share of repeats without a value (0 when there were none)."""
        total = self.n + self.missing
        return self.missing / total if total else 0.0

    @property
    def missed_rate(self) -> float:
        """The share of repeats without a value that are no ``unknown``: the job's misses."""
        total = self.n + self.missing
        return (self.missing - self.unknown) / total if total else 0.0


class ScenarioSummary(OpenPart):
    """One scenario across its repeats (``chaos.report.aggregate``)."""

    scenario: str
    repeats: int | None = None
    passed: int | None = None
    """Runs that met every target (an unexpected pass too): the gate's pass rate."""
    failed: int = 0
    errors: int = 0
    xfailed: int = 0
    xpassed: int = 0
    statuses: dict[str, int] = Field(default_factory=dict)
    reasons: list[str] = Field(default_factory=list)
    metrics: dict[str, MetricStats] = Field(default_factory=dict)
    """Each aggregated metric (the gated ones of the catalogue, and wall time)."""

    @property
    def pass_rate(self) -> float | None:
        """Passed runs over repeats; None without repeats."""
        if not self.repeats:
            return None
        return (self.passed or 0) / self.repeats

    def stats(self, key: str) -> MetricStats:
        """Metric ``key``'s statistics; empty ones when the file has none (an older suite)."""
        return self.metrics.get(key) or MetricStats()


class SuiteRecord(OpenPart):
    """``suite.json``: a suite's runs and its scenarios across repeats."""

    schema_version: int = SUITE_SCHEMA_VERSION
    format: int = 1
    """Written since the first suite.json, unchanged."""
    suite: str | None = None
    generated_at: str | None = None
    passed: bool | None = None
    """Green: no missed target, no run without a verdict (an expected failure is fine)."""
    counts: SuiteCounts = Field(default_factory=SuiteCounts)
    runs: list[SuiteRun] = Field(default_factory=list)
    scenarios: list[ScenarioSummary]

    def by_scenario(self) -> dict[str, ScenarioSummary]:
        """Each scenario's summary by name, in file order."""
        return {row.scenario: row for row in self.scenarios}

    def scenario_names(self) -> list[str]:
        return [row.scenario for row in self.scenarios]

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON values, keys as loaded or as built."""
        return jsonable(self.model_dump(exclude_unset=True))

    @classmethod
    def from_dict(cls, data: Any, where: str = "suite record") -> SuiteRecord:
        """Validate ``data`` (any version this trainchaos reads, upgraded); a SuiteRecordError
        names ``where`` and the offending key."""
        if not isinstance(data, dict):
            raise SuiteRecordError(f"{where}: not a trainchaos suite output (expected a JSON object)")
        version = _version(data, where)
        while version < SUITE_SCHEMA_VERSION:
            data = _UPGRADES[version](data)
            version += 1
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise SuiteRecordError(f"{where}: not a trainchaos suite output: {validation_problems(exc)}") from None


# -- versions ------------------------------------------------------------------------------


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    # Version 2 only adds ``schema_version``: a committed baseline of version 1 means the same.
    return {"schema_version": 2, **data}


_UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}


def _version(data: dict[str, Any], where: str) -> int:
    if "schema_version" not in data:
        fmt = data.get("format")
        if fmt == 1 and not isinstance(fmt, bool):
            return 1
        raise SuiteRecordError(f"{where}: schema_version: missing, and format is {fmt!r}, not 1: not a "
                               "trainchaos suite record")
    version = data["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise SuiteRecordError(f"{where}: schema_version: {version!r} is not a suite record version "
                               f"(this trainchaos reads 1 to {SUITE_SCHEMA_VERSION})")
    if version > SUITE_SCHEMA_VERSION:
        raise SuiteRecordError(f"{where}: schema_version: {version} is newer than this trainchaos reads "
                               f"(1 to {SUITE_SCHEMA_VERSION}); upgrade trainchaos to read it")
    return version


# -- files ---------------------------------------------------------------------------------


def write_suite_record(out_dir: str, record: SuiteRecord) -> str:
    """Write ``<out_dir>/suite.json`` atomically; returns its path."""
    text = json.dumps(record.to_dict(), indent=2, default=str, allow_nan=False) + "\n"
    return atomic_write_text(os.path.join(out_dir, SUITE_JSON), text)


def load_suite_record(path: str) -> SuiteRecord:
    """The suite record in ``path``: a suite output directory or the ``suite.json`` itself."""
    file = os.path.join(path, SUITE_JSON) if os.path.isdir(path) else path
    if not os.path.exists(file):
        hint = (" (run the suite first, or record a baseline with --update-baseline)"
                if os.path.isdir(path) or not file.endswith(".json") else "")
        raise SuiteRecordError(f"{path}: no {SUITE_JSON} here{hint}")
    try:
        with open(file, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SuiteRecordError(f"{file}: unreadable suite output: {exc}") from None
    return SuiteRecord.from_dict(data, where=file)
