"""The metrics section of the run record (``journal.json``'s ``metrics``), typed.

``chaos.metrics`` computes a run's metrics as dataclasses (``RunMetrics``, one
``FaultMetrics`` per fault; stdlib only, the engine's own types); the record keeps them as
these models, so that every reader (reports, the gate, the pytest plugin, ``simulate
--from-runs``) writes ``record.metrics.recovery_s`` or ``record.metrics.faults[0].detection_s``
and a type checker follows it. The fields are those of the dataclasses, in their order (the
order of the journal's keys; ``tests/unit/test_record.py`` fails when the two drift apart).

Every field may be None, and a key left out of a journal stays left out when it is written
again: a run that ended early has part of its metrics, a test's journal fewer. Open to extra
keys: a metric family registered later (``chaos.metrics.family``) writes its values flat
beside the fields, and they are read as attributes (``record.metrics.toy_alarms``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from chaos.metrics import RunMetrics

__all__ = ["FaultMetricsRecord", "MetricsRecord", "Number", "OpenPart", "validation_problems"]

Number = float | int
"""A measured value, int or float as the engine wrote it: a float-only field would turn a
journal's ``3`` into ``3.0`` when the record is written again."""


class OpenPart(BaseModel):
    """A part of a record (the run's, ``chaos.runfiles.record``; the suite's, ``chaos.runfiles.suite_record``).
    Open: a newer trainchaos of the same schema version, or a fault family, may add keys, and
    they survive a load and a rewrite."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True,
                              json_schema_serialization_defaults_required=True)


def validation_problems(exc: ValidationError) -> str:
    """``metrics.faults[0].recovery_s: Input should be a valid number; ...``: each problem of
    a record that failed validation, located by its key."""
    return "; ".join(f"{_location(err['loc'])}: {err['msg']}" for err in exc.errors())


def _location(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or "(top)"


class _Values(OpenPart):
    """Metrics read by a key known only at run time (the catalogue's, a family's)."""

    def value(self, key: str) -> Any:
        """Metric ``key`` by name (a catalogue key, a family's own): None when not measured."""
        return getattr(self, key, None)


class FaultMetricsRecord(_Values):
    """One fault's metrics (``chaos.metrics.FaultMetrics``; definitions in docs/metrics.md)."""

    fault_id: str | None = None
    type: str | None = None
    failure_class: str | None = None
    target_srcs: list[str] | None = None
    fired: bool | None = None
    skipped: str | None = None
    t_inject: Number | None = None
    t_revert: Number | None = None
    planned_step: int | None = None
    injected_step: int | None = None
    detection_s: Number | None = None
    detected_by: str | None = None
    detection_reason: str | None = None
    detected_suspect: str | None = None
    detected_class: str | None = None
    attribution: str | None = None
    attribution_detail: str | None = None
    recovery_s: Number | None = None
    restarted: bool | None = None
    restarts_after: int | None = None
    restarts_caused: int | None = None
    catchup_s: Number | None = None
    last_step_before: int | None = None
    resumed_from: int | None = None
    lost_steps: int | None = None
    detector: str | None = None
    unknown: dict[str, str] | None = None
    sdc_detection_steps: int | None = None
    contaminated_checkpoints: int | None = None
    blast_nodes: int | None = None
    blast_ranks: int | None = None
    kill_spread_ms: Number | None = None
    full_size_s: Number | None = None
    resumed_tier: str | None = None
    resumed_copy: str | None = None
    baseline_step_s: Number | None = None
    fault_step_s: Number | None = None
    slowdown: Number | None = None
    heal_s: Number | None = None

    def missing(self, key: str, word: str) -> str:
        """What a None value of ``key`` is called: ``unknown`` when trainchaos could not
        observe it in this workload (``unknown``), else ``word`` (``undetected``)."""
        return "unknown" if key in (self.unknown or {}) else word


class MetricsRecord(_Values):
    """The run's metrics (``chaos.metrics.RunMetrics``): run-level values, the worst case over
    the fired faults, and ``faults`` (one per fired or planned fault)."""

    status: str | None = None
    t_start: Number | None = None
    t_end: Number | None = None
    wall_s: Number | None = None
    steps_target: int | None = None
    world_size: int | None = None
    final_world_size: int | None = None
    timeout_s: Number | None = None
    completed: bool | None = None
    final_step: int | None = None
    final_digest: str | None = None
    final_loss: Number | None = None
    restart_count: int | None = None
    restarts: list[dict[str, Any]] | None = None
    lost_steps_total: int | None = None
    unexplained_restarts: int | None = None
    productive_s: Number | None = None
    goodput: Number | None = None
    lost_work_rank_s: Number | None = None
    twin_step_s: Number | None = None
    ettr: Number | None = None
    faults: list[FaultMetricsRecord] = Field(default_factory=list)
    faults_fired: int | None = None

    def unknown_reason(self, key: str) -> str | None:
        """Why the run-level ``key`` is None when trainchaos could not observe it (the tool
        was blind: a stack without its adapter line), with the fix where one is known; None
        when it was observed or is a real miss. A run-level fault metric is the worst over
        the fired faults, None only when every one's is: unknown when each of those is
        unknown, a miss when any one is merely missing (the job missed that fault)."""
        if self.value(key) is not None:
            return None
        missing = [fm for fm in self.faults if fm.fired is not False and fm.value(key) is None]
        if missing and all(key in (fm.unknown or {}) for fm in missing):
            return (missing[0].unknown or {})[key]
        return None
    detection_s: Number | None = None
    recovery_s: Number | None = None
    catchup_s: Number | None = None
    lost_steps: int | None = None
    undetected: bool | None = None
    unrecovered: bool | None = None
    has_baseline: bool | None = None
    baseline_digest: str | None = None
    baseline_world_size: int | None = None
    world_size_changed: bool | None = None
    digest_match: bool | None = None
    max_rel_loss_dev: Number | None = None
    loss_dev_steps: list[int] | None = None
    nonfinite_loss_step: int | None = None
    baseline_health_problem: str | None = None
    healthy: bool | None = None
    health_problem: str | None = None
    first_nonfinite_step: int | None = None
    sdc_detection_steps: int | None = None
    contaminated_checkpoints: int | None = None
    detector_overhead_pct: Number | None = None
    detector_seconds: dict[str, Any] | None = None
    false_detections: int | None = None
    false_detection_events: list[dict[str, Any]] | None = None
    ckpt_save_p50_s: Number | None = None
    ckpt_save_p95_s: Number | None = None
    ckpt_save_max_s: Number | None = None
    ckpt_blocked_s: Number | None = None
    failed_saves: int | None = None
    abandoned_saves: int | None = None
    skipped_saves: int | None = None
    rejected_checkpoints: int | None = None
    ckpt_lost_steps: int | None = None
    data_samples: int | None = None
    data_lost: int | None = None
    data_duplicated: int | None = None
    data_rolled_back_only: int | None = None
    data_epochs: list[dict[str, Any]] | None = None
    reload_nonfinite: int | None = None
    reload_loss_dev: Number | None = None
    reload_loss_steps: list[int] | None = None
    silent_rollback_steps: int | None = None
    silent_rollbacks: list[dict[str, Any]] | None = None
    stale_checkpoints: int | None = None
    stale_checkpoint_list: list[dict[str, Any]] | None = None
    checked_checkpoints: int | None = None
    unchecked_checkpoints: int | None = None

    @classmethod
    def of(cls, metrics: RunMetrics) -> MetricsRecord:
        """The engine's metrics as the record keeps them (family values flat, as written)."""
        return cls.model_validate(metrics.to_dict())

    def has(self, key: str) -> bool:
        """Whether the record holds metric ``key`` at all (a journal of a run that ended early
        holds fewer)."""
        return key in self.model_fields_set or key in (self.model_extra or {})

    def by_fault(self) -> dict[str, FaultMetricsRecord]:
        """Per-fault metrics keyed by fault id."""
        return {str(f.fault_id): f for f in self.faults}
