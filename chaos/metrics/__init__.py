"""Timeline -> metrics: detection, recovery, catch-up, lost steps, goodput, correctness.

Pure logic over the merged event timeline (``chaos.events``); no I/O, stdlib only. This
package is the executable form of DESIGN.md, "Metric definitions". Its parts: ``records``
(inputs and outputs), ``timeline`` (the indexed events), ``per_fault`` and ``per_run`` (the
engine), ``catalogue`` (one ``MetricSpec`` per metric: label, unit, tolerance, target) and
``family`` with ``families/`` (what network, power, storage and silent-corruption faults
add, registered rather than named by the engine). The exact choices, where the design leaves
room, are:

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
    when its node is a target (chaos/metrics/families/network.py). A detection without a suspect is
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

from chaos.metrics.family import MetricFamily
from chaos.metrics.per_run import LOSS_DEV_LAST_K, compute_metrics
from chaos.metrics.records import (
    Attribution,
    BaselineInfo,
    FaultMetrics,
    FaultRecord,
    RunInfo,
    RunMetrics,
    RunStatus,
    json_safe,
)
from chaos.metrics.registry import register_family
from chaos.metrics.spec import MetricSpec, Tolerance

__all__ = [
    "LOSS_DEV_LAST_K",
    "Attribution",
    "BaselineInfo",
    "FaultMetrics",
    "FaultRecord",
    "MetricFamily",
    "MetricSpec",
    "RunInfo",
    "RunMetrics",
    "RunStatus",
    "Tolerance",
    "compute_metrics",
    "json_safe",
    "register_family",
]
