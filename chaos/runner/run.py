"""One run of one scenario: start the cluster, fire the plan, revert everything, measure.

The loop looks at new events, due triggers, due reverts, agent exits and the timeout,
woken by a rank holding at a step, by a write to the events or logs while a trigger waits
for one (``chaos.runner.wakeup``), by what is due next, and at least every 50 ms. An external
fault planned at a step finds its targeted ranks holding there until the loop confirms it
is in effect (``chaos.probe.hold``). Whatever happens (a target missed, an exception,
SIGINT/SIGTERM), the ``finally`` reverts every applied fault, stops every process of the run
and releases its resources in reverse order, then the journal is written.

A failure of trainchaos itself (a fault whose ``inject`` raised, a target with no live
process at injection time, a failed revert or teardown, a write of its own fault journal or
events that failed, ``chaos.runner.output``, a crash of this runner) ends the run
as ``tool_error``: its journal says what failed and it gets no verdict, because nothing was
learned about the training stack.

The runner holds what it composes: ``chaos.runner.intake`` (the event intake, the clock the
triggers read), ``chaos.runner.state`` (each fault's state) and a registry of run handlers
(``chaos.runner.handlers``: what watches the run, such as the checkpoint freshness reader,
registered by whoever builds the run); ``chaos.runner.measure`` measures the finished run.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import sys
import time
import traceback
import uuid
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, cast

from chaos import __version__, contract
from chaos.cluster import lookup_backend
from chaos.cluster.base import InjectionContext, RunSpec
from chaos.errors import ChaosError, ToolError
from chaos.faults.family import planned_mounts
from chaos.metrics import BaselineInfo
from chaos.metrics.families.data import baseline_samples
from chaos.metrics.families.freshness import freshness_metrics
from chaos.model.scenario import Scenario
from chaos.model.targets import ResolvedTarget, TargetUnavailable
from chaos.model.triggers import form_of
from chaos.probe import hold
from chaos.report import write_run_reports
from chaos.runfiles.events import Event, read_events
from chaos.runfiles.journal_writer import JournalWriteError, JournalWriter
from chaos.runfiles.record import (
    Check,
    MetricsRecord,
    RunRecord,
    RunStart,
    RunStatus,
    build_run_record,
    write_run_start,
)
from chaos.runfiles.resources import RunResources
from chaos.runfiles.rollback import FaultJournal, register_run, unregister_run
from chaos.runfiles.rundir import RunDir, RunDirLock
from chaos.runfiles.telemetry import EventTailer
from chaos.runner.freshness import FreshnessHandler
from chaos.runner.handlers import HandlerRegistry, RunHandler
from chaos.runner.intake import EventIntake
from chaos.runner.lifecycle import FaultLifecycle, Injection
from chaos.runner.measure import measure
from chaos.runner.output import ControllerEvents, describe_os_error
from chaos.runner.plan import make_plan, plan_seed, probe_instructions
from chaos.runner.state import FaultState, RunProgress
from chaos.runner.verdict import judge_twin
from chaos.runner.wakeup import Wakeup
from chaos.util import interrupts
from chaos.util.interrupts import Interrupted
from chaos.workload import workload_for

__all__ = ["run_baseline", "run_scenario_once", "twin_reference"]

POLL_S = 0.05
# The loop's fastest pace when woken by writes: a burst of events is read in one look.
_MIN_GAP_S = 0.002
# How long a step trigger whose first targeted rank reached the step waits for the others.
_PEERS_AT_STEP_S = 1.0
# A run that made no step progress for this long before its timeout is "hung", not slow.
_HUNG_QUIET_S = 20.0
# A fault due within about this long (chaos.model.triggers ``near``) has its journal ``apply``
# written now (FaultLifecycle.arm): its disk sync, 100-300 ms on a busy shared disk, is
# over before the fault is due.
_ARM_AHEAD_S = 1.0


def _versions() -> dict[str, str]:
    # The installed distribution's version, not ``torch.__version__``: importing torch costs
    # the controller ~2 CPU-seconds per run it records, on a host whose cores train the job.
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "not installed"
    return {"trainchaos": __version__, "torch": torch_version, "python": sys.version.split()[0],
            "platform": platform.platform()}


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class _Runner:
    def __init__(self, scenario: Scenario, run_dir: str, seed: int, with_faults: bool,
                 progress: RunProgress | None, repeat_index: int = 0,
                 baseline_run: dict[str, Any] | None = None,
                 handlers: list[RunHandler] | None = None, record_digests: bool = False) -> None:
        self.scenario = scenario
        self.rundir = RunDir.of(run_dir)
        self.run_dir = self.rundir.path
        self.repeat_index = repeat_index
        self.baseline_run = baseline_run
        self.seed = seed
        self.progress = progress or RunProgress()
        self.run_id = f"trainchaos-{uuid.uuid4().hex[:10]}"
        self.with_faults = with_faults
        self.record_digests = record_digests or not with_faults
        self.workload = workload_for(scenario.workload)
        self.plan_seed = plan_seed(seed, repeat_index)
        self.plan = make_plan(scenario, self.plan_seed) if with_faults else []
        self.states = [FaultState(p) for p in self.plan if p.fires and not p.fault.in_process]
        # The occurrence before each of a repeated trigger (poisson): they fire in order.
        self.previous: dict[int, FaultState] = {}
        last: dict[int, FaultState] = {}
        for st in self.states:
            if st.planned.spec.index in last:
                self.previous[id(st)] = last[st.planned.spec.index]
            last[st.planned.spec.index] = st
        self.intake = EventIntake()
        """The run as its events show it; the clock the triggers read."""
        self.handlers = HandlerRegistry(handlers)
        self.status = "running"
        self.error: str | None = None
        self.tool_errors: list[str] = []
        self.t_stop: float | None = None
        self.end_reason: str | None = None
        """Why a handler ended the run before the job ended (``RunHandler.end``)."""
        self._lifecycle: FaultLifecycle | None = None
        self.lock: RunDirLock | None = None
        self._preparing = True
        self._output_failures: set[int] = set()

    def _tool_error(self, message: str) -> None:
        self.tool_errors.append(message)
        self.status = "tool_error"

    def _take(self, events: list[Event]) -> None:
        """Each new event: into the intake, to the handlers, then what it makes the runner do."""
        for ev in events:
            max_step = self.intake.max_step
            self.intake.take(ev)
            self.handlers.event(ev)
            kind = ev.get("kind")
            if kind == "rank_start":
                self.cluster.note_event(ev)
            elif kind == "step_end" and self.intake.max_step > max_step:
                self.progress.step(self.intake.max_step, self.steps_target)
            elif kind == "fault_injected" and ev.get("src") != "injector":
                self.progress.note(f"{ev.get('fault')} injected in-process at step {ev.get('step')} on {ev.get('src')}")
            elif kind == "fault_error":
                # An in-process fault the probe could not apply (a tensor name a command's
                # model does not have): trainchaos failed to inject, the job is not to blame.
                self._tool_error(f"{ev.get('fault')} on {ev.get('src')}: {ev.get('error')}")
            elif kind == "detected":
                suspect = ev.get("suspect")
                whom = f" of {suspect}" if suspect is not None else " (no suspect named)"
                self.progress.note(f"detected by {ev.get('by')}: {ev.get('failure_class')}{whom}")

    # -- triggers -------------------------------------------------------------------------
    def _due(self, st: FaultState) -> bool:
        previous = self.previous.get(id(st))
        if previous is not None and not previous.fired:
            return False
        trigger = st.planned.spec.trigger
        ranks = st.planned.fault.target.ranks
        if not form_of(trigger).due(trigger, st.planned.offset_s, ranks, self.intake):
            return False
        if not form_of(trigger).exact_step or len(ranks) < 2 \
                or min(self.intake.step_by_rank.get(r, 0) for r in ranks) >= (trigger.at_step or 0):
            return True
        # Every targeted rank ends the step (and holds there, chaos.probe.hold) before the fault
        # lands; they end it together, so one that has not reported it yet is waited for
        # briefly, never forever (a rank gone, stalled or far behind).
        if st.step_reached is None:
            st.step_reached = time.monotonic()
        return time.monotonic() - st.step_reached >= _PEERS_AT_STEP_S

    def _wait_s(self, deadline: float) -> tuple[float, set[str]]:
        """How long the loop may wait, and which writes wake it (``chaos.runner.wakeup`` groups):
        a rank holding at a step always; the node logs while a step trigger waits (a
        workload without the probe reports its steps there, and cannot hold); the events
        while another trigger waits for its reference (the first step, its event) or a
        deferred fault for its target to start again."""
        wait = min(POLL_S, deadline - time.monotonic())
        groups = {"holds"}
        for st in self.states:
            previous = self.previous.get(id(st))
            if st.fired or (previous is not None and not previous.fired):
                continue
            trigger = st.planned.spec.trigger
            form = form_of(trigger)
            t_due = form.planned_time(trigger, st.planned.offset_s, self.intake)
            if form.exact_step:
                groups.add("logs")
            elif t_due is None or st.deferred_since is not None:
                groups.add("events")
            if t_due is not None and st.deferred_since is None:
                wait = min(wait, t_due - time.time())
            if st.step_reached is not None:
                wait = min(wait, st.step_reached + _PEERS_AT_STEP_S - time.monotonic())
        for t_revert, _ in self.ctx.scheduled_reverts:
            wait = min(wait, t_revert - time.monotonic())
        return max(wait, 0.0), groups

    def _arm_ahead(self) -> None:
        """Journal the ``apply`` of each fault due soon, while nothing is due."""
        for st in self.states:
            trigger, offset_s = st.planned.spec.trigger, st.planned.offset_s
            if not st.fired and st.planned.fault_id not in self.lifecycle.armed and \
                    form_of(trigger).near(trigger, offset_s, st.planned.fault.target.ranks, self.intake, _ARM_AHEAD_S):
                self.lifecycle.arm(st.planned.fault, form_of(trigger).planned_time(trigger, offset_s, self.intake))

    def _fire_due(self) -> None:
        for st in self.states:
            if not st.fired and self.status == "running" and self._due(st):
                self._inject(st)

    @property
    def lifecycle(self) -> FaultLifecycle:
        """The faults' lifecycle over this run's context and fault journal."""
        if self._lifecycle is None:
            self._lifecycle = FaultLifecycle(self.ctx, self.fault_journal)
        return self._lifecycle

    def _confirm(self, st: FaultState, outcome: str) -> None:
        """Release the ranks holding at the fault's step (``chaos.probe.hold``): it is in effect, or
        it is never coming (failed, unresolved, the run stopping)."""
        if form_of(st.planned.spec.trigger).exact_step:
            hold.confirm(self.rundir.holds, st.planned.fault_id, outcome)

    def _inject(self, st: FaultState) -> None:
        try:
            self._inject_fault(st)
        finally:
            if st.fired:
                self._confirm(st, "failed" if st.error else "in_effect")

    def _inject_fault(self, st: FaultState) -> None:
        fault = st.planned.fault
        try:
            resolved: ResolvedTarget | None = self.lifecycle.resolve(fault, self.cluster)
            problem: ChaosError | None = None
        except TargetUnavailable as exc:
            if form_of(st.planned.spec.trigger).waits_for_target:
                # A failure cannot strike a process that does not exist (chaos.model.triggers).
                if st.deferred_since is None:
                    st.deferred_since = time.time()
                    self.progress.note(f"{fault.fault_id} waits for its target: {exc}")
                return
            resolved, problem = None, exc
        except ChaosError as exc:
            resolved, problem = None, exc
        st.fired = True
        trigger = st.planned.spec.trigger
        st.t_planned = form_of(trigger).planned_time(trigger, st.planned.offset_s, self.intake)
        st.step_seen_at_inject = self.intake.step_seen(fault.target.ranks)
        if resolved is None:
            st.unresolved = str(problem)
            self._tool_error(f"{fault.fault_id}: {problem}")
            self.lifecycle.never_applied(fault, str(problem))
            return
        # On record before the inject: a signal that waits for it interrupts at its end.
        st.injection = Injection(fault, resolved, deferred_since=st.deferred_since)
        self.lifecycle.inject(st.injection, step=st.step_seen_at_inject, mechanism="injector")
        self.handlers.fault_injected(st.injection)
        if st.injection.inject_error:
            self._tool_error(f"{fault.fault_id}: {st.error}")
        self.progress.note(f"{fault.fault_id} injected on {fault.target.describe()} at step {st.step_seen_at_inject}")

    def _reverted(self, injections: list[Injection]) -> None:
        for injection in injections:
            self.handlers.fault_reverted(injection)
            if injection.revert_error:
                self._tool_error(f"{injection.fault.fault_id}: revert failed: {injection.revert_error}")

    # -- the run --------------------------------------------------------------------------
    def run(self) -> tuple[list[Event], float]:
        """Run the job to its end; returns its events and the time it ended. The run
        directory is this controller's (``RunDirLock``) until ``release``."""
        try:
            return self._run()
        except OSError as exc:
            if not self._preparing:
                raise
            # Before anything started (once it has, a failure is the run's record's):
            # nothing to revert or stop, and nothing was learned about the training stack.
            raise ToolError(f"the run could not start: {describe_os_error(exc)}") from exc

    def release(self) -> None:
        """The run directory is free for another controller (its record is written)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def _run(self) -> tuple[list[Event], float]:
        # Before anything of the directory is touched: a second controller given the same
        # run directory must not delete the first one's files under its feet.
        self.lock = RunDirLock.acquire(self.run_dir, self.run_id)
        for name in os.listdir(self.run_dir):  # what an earlier run left (not the lock)
            path = os.path.join(self.run_dir, name)
            if path == self.lock.path:
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        events_dir = self.rundir.events
        os.makedirs(events_dir)
        launch = self.workload.launch(self.run_dir, self.seed)
        self.steps_target = launch.steps_target
        probe_file = self.rundir.probe_faults
        with open(probe_file, "w", encoding="utf-8") as fh:
            json.dump(probe_instructions(self.plan), fh, indent=1)
        backend = self.scenario.backend
        self.resources = RunResources(self.run_id, self.run_dir)
        extra_env = dict(launch.env)
        if self.record_digests:  # the twin: its state at every step is the freshness reference
            extra_env[contract.RECORD_DIGESTS_ENV] = "1"
        spec = RunSpec(run_id=self.run_id, run_dir=self.run_dir, topology=self.scenario.topology,
                       worker_argv=launch.worker_argv, probe_faults_file=probe_file,
                       tee_worker_output=launch.launcher.tee_output, options=dict(backend.options),
                       extra_env=extra_env, launcher=launch.launcher,
                       mounts=planned_mounts(_scenario_dict(self.scenario), self.workload.storage(), self.run_dir))
        self.cluster = lookup_backend(backend.name)(spec, self.resources)
        log_progress = self.workload.progress(events_dir)
        topology = self.scenario.topology
        log_progress.global_rank = lambda node, rank: launch.launcher.global_rank(node, rank, topology)
        # Synced from a thread of its own: only an ``apply`` is waited for, and that is
        # written ahead of the fault's time where it is known (_arm_ahead).
        self.journal_writer = JournalWriter(self.rundir.fault_journal)
        self.fault_journal = FaultJournal(self.rundir.fault_journal, self.journal_writer)
        # Its writes never raise past a revert (chaos.runner.output); _output_failed reads them.
        self.injector = injector = ControllerEvents(events_dir, "injector", 0)
        self.ctx = InjectionContext(self.run_dir, self.cluster, injector, self.resources)
        tailer = EventTailer(events_dir)
        wakeup = Wakeup(POLL_S, _MIN_GAP_S)
        # What the run record needs that the events do not hold, on disk before anything
        # starts: if this controller is SIGKILLed, ``trainchaos cleanup`` builds the record from it.
        self.start = RunStart.model_validate({
            "run_id": self.run_id, "scenario": _scenario_dict(self.scenario), "seed": self.seed,
            "plan_seed": self.plan_seed, "plan": [p.to_dict() for p in self.plan],
            "with_faults": self.with_faults, "started_at": _now_iso(), "t_start": time.time(),
            "steps_target": self.steps_target, "world_size": self.scenario.topology.world_size,
            "timeout_s": self.scenario.timeout_s,
            "backend": {"name": backend.name, "options": dict(backend.options)},
            "repeat_index": self.repeat_index, "baseline": self.baseline_run,
            "rank_launch": "warm" if launch.launcher.warm_start else "cold",
        })
        write_run_start(self.rundir, self.start)
        self.handlers.run_started(self.start, self.ctx)
        self._preparing = False
        deadline = time.monotonic() + self.scenario.timeout_s
        try:
            register_run(self.run_id, self.run_dir)
            injector.emit("job_start", nodes=self.scenario.topology.nodes,
                          ranks_per_node=self.scenario.topology.ranks_per_node,
                          spares=self.scenario.topology.spares, backend=backend.name, run_id=self.run_id)
            # What the job needs beside its nodes (a torchft lighthouse), up before any node.
            for kind, resource in launch.resources:
                self.resources.acquire(kind, {"name": f"{self.run_id}-{kind}", **resource})
            self.cluster.start()
            os.makedirs(self.rundir.holds, exist_ok=True)
            wakeup.watch(self.rundir.holds, "holds")
            wakeup.watch(events_dir, "events")
            while self.status == "running":
                # What is due at the time the wait ended on goes first, before reading what
                # the job wrote meanwhile; then what that reading made due.
                self._fire_due()
                self._take(tailer.poll())
                logs = self.cluster.node_logs()
                self._take(log_progress.poll(logs))
                self._fire_due()
                self._reverted(self.lifecycle.due_reverts())
                self._output_failed()
                if self.status != "running":
                    break  # a tool error: stop here, nothing more can be learned
                if self._ended_by_handler():
                    break
                if self._job_ended():
                    break
                if time.monotonic() >= deadline:
                    quiet = time.monotonic() - self.intake.t_last_progress
                    self.status = "hung" if quiet >= min(_HUNG_QUIET_S, self.scenario.timeout_s / 2) else "timeout"
                    self.error = (f"no step progress for {quiet:.0f} s; stopped at timeout_s={self.scenario.timeout_s:g}"
                                  if self.status == "hung" else f"still running at timeout_s={self.scenario.timeout_s:g}")
                    break
                for log in logs.values():
                    wakeup.watch(os.path.dirname(log), "logs")
                self._arm_ahead()
                wakeup.wait(*self._wait_s(deadline))
        except (Interrupted, KeyboardInterrupt):
            self.status = "interrupted"
            self.error = "interrupted by signal"
        except JournalWriteError as exc:  # an apply not on disk: its fault was never touched
            self._tool_error(f"fault journal not written: {exc}")
        except Exception as exc:  # the runner itself failed: still revert, tear down, journal
            what = describe_os_error(exc) if isinstance(exc, OSError) else str(exc)
            self._tool_error(f"runner crashed: {type(exc).__name__}: {what}")
            self.traceback = traceback.format_exc()
        finally:
            # Released by run_scenario_once once the journal is written.
            interrupts.hold()
            # Whatever the job reports from here on is caused by trainchaos stopping it.
            self.t_stop = time.time()
            self.ctx.stopping = True
            injector.emit("job_stop", status=self.status,
                          **({"reason": self.end_reason} if self.end_reason is not None else {}))
            self._teardown()
            try:
                self.fault_journal.close()
            except OSError as exc:
                self._tool_error(f"fault journal not written: {exc}")
            self.handlers.run_stopped()
            injector.emit("job_end", status=self.status)
            injector.close()
            self._output_failed()
            wakeup.close()
            try:
                unregister_run(self.run_id)
            except OSError as exc:  # a dead controller's entry: `trainchaos cleanup` removes it
                self._tool_error(f"run not unregistered: {describe_os_error(exc)}")
        try:
            events = read_events(events_dir)
        except OSError as exc:  # a failing disk under --out: nothing to measure from
            self._tool_error(f"the run's events could not be read: {describe_os_error(exc)}")
            events = []
        if self.tool_errors:
            self.error = "; ".join(self.tool_errors)
        t_end = time.time()
        return events, t_end

    def _output_failed(self) -> None:
        """A write of the controller's own failed (its events, its fault journal): the run
        ends as a tool error naming the file and the errno (once each)."""
        for failure, path in ((self.injector.failure, None),
                              (self.journal_writer.failure, self.rundir.fault_journal)):
            if failure is not None and id(failure) not in self._output_failures:
                self._output_failures.add(id(failure))
                self._tool_error(f"the controller's own output failed: {describe_os_error(failure, path)}")

    def _ended_by_handler(self) -> bool:
        """A handler has seen all it watches for (``RunHandler.end``): the run ends now, the
        job stopped by the teardown as at a timeout."""
        end = self.handlers.end()
        if end is None:
            return False
        self.status = end.status
        self.end_reason = end.reason
        if end.status != "completed":
            self.error = end.reason
        self.progress.note(f"run ended before the job: {end.reason}")
        return True

    def _job_ended(self) -> bool:
        """Every node that is not lost has exited. Once the harness reported its end, the
        job's outcome is its final group's: a node outside it (a spare that never joined, a
        node cut off that came back too late to rejoin) waits in, or is refused by, a
        rendezvous the job has closed, which says nothing about the job."""
        status = self.cluster.poll()
        intake = self.intake
        finished = bool(intake.event_times_seen.get("run_end"))
        members = ({n for r, n in intake.rank_node.items() if r < intake.group_size} if finished
                   else intake.ever_hosted)
        running = [n for n, s in status.items() if not s.lost and s.returncode is None
                   and not (finished and n not in members)]
        if running:
            return False
        # The harness says it finished (run_end); a user command only by its exit code.
        finished = self.workload.finished(finished)
        counted = [s.returncode for n, s in status.items()
                   if not s.lost and (n in members or not members)]
        ok = finished and all(rc == 0 for rc in counted)
        self.status = "completed" if ok else "failed"
        if not ok:
            self.error = "training job exited: " + ", ".join(f"node-{n} rc={s.returncode}" for n, s in status.items())
        return True

    def _teardown(self) -> None:
        """Revert every fault, stop every process, release every resource (newest first).
        Each step runs even when one before it failed; every failure is a tool error."""
        self._reverted(self.lifecycle.revert_all())
        for st in self.states:
            if not st.fired:
                self._confirm(st, "not_injected")  # nobody may wait for it while stopping
        try:
            self.cluster.stop()
        except Exception as exc:
            self._tool_error(f"stopping the nodes failed: {type(exc).__name__}: {exc}")
        for failure in self.resources.release_all():
            self._tool_error(f"teardown failed: {failure}")


def _scenario_dict(scenario: Scenario) -> dict[str, Any]:
    data = asdict(scenario)
    data["faults"] = [asdict(f) for f in scenario.faults]
    return data


def run_scenario_once(scenario: Scenario, run_dir: str, seed: int, baseline: BaselineInfo | None = None,
                      progress: RunProgress | None = None, with_faults: bool = True, repeat_index: int = 0,
                      baseline_run: dict[str, Any] | None = None, handlers: list[RunHandler] | None = None,
                      record_digests: bool = False) -> RunRecord:
    """Run once, write its record and reports and return the record; ``baseline_run``
    describes the fault-free twin's run. ``handlers``: the caller's own beside the built-in
    ones (one may end the run early: ``RunHandler.end``); ``record_digests``: the job reports
    its model state at every step (``state_digest``) as the twin does, faults or not."""
    progress = progress or RunProgress()
    handlers = list(handlers or [])
    if (with_faults and baseline is not None and baseline.digests) or \
            (not with_faults and scenario.targets.bound("stale_checkpoints") is not None):
        # Each checkpoint the job saves, read as it is saved (chaos.runner.freshness); the
        # twin's too where freshness is a target: judged against its own step digests.
        handlers.append(FreshnessHandler(workload_for(scenario.workload), progress))
    runner = _Runner(scenario, run_dir, seed, with_faults, progress, repeat_index, baseline_run, handlers,
                     record_digests)
    try:
        events, t_end = runner.run()
        faults, metrics, verdict = measure(
            events, t_end, scenario=scenario, plan=runner.plan, states=runner.states, start=runner.start,
            status=runner.status, t_stop=runner.t_stop, with_faults=with_faults, baseline=baseline)
        # A signal during teardown: the run's own outcome stands, the suite stops after it.
        interrupted_after = interrupts.take_pending() is not None and runner.status != "interrupted"
        record = build_run_record(
            # cast: the run has ended, so its status is no longer "running"
            runner.start, run_dir=runner.run_dir, status=cast("RunStatus", runner.status), t_end=t_end, faults=faults,
            metrics=metrics, verdict=verdict, versions=_versions(), error=runner.error,
            tool_errors=runner.tool_errors, traceback=getattr(runner, "traceback", None),
            ended_at=_now_iso(), interrupted_after=interrupted_after,
            twin_checks=() if with_faults or runner.status == "tool_error" else _judge_twin(scenario, metrics, events))
        try:
            write_run_reports(runner.run_dir, record, events)
        except OSError as exc:
            # Every fault was reverted and every process stopped already: only the record
            # is lost, and with it the run's outcome (a verdict nobody can read is none).
            why = f" ({runner.error})" if runner.error else ""
            raise ToolError(f"the run's record could not be written: {describe_os_error(exc)}; the run "
                            f"ended {runner.status}{why}, its faults reverted and its processes stopped") from exc
    finally:
        runner.release()
        interrupts.release()
    return record


def run_baseline(scenario: Scenario, run_dir: str, seed: int, progress: RunProgress | None = None) -> tuple[BaselineInfo, RunRecord]:
    """The fault-free twin (same seed, same workload) that correctness is judged against."""
    record = run_scenario_once(scenario, run_dir, seed, None, progress, with_faults=False)
    return twin_reference(scenario, record), record


def twin_reference(scenario: Scenario, record: RunRecord) -> BaselineInfo:
    """The reference a fault-free run gives (one that recorded its digests: the twin, or a
    run whose only fault changes nothing, as the crash-point sweep's trace)."""
    return _twin_reference(scenario, record.metrics or MetricsRecord(), read_events(RunDir(str(record.run_dir)).events))


def _twin_reference(scenario: Scenario, metrics: MetricsRecord, events: list[Event]) -> BaselineInfo:
    """What the faulted runs are compared with: the twin's final digest, its loss, its samples
    and its model state at each step."""
    losses: dict[int, Any] = {}  # a loss the rank could not report stays None: no step is invented
    digests = {}
    for ev in events:
        if ev.get("kind") == "step_end" and ev.get("src") == "rank-0":
            losses[int(ev["step"])] = ev.get("loss")
        elif ev.get("kind") == "state_digest" and isinstance(ev.get("digest"), str):
            digests[int(ev["step"])] = ev["digest"]
    return BaselineInfo(digest=metrics.final_digest, losses=losses,
                        world_size=scenario.topology.world_size,
                        health_problem=metrics.health_problem,
                        samples=baseline_samples(events), digests=digests)


def _judge_twin(scenario: Scenario, metrics: MetricsRecord, events: list[Event]) -> list[Check]:
    """The twin is judged too: its correctness targets on its own figures, its checkpoints
    against its own step digests (``chaos.runner.verdict.judge_twin``)."""
    own = metrics.model_copy(update=freshness_metrics(events, _twin_reference(scenario, metrics, events)))
    return judge_twin(scenario.targets, own)
