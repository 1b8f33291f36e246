"""The inputs and outputs of ``compute_metrics``: what the runner knows of each fault and of
the run, and the metrics of each fault and of the whole run.

The outputs' fields are the journal's ``metrics`` (``to_dict``), which tests and the stored
regression baselines read: a field's name, order and meaning are part of that format, and the
run record declares the same fields in the same order (``chaos.runfiles.record_metrics``; a test in
tests/unit/test_record.py fails when the two differ).
A metric family registered later (``chaos.metrics.family``) adds its values without a field
here: they are kept in ``family_values`` and written flat after the fields, so a journal reads
the same whichever module measured a value. The built-in families' fields (silent corruption,
power, network, storage) stay declared here, commented with their family: as fields they keep
their place in the journal's key order, and typed attributes for the tests and the pytest
plugin's users; their values are computed by their family (``chaos.metrics.families``).
"""

from __future__ import annotations

from dataclasses import Field, asdict, dataclass, field, fields
from typing import Any, ClassVar, Literal

from chaos.util.jsonsafe import jsonable as json_safe

__all__ = ["Attribution", "BaselineInfo", "DetectionSources", "FaultMetrics", "FaultRecord", "RunInfo",
           "RunMetrics", "RunStatus", "json_safe"]

RunStatus = Literal["completed", "hung", "failed", "interrupted", "tool_error", "aborted"]
Attribution = Literal["correct", "wrong", "none", "unknown"]
"""``unknown``: trainchaos could not observe the job's detection of the fault (no detection
source covers it, ``DetectionSources``): the tool's gap, never the stack's failure."""
InJob = Literal["always", "probe", "none"]


class _FamilyValues:
    """Values of registered metric families that have no dataclass field: read as attributes,
    written flat into ``to_dict`` after the fields (the run record reads them back as its
    ``MetricsRecord``'s extra keys, ``chaos.runfiles.record_metrics``)."""

    family_values: dict[str, Any]
    # Every subclass is a dataclass: declared (not set) so that fields() and asdict() take it.
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: a family value, else a plain AttributeError.
        values = self.__dict__.get("family_values")
        if values is not None and name in values:
            return values[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def set_value(self, key: str, value: Any) -> None:
        """Set a metric by key: its field when it has one, else a family value."""
        if key in {f.name for f in fields(self)}:
            setattr(self, key, value)
        else:
            self.family_values[key] = value

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("family_values", None)
        if "faults" in data:  # nested FaultMetrics: flattened the same way
            data["faults"] = [f.to_dict() for f in self.faults]
        data.update(self.family_values)
        return json_safe(data)

# -- inputs -----------------------------------------------------------------------------


@dataclass
class FaultRecord:
    """One planned fault as the runner saw it (built by the runner, one per planned fault)."""

    fault_id: str
    """``FaultSpec.fault_id`` (``f0-kill_rank``); in-process faults' events carry it as ``fault``."""
    type: str
    """Registered fault type name."""
    failure_class: str
    """The class a correct detection names (``FaultType.failure_class``)."""
    target_srcs: list[str]
    """Every src it is right to blame (``ResolvedTarget.srcs()``: ranks and their nodes)."""
    t_inject: float | None = None
    """When the injector reported the fault in effect; None if it never fired or fired in-process."""
    t_revert: float | None = None
    """When the fault was removed; None if it never was before the run ended."""
    planned_step: int | None = None
    """The step of an ``at_step`` trigger."""
    skipped: str | None = None
    """Why the runner deliberately did not fire it (a probability roll); None otherwise."""
    also_classes: tuple[str, ...] = ()
    """Other classes a correct detection may name (``FaultType.also_detected_as``)."""
    family: str | None = None
    """The fault type's family (``FaultType.family``): which metric families measure it."""
    params: dict[str, Any] = field(default_factory=dict)
    """The fault's parameters as planned (defaults filled in): what a family's metrics may
    need to know of it (a throttle's ramp)."""


@dataclass(frozen=True)
class DetectionSources:
    """Where a run's ``detected`` events can come from, as its workload declares them
    (``Workload.detection_sources``): what decides whether a fault nobody reported was
    *undetected* by the job, or unseen by trainchaos (detection ``unknown``)."""

    in_job: InJob = "always"
    """The job's own reports through ``chaos.probe``: ``always`` (the bundled harness reports
    every detector it runs), ``probe`` (when its ranks report through the probe at all: the
    stack's adapter line, a script's probe calls; a run without one is blind to what the job
    noticed without a process ending), ``none`` (never)."""
    agent: bool = True
    """The torchrun agents report a worker that died (``chaos.workload.logprogress``): a fault
    of class ``crash`` is seen ending a process whichever reporter the job has."""
    node_loss_seen: bool = True
    """A whole node lost (its own agent with it) is seen by the other nodes' agents, through
    their workers that fail with it; False for a stack whose survivors train on without the
    lost group (torchft): nothing but the job itself then notices."""
    fix: str = ""
    """What gives a blind run a source: the stack's adapter line, or the probe call."""
    progress_from_logs: bool = False
    """Its steps are read from its log lines (``progress_regex``) where the probe reports none."""
    progress_fix: str = ""
    """What gives a run with no step source one (recovery, catch-up and lost steps need it)."""

    def blind_to_progress(self, probe_reports: bool) -> bool:
        """Whether no source could have reported the job's steps."""
        return self.in_job != "always" and not probe_reports and not self.progress_from_logs

    def blind_to(self, rec: FaultRecord, probe_reports: bool) -> bool:
        """Whether no source could have reported the job's detection of fault ``rec``;
        ``probe_reports``: some rank of the run reported through the probe."""
        if self.in_job == "always" or (self.in_job == "probe" and probe_reports):
            return False
        if not (self.agent and "crash" in (rec.failure_class, *rec.also_classes)):
            return True
        # A node target names the node beside its ranks (``ResolvedTarget.srcs``).
        return not self.node_loss_seen and any(src.startswith("node-") for src in rec.target_srcs)


@dataclass
class RunInfo:
    status: RunStatus
    """completed | hung | failed | interrupted (the runner's word on how the job ended)."""
    t_start: float
    """When the job was started (controller clock)."""
    t_end: float
    """When the workload ended (before the end-of-run cleanup reverted faults)."""
    steps_target: int
    """The step the run must reach."""
    world_size: int
    """Ranks the run was started with."""
    timeout_s: float | None = None
    """The scenario's timeout, quoted in reasons for a hung run."""
    t_stop: float | None = None
    """When trainchaos began stopping the job (teardown); later events are its doing."""
    detection: DetectionSources | None = None
    """Where its detections can come from; None: not declared (every fault observable)."""


@dataclass
class BaselineInfo:
    digest: str | None
    """Final weights digest of the fault-free run (``run_end.digest``)."""
    losses: dict[int, float]
    """Step -> loss of the fault-free run (keys may be strings when read back from JSON)."""
    world_size: int
    health_problem: str | None = None
    """Why the baseline itself is not a sound reference (non-finite loss or weights)."""
    samples: dict[int, Any] = field(default_factory=dict)
    """Step -> the samples the twin trained at that step, every rank's together, as
    ``[[epoch, [[start, stop], ...]], ...]`` (empty: the workload reports none); what the
    exactly-once data checker expects (chaos/metrics/families/data.py)."""
    digests: dict[int, str] = field(default_factory=dict)
    """Step -> digest of the model state the twin reached at that step (``state_digest``
    events; empty when the job does not report them): the checkpoint freshness reference."""


# -- outputs ----------------------------------------------------------------------------


@dataclass
class FaultMetrics(_FamilyValues):
    fault_id: str
    type: str
    failure_class: str
    target_srcs: list[str]
    fired: bool
    skipped: str | None = None
    t_inject: float | None = None
    t_revert: float | None = None
    planned_step: int | None = None
    injected_step: int | None = None
    """Step reported by the ``fault_injected`` event, else the planned step."""
    detection_s: float | None = None
    detected_by: str | None = None
    detection_reason: str | None = None
    detected_suspect: str | None = None
    detected_class: str | None = None
    attribution: Attribution = "none"
    attribution_detail: str = ""
    recovery_s: float | None = None
    restarted: bool = False
    restarts_after: int = 0
    restarts_caused: int = 0
    """Group restarts whose cause is this fault (see ``RunMetrics.restarts``)."""
    catchup_s: float | None = None
    last_step_before: int | None = None
    resumed_from: int | None = None
    lost_steps: int | None = None
    detector: str | None = None
    """Which detector of the job fired (the ``detected`` event's ``detector`` field)."""
    unknown: dict[str, str] = field(default_factory=dict)
    """Metric key (``detection_s``, ``attribution``) -> why trainchaos could not measure it
    and what would let it: the workload supplies no source for it (docs/metrics.md,
    "Unknown"). A target on such a metric fails as unknown, never as the stack's miss."""
    sdc_detection_steps: int | None = None
    contaminated_checkpoints: int = 0
    # power faults (chaos/faults/power/metrics.py)
    blast_nodes: int | None = None
    blast_ranks: int | None = None
    kill_spread_ms: float | None = None
    full_size_s: float | None = None
    resumed_tier: str | None = None
    resumed_copy: str | None = None
    # network faults (chaos/faults/network/metrics.py)
    baseline_step_s: float | None = None
    fault_step_s: float | None = None
    slowdown: float | None = None
    heal_s: float | None = None
    family_values: dict[str, Any] = field(default_factory=dict, repr=False)
    """Metrics of registered families without a field here (see the module docstring)."""


@dataclass
class RunMetrics(_FamilyValues):
    status: str
    t_start: float
    t_end: float
    wall_s: float
    steps_target: int
    world_size: int
    final_world_size: int
    timeout_s: float | None = None
    completed: bool = False
    final_step: int | None = None
    final_digest: str | None = None
    final_loss: float | None = None
    restart_count: int = 0
    restarts: list[dict[str, Any]] = field(default_factory=list)
    """Each group restart: t, incarnation, last_step_before, resumed_from, lost_steps, cause."""
    lost_steps_total: int = 0
    unexplained_restarts: int = 0
    productive_s: float = 0.0
    goodput: float | None = None
    lost_work_rank_s: float | None = None
    twin_step_s: float | None = None
    """A fault-free twin's step time: the mean duration of the steps the run kept, less those a
    fault struck."""
    ettr: float | None = None
    """Steps kept / the steps the twin makes in the same time, first step to end."""
    faults: list[FaultMetrics] = field(default_factory=list)
    faults_fired: int = 0
    # worst case over fired faults
    detection_s: float | None = None
    recovery_s: float | None = None
    catchup_s: float | None = None
    lost_steps: int | None = None
    undetected: bool = False
    unrecovered: bool = False
    # correctness against the baseline
    has_baseline: bool = False
    baseline_digest: str | None = None
    baseline_world_size: int | None = None
    world_size_changed: bool | None = None
    digest_match: bool | None = None
    max_rel_loss_dev: float | None = None
    loss_dev_steps: list[int] = field(default_factory=list)
    nonfinite_loss_step: int | None = None
    baseline_health_problem: str | None = None
    # training health
    healthy: bool = True
    health_problem: str | None = None
    first_nonfinite_step: int | None = None
    # silent corruption (worst over fired corruption faults)
    sdc_detection_steps: int | None = None
    contaminated_checkpoints: int | None = None
    detector_overhead_pct: float | None = None
    """Time the job's corruption detectors took, in % of the rest of its step time, as the
    job reports it (``run_end.detector_s`` / ``train_s``: the last incarnation of rank 0)."""
    detector_seconds: dict[str, float] = field(default_factory=dict)
    # false alarms
    false_detections: int = 0
    false_detection_events: list[dict[str, Any]] = field(default_factory=list)
    """Each false detection: t, by, suspect, failure_class, reason."""
    # checkpoints and storage (definitions: chaos/faults/storage/metrics.py)
    ckpt_save_p50_s: float | None = None
    ckpt_save_p95_s: float | None = None
    ckpt_save_max_s: float | None = None
    ckpt_blocked_s: float = 0.0
    failed_saves: int = 0
    abandoned_saves: int = 0
    skipped_saves: int = 0
    rejected_checkpoints: int = 0
    ckpt_lost_steps: int = 0
    # exactly-once data (definitions: chaos/metrics/families/data.py); None: no sample reports
    data_samples: int | None = None
    data_lost: int | None = None
    data_duplicated: int | None = None
    data_rolled_back_only: int | None = None
    data_epochs: list[dict[str, Any]] | None = None
    # reload sanity and progress (definitions: chaos/metrics/families/reload.py)
    reload_nonfinite: int = 0
    reload_loss_dev: float | None = None
    reload_loss_steps: list[int] = field(default_factory=list)
    silent_rollback_steps: int = 0
    silent_rollbacks: list[dict[str, Any]] = field(default_factory=list)
    # checkpoint freshness (definitions: chaos/metrics/families/freshness.py)
    stale_checkpoints: int | None = None
    stale_checkpoint_list: list[dict[str, Any]] = field(default_factory=list)
    checked_checkpoints: int = 0
    unchecked_checkpoints: int = 0
    family_values: dict[str, Any] = field(default_factory=dict, repr=False)
    """Metrics of registered families without a field here (see the module docstring)."""
