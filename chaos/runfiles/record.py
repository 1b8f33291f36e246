"""The run record (``journal.json``): one typed model, one constructor, one writer, one loader.

Every run ends with a record, also a failed, interrupted or tool-error run, and a run whose
controller was killed gets one from ``trainchaos cleanup`` (status ``aborted``), as
chaostoolkit writes its journal: a run without a record is a run nobody can explain. All of
them come out of :func:`build_run_record`, from the run's start record (:class:`RunStart`,
``run.json``, on disk before the job starts) and what the run observed.

The record is what every reader takes, typed from the run to the report: the runner hands a
``RunRecord`` to the reports, the suite, the gate and the pytest plugin; ``to_dict`` is only
for writing files and JSON outputs. Its sections are typed too: ``metrics`` is a
``MetricsRecord`` (``chaos.runfiles.record_metrics``), ``verdict`` a ``Verdict`` of ``Check``s (what
``chaos.runner.verdict.judge`` returns), and the rules every reader applies to a run (its outcome,
pass/fail/xfail/xpass/error, and the reasons it is not a pass) are the record's methods. The
record is strict about what the framework itself relies on and open (extra keys kept)
everywhere else: a newer trainchaos of the same schema version may add a key, and each fault
family contributes its own metrics.

Versions: ``schema_version: 2`` is the only one read (version 1, the journals of the 0.1.0
pre-release, had none; it is refused, not upgraded: that release had no users to keep).
Every key is written by every run, the aborted one too (``trainchaos schema --journal``
prints its JSON Schema). A later version that changes a key adds an upgrade step to
``_upgrade``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError
from pydantic.json_schema import GenerateJsonSchema

from chaos.errors import EXIT_BAD_INPUT, ChaosError
from chaos.runfiles.record_metrics import (
    FaultMetricsRecord,
    MetricsRecord,
    OpenPart,
    validation_problems,
)
from chaos.runfiles.rundir import RunDir
from chaos.util.fileio import atomic_write_text
from chaos.util.jsonsafe import jsonable
from chaos.util.textfmt import fmt_value

__all__ = [
    "SCHEMA_VERSION",
    "BackendInfo",
    "BaselineRef",
    "Check",
    "FaultMetricsRecord",
    "FaultOutcome",
    "HoldPhase",
    "MetricsRecord",
    "Outcome",
    "PlannedFaultInfo",
    "Precision",
    "RunRecord",
    "RunRecordError",
    "RunStart",
    "RunStatus",
    "ScenarioInfo",
    "Verdict",
    "Versions",
    "build_run_record",
    "fault_outcome",
    "load_run_record",
    "load_run_start",
    "run_record_json_schema",
    "write_run_record",
    "write_run_start",
]

SCHEMA_VERSION = 2
"""Bumped when a key changes meaning or a required key is added; each bump adds an upgrade
step to ``_upgrade`` so that the records of released versions still load."""

RunStatus = Literal["completed", "failed", "hung", "timeout", "interrupted", "tool_error", "aborted"]
"""hung: no step progress before the timeout; timeout: still progressing at it. tool_error:
trainchaos itself failed (see ``tool_errors``): no verdict. aborted: the controller was killed;
the record was written by ``trainchaos cleanup``."""
Outcome = Literal["pass", "fail", "error", "xfail", "xpass"]
"""A run's outcome (``RunRecord.outcome``). xfail: a scenario that expects to fail
(``expect``) missed its targets; xpass: it met them; error: no verdict."""
RankLaunch = Literal["cold", "warm"]
"""How the job's ranks were started: ``cold`` (each a new interpreter importing torch, as
most stacks start them) or ``warm`` (forked by a per-node zygote that had imported it,
``harness.warm_start``; on the ``local`` backend each node's torchrun agent is forked too, by
the controller's agent zygote): launch and restart times measured warm leave the imports out."""
Precision = Literal["exact", "next_step", "late", "early"]
"""Where a step-triggered fault landed: on the planned step, one later (a signal arriving
during the next step), later still, or before it (a rank ahead of the one whose step counts).
An external fault whose targeted ranks run the probe holds them at the step until it is in
effect (``chaos.probe.hold``), so it lands ``exact`` unless the hold timed out."""
HoldPhase = Literal["held", "released", "timeout"]
"""How the targeted ranks' hold at the fault's step ended: still held when the fault took
effect (a kill: the rank never came back), released by the controller once the fault was in
effect, or given up after its timeout (the controller too slow or gone: it may land late)."""


def blocks(kind: Outcome, strict: bool = False) -> bool:
    """Whether an outcome fails the suite (exit code, suite badge, JUnit failure): a missed
    target or no verdict always; an unexpected pass only with ``strict``."""
    return kind in ("fail", "error") or (strict and kind == "xpass")


_M = TypeVar("_M", bound=BaseModel)


class RunRecordError(ChaosError):
    """A run record (or start record) that is missing, unreadable, malformed, or of a schema
    version this trainchaos does not read; the message names the file and the key."""

    exit_code = EXIT_BAD_INPUT


class ScenarioInfo(OpenPart):
    """The scenario as it ran (``chaos.model.scenario.Scenario``, defaults filled in)."""

    name: str
    path: str | None = None
    description: str = ""
    seed: int | None = None
    topology: dict[str, Any] = Field(default_factory=dict)
    workload: dict[str, Any] = Field(default_factory=dict)
    targets: dict[str, Any] = Field(default_factory=dict)
    faults: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def expectation(self) -> dict[str, Any] | None:
        """The scenario's ``expect`` (``{"fail": reason, "issue": url}``), None when it has
        none. An extra key: written only by the scenarios that set it."""
        expect = (self.model_extra or {}).get("expect")
        return expect if isinstance(expect, dict) and expect.get("fail") else None


class BackendInfo(OpenPart):
    name: str
    options: dict[str, Any] = Field(default_factory=dict)


class Versions(OpenPart):
    trainchaos: str
    torch: str | None = None
    python: str | None = None
    platform: str | None = None


class PlannedFaultInfo(OpenPart):
    """A fault of the seeded plan (``chaos.runner.plan.PlannedFault.to_dict``)."""

    fault_id: str
    type: str
    target: dict[str, Any] = Field(default_factory=dict)
    """As written in the scenario, a random pick drawn."""
    planned_target: dict[str, Any] | None = None
    """``{"ranks": [3], "nodes": [1]}`` as planned (the run may resolve it differently)."""
    trigger: dict[str, Any] = Field(default_factory=dict)
    offset_s: float | None = None
    fires: bool = True
    """False when the seeded draw against ``probability`` said no."""
    params: dict[str, Any] = Field(default_factory=dict)


class FaultOutcome(OpenPart):
    """A fault as it actually happened."""

    fault_id: str
    type: str
    failure_class: str | None = None
    """The class a correct detection names."""
    also_classes: list[str] = Field(default_factory=list)
    target_srcs: list[str] = Field(default_factory=list)
    t_inject: float | None = None
    """When it took effect (None: never)."""
    t_revert: float | None = None
    planned_step: int | None = None
    skipped: str | None = None
    step_at_inject: int | None = None
    precision: Precision | None = None
    lag_ms: float | None = None
    """Milliseconds from the moment the trigger named to the fault in effect: the target's
    ``step_end`` of the planned step (at_step; from a workload's log lines, when its ranks
    have no probe to hold), the planned time (at_time, random, poisson), the event plus its
    delay (after_event). None for an in-process fault (it fires in the step itself)."""
    hold: HoldPhase | None = None
    """The targeted ranks' hold at the step (``chaos.probe.hold``), the worst any of them reported
    (timeout, then released, then held); None when no rank held (no probe, not a step
    trigger, an in-process fault)."""
    mechanism: str | None = None
    """injector (from the controller) or probe (in-process, in the rank)."""
    fidelity: str | None = None
    """The fault type's fidelity statement: what it stands for and what it does not prove."""
    details: dict[str, Any] = Field(default_factory=dict)
    """What ``inject`` returned (pids, rules, paths): what revert and cleanup need."""
    error: str | None = None
    target_spec: dict[str, Any] | None = None
    resolved_target: dict[str, Any] | None = None
    """The target as resolved against live processes at injection."""


class Check(OpenPart):
    """One target checked (``chaos.runner.verdict``)."""

    name: str
    """The target checked: a metric's key (``chaos.metrics.catalogue``: detection_s,
    recovery_s, goodput...), or final_state, attribution, data, completes, fault_fired,
    training_health."""
    ok: bool
    value: Any = None
    """What was measured (None when it could not be: undetected, never recovered...)."""
    bound: Any = None
    """The target: ``{"max": 2, "min": None}``, a mode (``matches_baseline``) or True."""
    reason: str | None = None
    """One sentence naming the measured value and the bound (``judge`` always writes one)."""
    fault: str | None = None
    """The fault id for per-fault checks."""
    twin: bool = False
    """Judged on the fault-free twin's own figures (``chaos.runner.verdict.judge_twin``): a
    miss is the job's own bug before any fault, listed first."""
    wrong_reference: bool = False
    """A comparison against a twin that missed a correctness target itself: the reference
    it was measured against is wrong, whatever its result says."""

    @property
    def text(self) -> str:
        """The reason, or the name, value and bound where a record has none."""
        if self.reason:
            return self.reason
        return f"{self.name}: {fmt_value(self.value)} (bound {fmt_value(self.bound)})"


class Verdict(OpenPart):
    """Metrics against targets: passed when every check is ok (``chaos.runner.verdict.judge``)."""

    passed: bool
    checks: list[Check] = Field(default_factory=list)

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    @property
    def twin_misses(self) -> list[Check]:
        """The correctness targets the fault-free twin itself missed (the first findings)."""
        return [c for c in self.checks if c.twin and not c.ok]

    def reasons(self) -> list[str]:
        """Why it failed: the failed checks' reasons, in check order (empty when passed)."""
        return [c.text for c in self.failed_checks]

    def to_dict(self) -> dict[str, Any]:
        """The verdict as plain JSON values (a check's value may be any measured object)."""
        return jsonable(self.model_dump())


class BaselineRef(OpenPart):
    """The fault-free twin this run was judged against."""

    digest: str | None = None
    wall_s: float | None = None
    run_dir: str | None = None
    status: str | None = None
    checks: list[Check] = Field(default_factory=list)
    """The twin's correctness targets judged on its own figures (``Check.twin``); a miss
    makes it a wrong reference for every comparison against it."""

    @property
    def misses(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]


class RunStart(OpenPart):
    """``run.json``: what the run record needs that the events do not hold, written before
    the job starts, so that the record of a run whose controller was killed can be built."""

    run_id: str
    scenario: ScenarioInfo
    seed: int
    plan_seed: int | None = None
    plan: list[PlannedFaultInfo] = Field(default_factory=list)
    with_faults: bool = True
    started_at: str
    t_start: float
    steps_target: int
    world_size: int
    timeout_s: float | None = None
    backend: BackendInfo
    repeat_index: int = 0
    baseline: BaselineRef | None = None
    rank_launch: RankLaunch = "cold"


class RunRecord(OpenPart):
    """One run, complete: the scenario, the resolved plan, what each fault did, the metrics,
    the verdict. Values inside ``metrics`` and ``verdict``, or those themselves, are None
    when the run ended before they could be computed."""

    schema_version: int = SCHEMA_VERSION
    format: int = 1
    """Written since the first journals, unchanged: the key stays so that the keys do."""
    scenario: ScenarioInfo
    run_id: str | None = None
    run_dir: str | None = None
    """Where the run was written (``reports/<suite>/<scenario>/<repeat>``)."""
    status: RunStatus
    error: str | None = None
    tool_errors: list[str] = Field(default_factory=list)
    """What of trainchaos failed (inject, target resolution, revert, teardown, the runner)."""
    traceback: str | None = None
    backend: BackendInfo | None = None
    started_at: str | None = None
    ended_at: str | None = None
    """None for an aborted run: nobody saw it end."""
    wall_s: float | None = None
    versions: Versions | None = None
    seed: int | None = None
    plan_seed: int | None = None
    plan: list[PlannedFaultInfo] = Field(default_factory=list)
    faults: list[FaultOutcome] = Field(default_factory=list)
    metrics: MetricsRecord | None = None
    """Run-level metrics and ``faults`` (per fault), as ``chaos.metrics`` computed them; each
    fault family adds its own keys."""
    verdict: Verdict | None = None
    """None: no verdict (a baseline, a tool error, an aborted or interrupted run)."""
    baseline: BaselineRef | None = None
    repeat_index: int = 0
    rank_launch: RankLaunch = "cold"
    """How the ranks were started (``RankLaunch``): restart figures measured ``warm`` are not
    what a cold-starting stack pays."""
    interrupted_after: bool = False
    """A signal arrived during teardown: this run's outcome stands, the suite stopped after it."""
    journal_written_by: str | None = None
    """Who wrote the record when the run's own controller could not (``trainchaos cleanup``)."""
    twin_checks: list[Check] = Field(default_factory=list)
    """The fault-free twin's own record only (it gets no verdict: it is the reference): its
    correctness targets judged on its own figures (``chaos.runner.verdict.judge_twin``). The
    runs judged against it carry these in ``baseline.checks``, the misses first in their verdict."""

    # -- what every reader concludes from a run ----------------------------------------------

    @property
    def repeat(self) -> int:
        return self.repeat_index

    @property
    def label(self) -> str:
        """``rank-kill-mid-step[0]``: the scenario and repeat, as tests and tables name a run."""
        return f"{self.scenario.name}[{self.repeat_index}]"

    @property
    def had_faults(self) -> bool:
        """True when a fault was injected, so a missing detection means *undetected*."""
        return bool(self.faults)

    def metric(self, key: str) -> Any:
        """Run-level metric ``key`` (a catalogue key, a family's own); None when it was not
        measured or the run has no metrics."""
        return None if self.metrics is None else self.metrics.value(key)

    @property
    def measured_wall_s(self) -> float | None:
        """The run's wall time: the metric when there is one, else the record's own clock."""
        value = self.metrics.wall_s if self.metrics is not None else None
        return self.wall_s if value is None else value

    @property
    def expectation(self) -> dict[str, Any] | None:
        """The scenario's ``expect`` (``{"fail": reason, "issue": url}``), None without one."""
        return self.scenario.expectation

    @property
    def expectation_text(self) -> str:
        """``REASON (URL)``: the expected failure as the reports quote it; empty without one."""
        expect = self.expectation
        if expect is None:
            return ""
        return str(expect["fail"]).strip() + (f" ({expect['issue']})" if expect.get("issue") else "")

    @property
    def outcome(self) -> Outcome:
        """``pass``/``fail`` from the verdict, ``xfail``/``xpass`` for a scenario that expects
        to fail (``expect``); ``error`` when the tool failed or no verdict exists (an
        interrupted run is not a pass, and calling it a missed target would be a lie; nor is
        it an expected failure: the finding was not reproduced)."""
        if self.status == "tool_error" or self.verdict is None:
            return "error"
        if self.expectation is not None:
            return "xpass" if self.verdict.passed else "xfail"
        return "pass" if self.verdict.passed else "fail"

    @property
    def outcome_label(self) -> str:
        """PASS, FAIL, ERROR, XFAIL, XPASS, or TOOL ERROR: the word the tables show."""
        if self.status == "tool_error":
            return "TOOL ERROR"
        return self.outcome.upper()

    @property
    def met_targets(self) -> bool:
        """Every target was met (a pass, or an unexpected one)."""
        return self.outcome in ("pass", "xpass")

    def blocks(self, strict: bool = False) -> bool:
        """Whether this run fails its suite (exit code, suite badge, JUnit failure): a missed
        target or no verdict always; an unexpected pass only with ``strict``."""
        return blocks(self.outcome, strict)

    @property
    def failed_checks(self) -> list[Check]:
        return self.verdict.failed_checks if self.verdict is not None else []

    @property
    def checks(self) -> list[Check]:
        """Every target checked: the verdict's, or for the fault-free twin its own checks."""
        return self.verdict.checks if self.verdict is not None else list(self.twin_checks)

    @property
    def twin_finding(self) -> str | None:
        """The sentence every report leads with when the fault-free twin itself missed a
        correctness target (this run's twin, or this run being the twin); None otherwise."""
        misses = [c for c in self.checks if c.twin and not c.ok]
        if not misses:
            return None
        names = ", ".join(dict.fromkeys(c.name for c in misses))
        wrong = ", ".join(dict.fromkeys(c.name for c in self.checks if c.wrong_reference))
        return (f"The fault-free twin missed {len(misses)} correctness target(s) before any fault ({names}): "
                "the job's own bug, the first finding."
                + (f" The comparisons with that twin ({wrong}) are against a wrong reference." if wrong else ""))

    def reasons(self) -> list[str]:
        """Why the run is not a pass, one line each; empty for a pass. An expected failure
        says so first (with its reason and issue), then the targets it missed."""
        kind = self.outcome
        if kind == "pass":
            return []
        if kind == "xpass":
            return [f"unexpectedly met every target; expected to fail: {self.expectation_text}"]
        if kind == "error":
            if self.error:
                return [self.error]
            return [f"run {self.status}: no verdict"]
        found = [c.text for c in self.failed_checks] or ["verdict failed (no failing check recorded)"]
        if kind == "xfail":
            found.insert(0, f"expected failure: {self.expectation_text}")
        return found

    # -- files -----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON values, keys as loaded or as built: a loaded record of an
        older version is not padded with keys it never had."""
        return jsonable(self.model_dump(exclude_unset=True))

    @classmethod
    def from_dict(cls, data: Any, where: str = "run record") -> RunRecord:
        """Validate ``data`` (a schema version this trainchaos reads, upgraded to this one); a
        RunRecordError names ``where`` and the offending key."""
        if not isinstance(data, Mapping):
            raise RunRecordError(f"{where}: not a run record (expected a JSON object)")
        data = _upgrade(dict(data), where)
        return _validate(cls, data, where)


# -- versions ------------------------------------------------------------------------------


def _upgrade(data: dict[str, Any], where: str) -> dict[str, Any]:
    # One version is read: the first bump adds its upgrade step here (as chaos.runfiles.suite_record
    # does for suite.json), not before.
    if "schema_version" not in data:
        raise RunRecordError(f"{where}: schema_version: missing; not a run record this trainchaos reads "
                             f"(schema version {SCHEMA_VERSION}; journals of the 0.1.0 pre-release had none)")
    version = data["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version < SCHEMA_VERSION:
        raise RunRecordError(f"{where}: schema_version: {version!r} is not a run record version "
                             f"this trainchaos reads ({SCHEMA_VERSION})")
    if version > SCHEMA_VERSION:
        raise RunRecordError(f"{where}: schema_version: {version} is newer than this trainchaos reads "
                             f"({SCHEMA_VERSION}); upgrade trainchaos to read it")
    return data


def _validate(model: type[_M], data: Any, where: str) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RunRecordError(f"{where}: {validation_problems(exc)}") from None


# -- the constructor -----------------------------------------------------------------------


def fault_outcome(record: Any, **observed: Any) -> FaultOutcome:
    """A fault's outcome from the metrics' view of it (``chaos.metrics.FaultRecord``) and what
    the runner observed (the rest stays unknown: None)."""
    base = asdict(record) if is_dataclass(record) and not isinstance(record, type) else dict(record)
    return FaultOutcome.model_validate({**base, **observed})


def build_run_record(start: RunStart, *, run_dir: str, status: RunStatus, t_end: float,
                     faults: list[FaultOutcome], metrics: MetricsRecord | None,
                     verdict: Verdict | None, versions: Mapping[str, Any],
                     error: str | None = None, tool_errors: list[str] | tuple[str, ...] = (),
                     traceback: str | None = None, ended_at: str | None = None,
                     interrupted_after: bool = False, written_by: str | None = None,
                     twin_checks: list[Check] | tuple[Check, ...] = ()) -> RunRecord:
    """The record of a finished, failed, tool-error or aborted run; the only constructor.
    Every key is written, at every level, also those nobody could know (an aborted run's
    torch version): a reader never has to guess whether a key was left out or is unknown."""
    built = RunRecord(
        schema_version=SCHEMA_VERSION, format=1, scenario=start.scenario,
        run_id=start.run_id, run_dir=run_dir, status=status, error=error,
        tool_errors=list(tool_errors), traceback=traceback, backend=start.backend,
        started_at=start.started_at, ended_at=ended_at, wall_s=round(t_end - start.t_start, 3),
        versions=Versions.model_validate(dict(versions)), seed=start.seed, plan_seed=start.plan_seed,
        plan=start.plan, faults=faults, metrics=metrics, verdict=verdict,
        baseline=start.baseline, repeat_index=start.repeat_index, rank_launch=start.rank_launch,
        interrupted_after=interrupted_after, journal_written_by=written_by, twin_checks=list(twin_checks),
    )
    # Validated again from its full dump, every default becomes a key that is set.
    return RunRecord.model_validate(built.model_dump())


# -- files ---------------------------------------------------------------------------------


def _run_dir(where: RunDir | str) -> RunDir:
    return where if isinstance(where, RunDir) else RunDir(where)


def _dump(data: Any) -> str:
    # Non-finite floats become null (strict parsers reject NaN) and unknown objects their
    # str(): writing the one file that must always exist cannot fail on an odd value.
    return json.dumps(jsonable(data), indent=2, default=str, allow_nan=False) + "\n"


def write_run_record(run_dir: RunDir | str, record: RunRecord) -> str:
    """Write ``<run_dir>/journal.json`` atomically; returns its path."""
    return atomic_write_text(_run_dir(run_dir).run_record, _dump(record.to_dict()))


def write_run_start(run_dir: RunDir | str, start: RunStart) -> str:
    return atomic_write_text(_run_dir(run_dir).run_start, _dump(start.model_dump(exclude_unset=True)))


def _read_json(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise RunRecordError(f"{path}: no {what} here (is this a run directory?)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunRecordError(f"{path}: unreadable {what}: {exc}") from None


def load_run_record(path: str) -> RunRecord:
    """The record in ``path``: a ``journal.json`` or the run directory that holds it. A
    journal of a version this trainchaos does not read (older or newer), or one that is not
    a record, is a RunRecordError naming the file and the key."""
    if os.path.isdir(path):
        path = RunDir(path).run_record
    return RunRecord.from_dict(_read_json(path, "journal"), where=path)


def load_run_start(run_dir: RunDir | str) -> RunStart:
    path = _run_dir(run_dir).run_start
    data = _read_json(path, "run start record")
    return _validate(RunStart, data, path)


class _NoFieldTitles(GenerateJsonSchema):
    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def run_record_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``journal.json`` as this trainchaos writes it: every
    key required (every run writes every key); values open where families add their own."""
    schema = RunRecord.model_json_schema(mode="serialization", schema_generator=_NoFieldTitles)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "urn:trainchaos:run-record"
    schema["properties"]["schema_version"]["const"] = SCHEMA_VERSION
    return schema
