"""Timeline -> metrics: detection, recovery, catch-up, lost steps, goodput, correctness.

Pure logic over the merged event timeline (``chaos.events``); no I/O, stdlib only. This
module is the executable form of DESIGN.md, "Metric definitions". The exact choices, where
the design leaves room, are:

Incarnations
    Every process reports ``incarnation`` (its restart count). For a fault injected at
    ``t_inject``, the *pre-fault incarnation* of a rank src is the highest incarnation that src
    emitted any event with before ``t_inject``; a src with no event before the fault takes the
    highest pre-fault incarnation of any rank (a rank that joins later belongs to the group's
    generation), or 0 when no rank had emitted anything yet. An event of a *post-fault
    incarnation* has a higher incarnation than its src's pre-fault one: a restart happened.
    Only ``rank-*`` srcs take part (they are the ones that step).

Per fault (``FaultMetrics``)
    t_inject
        ``FaultRecord.t_inject``; when None, the first ``fault_injected`` event whose ``fault``
        field is the fault id (in-process faults fire inside the rank). Neither: not fired.
    t_revert
        ``FaultRecord.t_revert``, else the first ``fault_reverted`` event of the fault. A revert
        at or after ``RunInfo.t_end`` is ignored: the fault lasted until the run ended and was
        only removed by the end-of-run cleanup.
    detection_s
        First ``detected`` event (any src) with ``t >= t_inject``, minus ``t_inject``. When
        faults overlap, a detection at or after the *next* fault's ``t_inject`` still counts
        for this fault only if it blames one of this fault's ``target_srcs`` (otherwise a
        straggler would inherit the detection of a later kill). None: undetected.
    attribution
        ``correct``: that detection's ``suspect`` is one of ``target_srcs`` (exact match; the
        runner lists every src that is right to blame) and its ``failure_class`` equals the
        fault's, or one of the fault type's ``also_detected_as`` (a power cut on a fabric is
        silence to the survivors: ``network``). ``wrong``: another suspect or another class. ``none``: undetected, or the
        detection named no suspect. ``attribution_detail`` says what was blamed and what the
        fault was.
    last_step_before
        The furthest step of the current generation before ``t_inject``: each rank's latest
        ``step_end`` before the fault, keeping the ranks of the highest incarnation among
        them, max step. (An earlier generation's higher steps were rolled back already.)
        None when no step had completed.
    restarted / recovery_s
        *Progress without restart*: the first ``step_end`` at or after ``t_from`` (the
        revert, else ``t_inject``) in a pre-fault incarnation, by one of the fault's target
        ranks (any rank when the target names no rank), with a step greater than
        ``last_step_before``. Requiring the faulty rank itself keeps a step that other ranks
        finish while a killed rank is already gone from passing as "training continued".
        If a post-fault incarnation appears before such progress, the fault ``restarted``
        and ``recovery_s`` = first ``step_end`` with ``t >= t_inject`` of a post-fault
        incarnation − ``t_inject``. Otherwise, if there was progress, ``restarted`` is False
        and ``recovery_s`` = that step's time − ``t_inject``. Neither: None (never recovered).
    restarts_after
        Restarts between the fault and recovery: the recovering incarnation minus the pre-fault
        one of its src (a restart that itself fails counts, even when it emitted nothing);
        without recovery, the highest post-fault incarnation seen. 0 without restart.
    catchup_s
        Restart: first post-fault ``step_end`` with ``step >= last_step_before``, minus
        ``t_inject``. No restart: equal to ``recovery_s`` (that step already passes the last
        step). When no step had completed before the fault, equal to ``recovery_s``.
    resumed_from / lost_steps
        ``resumed_from`` is read from the recovering incarnation (the first post-fault one
        when none recovered), lowest rank first: ``rank_start.resumed_from`` when not None,
        else the step of its last non-skipped ``ckpt_load`` before its first step, else 0 when
        the incarnation reported ``rank_start`` (a fresh start), else the first step it
        completed − 1 (a workload that reports only progress). ``lost_steps`` =
        ``last_step_before − resumed_from`` (at least 0); 0 without a restart or when no step
        had completed before the fault; None when a restart happened but where it resumed from
        cannot be told.
    Silent corruption (faults of failure class ``corruption``: bitflip, checkpoint_bitrot)
        Detection: the first ``detected`` event of class ``corruption`` at or after
        ``t_inject`` (a crash or hang alarm in between is not the corruption noticed); the
        overlap rule above applies among corruption faults only. ``detector`` is that
        event's ``detector`` field (``nonfinite``, ``spike``, ``digest``, ``golden``,
        ``ckpt_checksum``...).
        ``sdc_detection_steps``: the detection's step (its ``step`` field, else the furthest
        step of the current generation at that moment) minus the step the corruption took
        effect (``injected_step``), at least 0; None when undetected.
        ``contaminated_checkpoints``: distinct checkpoint steps saved (``ckpt_save_start`` or
        ``ckpt_save_end``) between ``t_inject`` and the detection (the end of the run when
        undetected) whose step is at least ``injected_step``: checkpoints of corrupted state.
        Counted only for corruption of live state (a ``fault_injected`` with mechanism
        ``probe``); bit rot in a file at rest makes later checkpoints no worse, so it is 0.
        Recovery, restarts and lost steps of a corruption of live state are measured from
        its detection (``last_step_before`` is the last step before the detection: the steps
        trained on corrupted state are lost work); ``recovery_s`` and ``catchup_s`` still
        count from ``t_inject``. A file rotting at rest is measured from ``t_inject`` like
        any fault (its detection comes with the next load, inside the restart).
        Attribution of a corruption is ``correct`` when the detection names the corrupted
        rank (e.g. the only rank whose local loss went non-finite, the odd one out of a
        replica digest vote, the rank whose golden self-test failed) with class
        ``corruption``; a detection that cannot tell which rank (a spike every rank sees
        after the all-reduce, a digest mismatch between two replicas, a checkpoint checksum)
        names no suspect and is attribution ``none``: the job can roll back but does not
        know which node to exclude.

Teardown
    Events at or after ``RunInfo.t_stop`` (when trainchaos began stopping a job it had to
    stop: a timeout, an interrupt, a tool error) are caused by trainchaos, not by a fault:
    they are never detections, true or false.

False detections (``false_detections``, ``false_detection_events``)
    A ``detected`` event (before ``t_stop``) is *true* when its suspect is in the
    ``target_srcs`` of a fault injected at or before it. Otherwise it is a *consequence*
    when it falls inside a recovery already under way: after an earlier detection (true or
    false) and before the first ``step_end`` of an incarnation started after that earlier
    detection (a process torn down by its agent for the restart that the first detection
    caused is blamed by peers that see it go; that is the restart, not a new alarm).
    Otherwise it is *false*: a healthy process was blamed (a rank called hung during a
    latency fault, any detection in a fault-free run). A slow network fault (latency,
    bandwidth, a slowed service: network family, class ``slow``) explains only detections of
    class ``slow`` among its targets: a rank called hung under it is a false alarm even
    when its node is a target (chaos/metrics_network.py). A detection without a suspect is
    neither. The count and each false event (who blamed whom, why) are reported.

Run level (``RunMetrics``)
    Reference rank
        ``rank-0`` when it reports steps, else the lowest rank that does. Loss per step and
        step durations come from it.
    productive_s / goodput
        The *surviving lineage*: walk the reference rank's ``step_end`` events in time order
        keeping a stack; a step ``s`` first drops every kept step ``>= s`` (they were rolled
        back and are redone, or abandoned), then is pushed. What remains are the steps whose
        results are in the final model, each counted once, at its last completion. A step's
        duration = its ``t`` − the previous ``step_end`` of the same src and incarnation; the
        first step of an incarnation counts from that incarnation's ``rank_start``, or from
        its ``ckpt_load`` when that came later (loading a checkpoint is recovery, not training),
        or from its first event when neither exists. ``productive_s`` = sum over the lineage;
        ``goodput`` = productive_s / wall_s; ``lost_work_rank_s`` = (wall_s − productive_s) ×
        world_size.
    completed
        ``status == "completed"`` and a ``step_end`` or ``run_end`` with ``step >= steps_target``.
    restart_count / restarts / lost_steps_total
        ``restart_count``: highest incarnation seen in any event. ``restarts``: one entry per
        group restart, read from the reference rank (``rank-0``, present in every generation):
        the first event of each of its incarnations k >= 1 starts restart k; its
        ``last_step_before`` is the furthest step of the generation before it, its
        ``resumed_from`` as for a fault (above), its ``lost_steps`` the difference (>= 0),
        and its ``cause`` the latest fault injected before it (None: a restart no fault
        explains, e.g. after a false alarm). ``lost_steps_total`` sums every restart's lost
        steps, so work lost in a second, third... restart is counted too.
        Per fault, ``restarts_caused`` counts the restarts whose cause it is, and
        ``restarted`` is true when it caused any. Its ``lost_steps`` keeps the definition
        above for its own recovery restart and adds the lost steps of every further restart
        it caused (a fault that restarts the job twice loses twice); a fault whose restart
        came only after training went on (a straggler that ends in a collective timeout)
        takes that restart's lost steps. Invariants (tested): ``len(restarts) ==
        restart_count``, ``sum(restarts_caused) + unexplained == restart_count``,
        ``sum(fault lost_steps) <= lost_steps_total``.
    correctness (with a baseline)
        ``digest_match``: ``final_digest == baseline.digest``; None when not comparable (the
        final world size, from the latest ``rank_start``, differs from the baseline's, or the
        baseline has no digest); False when the run has no final digest. ``max_rel_loss_dev``:
        max of ``|loss − base| / |base|`` over the last ``LOSS_DEV_LAST_K`` steps present in
        both the surviving lineage and ``baseline.losses``; a non-finite loss makes it None and
        sets ``nonfinite_loss_step``.
    training health (``healthy``, ``health_problem``)
        Unhealthy when a loss of the surviving lineage is not finite (``first_nonfinite_step``)
        or ``run_end.weights_finite`` is false: such a run learned nothing, whatever its
        other metrics say (two runs that both end in NaN weights share a digest).
    worst-case convenience
        ``detection_s``, ``recovery_s``, ``catchup_s``, ``lost_steps``: the max over fired
        faults of the known values; ``undetected`` / ``unrecovered`` say explicitly that some
        fired fault has None there (the max then covers only the others).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from chaos.jsonsafe import jsonable as json_safe
from chaos.metrics_network import NETWORK_FAULT_TYPES, explains_detection, network_metrics
from chaos.metrics_power import power_metrics
from chaos.metrics_storage import storage_metrics

__all__ = [
    "LOSS_DEV_LAST_K",
    "Attribution",
    "BaselineInfo",
    "FaultMetrics",
    "FaultRecord",
    "RunInfo",
    "RunMetrics",
    "RunStatus",
    "compute_metrics",
    "json_safe",
]

LOSS_DEV_LAST_K = 10
"""Steps (the last ones present in both runs) over which the loss deviation is measured."""

RunStatus = Literal["completed", "hung", "failed", "interrupted", "tool_error", "aborted"]
Attribution = Literal["correct", "wrong", "none"]

Event = dict[str, Any]


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


@dataclass
class BaselineInfo:
    digest: str | None
    """Final weights digest of the fault-free run (``run_end.digest``)."""
    losses: dict[int, float]
    """Step -> loss of the fault-free run (keys may be strings when read back from JSON)."""
    world_size: int
    health_problem: str | None = None
    """Why the baseline itself is not a sound reference (non-finite loss or weights)."""


# -- outputs ----------------------------------------------------------------------------


@dataclass
class FaultMetrics:
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
    sdc_detection_steps: int | None = None
    contaminated_checkpoints: int = 0
    # power faults (chaos/metrics_power.py)
    blast_nodes: int | None = None
    blast_ranks: int | None = None
    kill_spread_ms: float | None = None
    full_size_s: float | None = None
    resumed_tier: str | None = None
    resumed_copy: str | None = None
    # network faults (chaos/metrics_network.py)
    baseline_step_s: float | None = None
    fault_step_s: float | None = None
    slowdown: float | None = None
    heal_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))


@dataclass
class RunMetrics:
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
    # checkpoints and storage (definitions: chaos/metrics_storage.py)
    ckpt_save_p50_s: float | None = None
    ckpt_save_p95_s: float | None = None
    ckpt_save_max_s: float | None = None
    ckpt_blocked_s: float = 0.0
    failed_saves: int = 0
    abandoned_saves: int = 0
    skipped_saves: int = 0
    rejected_checkpoints: int = 0
    ckpt_lost_steps: int = 0

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))


# -- helpers ----------------------------------------------------------------------------


def _rank_of(src: Any) -> int | None:
    if isinstance(src, str) and src.startswith("rank-"):
        try:
            return int(src[5:])
        except ValueError:
            return None
    return None


def _inc(e: Event) -> int:
    try:
        return int(e.get("incarnation") or 0)
    except (TypeError, ValueError):
        return 0


def _int_or_none(v: Any) -> int | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _float_or_none(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


class _Timeline:
    """The timeline, indexed once for the per-fault questions."""

    def __init__(self, events: list[Event], t_stop: float | None = None) -> None:
        self.events = sorted(events, key=lambda e: e["t"])  # stable: keeps per-file order
        self.rank_events = [e for e in self.events if _rank_of(e.get("src")) is not None]
        self.step_ends = [
            e for e in self.rank_events
            if e.get("kind") == "step_end" and _int_or_none(e.get("step")) is not None
        ]
        # Teardown by trainchaos is not a detection (see "Teardown" above).
        self.detections = [e for e in self.events if e.get("kind") == "detected"
                           and (t_stop is None or e["t"] < t_stop)]

    def first_fault_event(self, kind: str, fault_id: str) -> Event | None:
        for e in self.events:
            if e.get("kind") == kind and e.get("fault") == fault_id:
                return e
        return None

    def pre_incarnations(self, t: float) -> tuple[dict[str, int], int]:
        """Per rank src, its highest incarnation before ``t``; and the default for others."""
        pre: dict[str, int] = {}
        for e in self.rank_events:
            if e["t"] >= t:
                break
            src = e["src"]
            pre[src] = max(pre.get(src, 0), _inc(e))
        return pre, max(pre.values(), default=0)

    def last_step(self, t: float, inclusive: bool = False) -> int | None:
        """Furthest step of the current generation before ``t`` (see module docstring)."""
        latest: dict[str, Event] = {}
        for e in self.step_ends:
            if e["t"] > t or (e["t"] == t and not inclusive):
                break
            latest[e["src"]] = e
        if not latest:
            return None
        top_inc = max(_inc(e) for e in latest.values())
        return max(int(e["step"]) for e in latest.values() if _inc(e) == top_inc)


def _lowest_rank_first(events: list[Event]) -> list[Event]:
    return sorted(events, key=lambda e: (_rank_of(e["src"]), e["t"]))


def _resumed_from(tl: _Timeline, inc: int, t_inject: float, first_step: Event | None) -> int | None:
    """Where the incarnation ``inc`` resumed training from (see module docstring)."""
    starts = [
        e for e in tl.rank_events
        if e.get("kind") == "rank_start" and _inc(e) == inc and e["t"] >= t_inject
    ]
    for e in _lowest_rank_first(starts):
        resumed = _int_or_none(e.get("resumed_from"))
        if resumed is not None:
            return resumed
    loads = [
        e for e in tl.rank_events
        if e.get("kind") == "ckpt_load" and _inc(e) == inc and e["t"] >= t_inject
        # ``skipped`` lists the checkpoints a load fell back past (bit rot, a torn write);
        # only ``skipped: true`` marks a load that did not happen.
        and e.get("skipped") is not True and _int_or_none(e.get("step")) is not None
        and (first_step is None or e["t"] <= first_step["t"])
    ]
    if loads:
        lowest = min(_rank_of(e["src"]) for e in loads)
        return int([e for e in loads if _rank_of(e["src"]) == lowest][-1]["step"])
    if starts:
        return 0
    if first_step is not None:
        return max(int(first_step["step"]) - 1, 0)
    return None


# -- per fault --------------------------------------------------------------------------


def _fault_metrics(
    rec: FaultRecord, tl: _Timeline, run: RunInfo, t_inject: float | None, next_t: float | None
) -> FaultMetrics:
    fm = FaultMetrics(
        fault_id=rec.fault_id, type=rec.type, failure_class=rec.failure_class,
        target_srcs=list(rec.target_srcs), fired=t_inject is not None, skipped=rec.skipped,
        t_inject=t_inject, planned_step=rec.planned_step,
        injected_step=rec.planned_step,
    )
    if t_inject is None:
        fm.attribution_detail = "never fired"
        return fm
    injected = tl.first_fault_event("fault_injected", rec.fault_id)
    if injected is not None and _int_or_none(injected.get("step")) is not None:
        fm.injected_step = int(injected["step"])

    t_revert = rec.t_revert
    if t_revert is None:
        reverted = tl.first_fault_event("fault_reverted", rec.fault_id)
        t_revert = reverted["t"] if reverted is not None else None
    if t_revert is not None and (t_revert >= run.t_end or t_revert < t_inject):
        t_revert = None
    fm.t_revert = t_revert
    targets = set(rec.target_srcs)

    # detection and attribution
    corruption = rec.failure_class == "corruption"
    detection = None
    for e in tl.detections:
        if e["t"] < t_inject:
            continue
        if corruption and e.get("failure_class") != "corruption":
            continue
        if next_t is not None and e["t"] >= next_t and e.get("suspect") not in targets:
            continue
        detection = e
        break
    if detection is None:
        fm.attribution, fm.attribution_detail = "none", "undetected"
    else:
        fm.detection_s = detection["t"] - t_inject
        fm.detected_by = detection.get("by") or detection.get("src")
        fm.detection_reason = detection.get("reason")
        fm.detected_suspect = suspect = detection.get("suspect")
        fm.detected_class = cls = detection.get("failure_class")
        fm.detector = detection.get("detector")
        was = f"fault was {', '.join(rec.target_srcs) or 'the job'} ({rec.failure_class})"
        if suspect is None:
            fm.attribution = "none"
            fm.attribution_detail = f"detected by {fm.detected_by} without naming a suspect; {was}"
        else:
            right = suspect in targets and (cls == rec.failure_class or cls in rec.also_classes)
            fm.attribution = "correct" if right else "wrong"
            fm.attribution_detail = f"blamed {suspect} ({cls or 'no class'}), {was}"

    # recovery: from the fault, or for a corruption from its detection (until then the job
    # trained on, unaware: that is not recovery, and what it trained is what gets lost)
    live = injected is not None and injected.get("mechanism") == "probe"
    t_ref = detection["t"] if corruption and live and detection is not None else t_inject
    last_before = tl.last_step(t_ref)
    fm.last_step_before = last_before
    pre, default_inc = tl.pre_incarnations(t_ref)

    def post_fault(e: Event) -> bool:
        return _inc(e) > pre.get(e["src"], default_inc)

    first_new = next((e for e in tl.rank_events if e["t"] >= t_ref and post_fault(e)), None)
    target_ranks = {s for s in targets if _rank_of(s) is not None}
    t_from = t_revert if t_revert is not None else t_ref
    progress = next(
        (
            e for e in tl.step_ends
            if e["t"] >= t_from and not post_fault(e)
            and (last_before is None or int(e["step"]) > last_before)
            and (not target_ranks or e["src"] in target_ranks)
        ),
        None,
    )
    if first_new is not None and (progress is None or first_new["t"] < progress["t"]):
        fm.restarted = True
        post_steps = [e for e in tl.step_ends if e["t"] >= t_ref and post_fault(e)]
        recovering = post_steps[0] if post_steps else None
        if recovering is not None:
            fm.recovery_s = recovering["t"] - t_inject
            fm.restarts_after = _inc(recovering) - pre.get(recovering["src"], default_inc)
            resume_inc = _inc(recovering)
            caught = next(
                (e for e in post_steps if last_before is None or int(e["step"]) >= last_before),
                None,
            )
            fm.catchup_s = caught["t"] - t_inject if caught is not None else None
        else:
            post = [e for e in tl.rank_events if e["t"] >= t_ref and post_fault(e)]
            fm.restarts_after = max(_inc(e) - pre.get(e["src"], default_inc) for e in post)
            resume_inc = _inc(first_new)
        fm.resumed_from = _resumed_from(tl, resume_inc, t_ref, recovering)
        if last_before is None:
            fm.lost_steps = 0
        elif fm.resumed_from is not None:
            fm.lost_steps = max(last_before - fm.resumed_from, 0)
    else:
        fm.restarted = False
        fm.lost_steps = 0
        if progress is not None:
            fm.recovery_s = fm.catchup_s = progress["t"] - t_inject

    if corruption:
        _sdc_metrics(fm, tl, run, t_inject, detection, injected, tl.last_step(t_inject))
    if injected is not None and "kill_spread_ms" in (injected.get("details") or {}):
        power_metrics(fm, tl.rank_events, injected["details"], t_inject, run.world_size)
    if rec.type in NETWORK_FAULT_TYPES:
        network_metrics(fm, tl.rank_events, run.world_size, run.t_end, run.t_stop)
    return fm


def _sdc_metrics(fm: FaultMetrics, tl: _Timeline, run: RunInfo, t_inject: float,
                 detection: Event | None, injected: Event | None, last_before: int | None) -> None:
    """sdc_detection_steps and contaminated_checkpoints (see the module docstring)."""
    corrupted_at = fm.injected_step if fm.injected_step is not None else (last_before or 0) + 1
    t_detect = detection["t"] if detection is not None else run.t_end
    if detection is not None:
        at_detect = _int_or_none(detection.get("step"))
        if at_detect is None:
            at_detect = tl.last_step(t_detect, inclusive=True)
        if at_detect is not None:
            fm.sdc_detection_steps = max(at_detect - corrupted_at, 0)
    if injected is None or injected.get("mechanism") != "probe":
        return  # a file rotting at rest: checkpoints written meanwhile are clean
    fm.contaminated_checkpoints = len({
        int(e["step"]) for e in tl.rank_events
        if e.get("kind") in ("ckpt_save_start", "ckpt_save_end") and t_inject <= e["t"] <= t_detect
        and _int_or_none(e.get("step")) is not None and int(e["step"]) >= corrupted_at
    })


# -- run level --------------------------------------------------------------------------


def _lineage(tl: _Timeline) -> list[tuple[int, float, float | None]]:
    """The surviving steps of the reference rank: (step, duration_s, loss), ascending."""
    stepping = {e["src"] for e in tl.step_ends}
    if not stepping:
        return []
    ref = "rank-0" if "rank-0" in stepping else min(stepping, key=_rank_of)
    anchor: dict[int, float] = {}
    last_step_t: dict[int, float] = {}
    stack: list[tuple[int, float, float | None]] = []
    for e in tl.rank_events:
        if e["src"] != ref:
            continue
        inc, kind = _inc(e), e.get("kind")
        anchor.setdefault(inc, e["t"])
        if kind == "rank_start":
            anchor[inc] = e["t"]
        elif kind == "ckpt_load" and inc not in last_step_t:
            anchor[inc] = max(anchor[inc], e["t"])
        elif kind == "step_end" and _int_or_none(e.get("step")) is not None:
            step = int(e["step"])
            start = last_step_t.get(inc, anchor[inc])
            last_step_t[inc] = e["t"]
            while stack and stack[-1][0] >= step:
                stack.pop()
            stack.append((step, max(e["t"] - start, 0.0), _float_or_none(e.get("loss"))))
    return stack


def _worst(values: list[Any]) -> Any:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def compute_metrics(
    events: list[Event],
    faults: list[FaultRecord],
    run: RunInfo,
    baseline: BaselineInfo | None = None,
) -> RunMetrics:
    """Every metric of one run from its merged timeline (definitions: module docstring)."""
    tl = _Timeline(events, run.t_stop)

    t_injects: list[float | None] = []
    for rec in faults:
        t = rec.t_inject
        if t is None:
            injected = tl.first_fault_event("fault_injected", rec.fault_id)
            t = injected["t"] if injected is not None else None
        t_injects.append(t)
    fault_metrics = []
    for rec, t in zip(faults, t_injects, strict=True):
        # A corruption is only ever noticed by a corruption detector: only another
        # corruption fault can take its detection.
        later = [u for other, u in zip(faults, t_injects, strict=True)
                 if u is not None and t is not None and u > t
                 and (rec.failure_class != "corruption" or other.failure_class == "corruption")]
        fault_metrics.append(_fault_metrics(rec, tl, run, t, min(later, default=None)))

    rank_starts = [e for e in tl.rank_events if e.get("kind") == "rank_start"]
    final_world_size = run.world_size
    for e in reversed(rank_starts):
        ws = _int_or_none(e.get("world_size"))
        if ws is not None:
            final_world_size = ws
            break

    run_ends = [e for e in tl.events if e.get("kind") == "run_end"]
    run_end = run_ends[-1] if run_ends else None
    lineage = _lineage(tl)
    final_step = None
    final_loss = None
    if run_end is not None and _int_or_none(run_end.get("step")) is not None:
        final_step = int(run_end["step"])
        final_loss = _float_or_none(run_end.get("loss"))
    elif lineage:
        final_step, _, final_loss = lineage[-1]
    reached = [int(e["step"]) for e in tl.step_ends]
    if final_step is not None:
        reached.append(final_step)
    completed = run.status == "completed" and max(reached, default=-1) >= run.steps_target

    wall_s = run.t_end - run.t_start
    productive_s = sum(d for _, d, _ in lineage)
    fired = [fm for fm in fault_metrics if fm.fired]
    m = RunMetrics(
        status=run.status, t_start=run.t_start, t_end=run.t_end, wall_s=wall_s,
        steps_target=run.steps_target, world_size=run.world_size,
        final_world_size=final_world_size, timeout_s=run.timeout_s, completed=completed,
        final_step=final_step, final_digest=run_end.get("digest") if run_end else None,
        final_loss=final_loss,
        restart_count=max((_inc(e) for e in tl.events), default=0),
        productive_s=productive_s,
        goodput=productive_s / wall_s if wall_s > 0 else None,
        lost_work_rank_s=(wall_s - productive_s) * run.world_size if wall_s > 0 else None,
        faults=fault_metrics, faults_fired=len(fired),
        detection_s=_worst([fm.detection_s for fm in fired]),
        recovery_s=_worst([fm.recovery_s for fm in fired]),
        catchup_s=_worst([fm.catchup_s for fm in fired]),
        lost_steps=_worst([fm.lost_steps for fm in fired]),
        undetected=any(fm.detection_s is None for fm in fired),
        unrecovered=any(fm.recovery_s is None for fm in fired),
    )
    _account_restarts(m, tl, faults, t_injects)
    if fired:
        m.lost_steps = _worst([fm.lost_steps for fm in fired])
    sdc = [fm for fm in fired if fm.failure_class == "corruption"]
    if sdc:
        m.sdc_detection_steps = _worst([fm.sdc_detection_steps for fm in sdc])
        m.contaminated_checkpoints = max(fm.contaminated_checkpoints for fm in sdc)
    _detector_overhead(m, run_end)
    _check_health(m, lineage, run_end)
    m.false_detection_events = _false_detections(tl, faults, t_injects)
    m.false_detections = len(m.false_detection_events)
    for key, value in storage_metrics(tl.events).items():
        setattr(m, key, value)
    if baseline is not None:
        _compare_to_baseline(m, baseline, lineage)
    return m


def _account_restarts(m: RunMetrics, tl: _Timeline, faults: list[FaultRecord],
                      t_injects: list[float | None]) -> None:
    """Every group restart, its lost steps and the fault that caused it (module docstring)."""
    ref = [e for e in tl.rank_events if e["src"] == "rank-0"]
    first_of: dict[int, Event] = {}
    for e in ref:
        first_of.setdefault(_inc(e), e)
    by_fault = {fm.fault_id: fm for fm in m.faults}
    fired = sorted((t, rec.fault_id) for rec, t in zip(faults, t_injects, strict=True) if t is not None)
    prev_resumed: int | None = None
    for inc in sorted(k for k in first_of if k > 0):
        t = first_of[inc]["t"]
        first_step = next((e for e in tl.step_ends if e["src"] == "rank-0" and _inc(e) == inc), None)
        # What the generation before reached: its own steps, else where it had resumed from
        # (a restart that fails again before a step loses nothing a second time).
        reached = [int(e["step"]) for e in tl.step_ends if _inc(e) == inc - 1 and e["t"] < t]
        last = max(reached) if reached else prev_resumed if inc > 1 else tl.last_step(t)
        resumed = _resumed_from(tl, inc, t, first_step)
        prev_resumed = resumed if resumed is not None else last
        lost = 0 if last is None else (max(last - resumed, 0) if resumed is not None else None)
        cause = next((fid for t_fault, fid in reversed(fired) if t_fault <= t), None)
        m.restarts.append({"t": t, "incarnation": inc, "last_step_before": last,
                           "resumed_from": resumed, "lost_steps": lost, "cause": cause})
        if cause is None:
            m.unexplained_restarts += 1
            continue
        fm = by_fault[cause]
        fm.restarts_caused += 1
        # The fault's own recovery restart keeps its lost steps as defined per fault, above.
        own_recovery = fm.restarts_caused == 1 and fm.restarted
        if not own_recovery and lost is not None:
            fm.lost_steps = lost if fm.restarts_caused == 1 else (fm.lost_steps or 0) + lost
        fm.restarted = True
    m.lost_steps_total = sum(r["lost_steps"] or 0 for r in m.restarts)


def _detector_overhead(m: RunMetrics, run_end: Event | None) -> None:
    if run_end is None or not isinstance(run_end.get("detector_s"), dict):
        return
    seconds = {str(k): v for k, v in run_end["detector_s"].items() if _float_or_none(v) is not None}
    m.detector_seconds = seconds
    train_s = _float_or_none(run_end.get("train_s"))
    spent = sum(float(v) for v in seconds.values())
    if train_s is not None and train_s > spent:
        m.detector_overhead_pct = 100.0 * spent / (train_s - spent)


def _check_health(m: RunMetrics, lineage: list[tuple[int, float, float | None]],
                  run_end: Event | None) -> None:
    bad = next((step for step, _, loss in lineage if loss is not None and not math.isfinite(loss)), None)
    if bad is not None:
        m.first_nonfinite_step = bad
        m.healthy, m.health_problem = False, f"loss is not finite from step {bad} on"
    elif run_end is not None and run_end.get("weights_finite") is False:
        m.healthy, m.health_problem = False, "the final weights hold NaN or Inf"


def _false_detections(tl: _Timeline, faults: list[FaultRecord],
                      t_injects: list[float | None]) -> list[dict[str, Any]]:
    """Detections that blamed a process no fault hit (definition: module docstring)."""
    fired = [(t, set(rec.target_srcs), rec) for rec, t in zip(faults, t_injects, strict=True) if t is not None]
    false: list[dict[str, Any]] = []
    recovering_until: float | None = None  # end of the recovery the last alarm started
    for e in tl.detections:
        suspect = e.get("suspect")
        consequence = recovering_until is not None and e["t"] < recovering_until
        # A later alarm's recovery ends at the first step of an incarnation started after it.
        if not consequence:
            pre, default_inc = tl.pre_incarnations(e["t"])
            restart_step = next((s for s in tl.step_ends if s["t"] > e["t"]
                                 and _inc(s) > pre.get(s["src"], default_inc)), None)
            recovering_until = restart_step["t"] if restart_step is not None else math.inf
        if suspect is None or consequence:
            continue
        # A slow network blamed for a failure is a false alarm (chaos/metrics_network.py).
        if any(t <= e["t"] and suspect in srcs
               and explains_detection(rec.type, rec.failure_class, e.get("failure_class"))
               for t, srcs, rec in fired):
            continue
        false.append({"t": e["t"], "by": e.get("by") or e.get("src"), "suspect": suspect,
                      "failure_class": e.get("failure_class"), "reason": e.get("reason")})
    return false


def _compare_to_baseline(
    m: RunMetrics, baseline: BaselineInfo, lineage: list[tuple[int, float, float | None]]
) -> None:
    m.has_baseline = True
    m.baseline_health_problem = baseline.health_problem
    m.baseline_digest = baseline.digest
    m.baseline_world_size = baseline.world_size
    m.world_size_changed = m.final_world_size != baseline.world_size
    if baseline.digest is None or m.world_size_changed:
        m.digest_match = None
    else:
        m.digest_match = m.final_digest is not None and m.final_digest == baseline.digest

    base = {}
    for k, v in baseline.losses.items():
        step, loss = _int_or_none(k), _float_or_none(v)
        if step is not None and loss is not None and math.isfinite(loss):
            base[step] = loss
    ours = {step: loss for step, _, loss in lineage if loss is not None}
    common = sorted(set(ours) & set(base))[-LOSS_DEV_LAST_K:]
    m.loss_dev_steps = common
    if not common:
        return
    devs = []
    for step in common:
        if not math.isfinite(ours[step]):
            m.nonfinite_loss_step = step
            m.max_rel_loss_dev = None
            return
        devs.append(abs(ours[step] - base[step]) / max(abs(base[step]), 1e-12))
    m.max_rel_loss_dev = max(devs)
