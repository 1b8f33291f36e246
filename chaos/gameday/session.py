"""One game-day exercise: the plan's steps against a live run, one at a time, with the
operator in the loop and every fault reverted whatever happens.

Order of business: the plan is validated, the run found (on any backend that declares
``Attachable``: docker, slurm) and every inject's fault type checked against that backend,
every inject target resolved against the run's live nodes (a target outside the run refuses
the whole plan with exit 2 before the first step); ``--dry-run`` prints that, with each
inject's precondition as it stands now, and stops. Then each step runs; an inject's
precondition (its nodes running, its ranks live) is checked just before it: unmet, the exercise stops with one
located line and exit 2 (or the step is skipped, ``skip_if_absent``), and the fault never
reaches the engine. A disruptive step (inject) waits for the operator's yes unless
``--yes``. A monitor thread
re-reads the run's events and nodes' states every 0.5 s and checks the stop conditions; one
that holds interrupts the exercise, exactly as Ctrl-C does: every fault still in effect is
reverted (newest first), the report is written, and the exit code says why (1 stopped by a
condition or a failed check, 2 refused by the blast-radius guard or a precondition, 130
Ctrl-C). Faults are
journaled before they act in ``<out>/fault_journal.jsonl`` and the exercise is registered
like a run, so ``trainchaos cleanup`` reverts what a SIGKILLed game day left.

The operator's side of the loop is ``chaos.gameday.dialogue``; the stop conditions' watch and
the live panel's status, ``chaos.gameday.monitor``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chaos import probe
from chaos.cluster import lookup_backend
from chaos.cluster.base import InjectionContext
from chaos.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TARGET_MISSED,
    EXIT_TOOL_FAILED,
    ChaosError,
    ScenarioError,
    ValidationIssue,
)
from chaos.faults.base import lookup, param_gaps
from chaos.gameday.attach import AttachedRun, Resolution, find_run
from chaos.gameday.dialogue import OperatorDialogue, Stop
from chaos.gameday.monitor import StopMonitor
from chaos.gameday.observe import Observer, attribute
from chaos.gameday.plan import Condition, Plan, Step, parse_condition
from chaos.gameday.report import write_report
from chaos.gameday.view import LiveView, PlainView
from chaos.metrics.records import FaultRecord
from chaos.runfiles.rollback import FaultJournal, register_run, unregister_run
from chaos.runner.lifecycle import FaultLifecycle, Injection
from chaos.util import interrupts

__all__ = ["GameDay"]


@dataclass
class GameDay(OperatorDialogue, StopMonitor):
    plan: Plan
    plan_path: str
    out_dir: str
    yes: bool = False
    echo: Callable[[str], None] = print
    ask: Callable[[str], str] = input
    live: bool = False
    """A live panel on the terminal (``LiveView``); else plain lines."""
    timeline: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    notes: list[dict[str, Any]] = field(default_factory=list)
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.id = f"trainchaos-gd-{uuid.uuid4().hex[:8]}"
        self.observer = Observer(self.plan.window_s)
        self.stop_conditions = [parse_condition(c) for c in self.plan.stop_when]
        self.tripped: str | None = None
        self.view = (LiveView if self.live else PlainView)(self.echo, self.ask)
        self.t_injects: dict[str, float] = {}
        """Inject step name -> when its inject began (``since:`` counts detections from there)."""
        self.t_in_effect: dict[str, float] = {}
        """Inject step name -> when its engine call returned: pace after it counts from there."""
        self._held: dict[str, float] = {}
        """Stop condition -> since when (monotonic) it holds."""
        self._current = ("", time.monotonic())
        self._lock = threading.RLock()
        self._stop_monitor = threading.Event()
        self.t0 = time.time()

    @property
    def active(self) -> dict[str, Injection]:
        """Step name -> its fault, while in effect (oldest first)."""
        lifecycle = getattr(self, "lifecycle", None)
        return {i.name: i for i in lifecycle.active} if lifecycle else {}

    @property
    def done(self) -> list[Injection]:
        """The faults reverted, in the order they were."""
        lifecycle = getattr(self, "lifecycle", None)
        reverted = [i for i in lifecycle.history if not i.active] if lifecycle else []
        return sorted(reverted, key=lambda i: i.t_revert or 0.0)

    # -- preparation ------------------------------------------------------------------------
    def attach(self) -> None:
        entry = find_run(self.plan.run, self.plan_path)
        self.run = AttachedRun(entry, self.plan.hosts)
        self.observer.take(self.run.backlog)
        self._check_types(self.run.backend.name)

    def _check_types(self, backend: str) -> None:
        """Every inject's fault type works on the run's backend (the plan was checked against
        every attachable one; a ``node_down`` needs a scheduler, a ``container_pause`` a
        container), and so do its params (a power outage whose power returns needs a backend
        that can start a node again, ``PowerReturn``): a located error each, exit 2, before
        anything is resolved or touched."""
        issues = []
        for i, step in enumerate(self.plan.steps):
            if step.inject is None:
                continue
            cls = lookup(step.inject.type)
            works_on = cls.supported_backends()
            if backend not in works_on:
                issues.append(ValidationIssue(
                    self.plan_path, f"steps[{i}].inject.type",
                    f"{step.inject.type} does not work on run {self.run.spec.run_id}'s backend {backend} "
                    f"(it works on: {', '.join(works_on) or 'none'})"))
                continue
            params = cls.params_model.model_validate(step.inject.params)  # the plan's load checked them
            for where, message in param_gaps(cls, params, lookup_backend(backend)):
                issues.append(ValidationIssue(
                    self.plan_path, f"steps[{i}].inject.params.{'.'.join(map(str, where))}",
                    f"{message}; run {self.run.spec.run_id} runs on {backend}: nothing was started"))
        if issues:
            raise ScenarioError(issues)

    def resolve_all(self, live: bool = False) -> list[tuple[int, Step, Resolution | None]]:
        """Every inject step's target against the run's live nodes (the guard): raises
        TargetRefused for anything outside the run, before any step runs. ``live``: also
        which ranks live now (the preconditions, as they stand)."""
        out = []
        for i, step in enumerate(self.plan.steps):
            res = self.run.resolve_step(step.inject.target, live=live) if step.inject is not None else None
            out.append((i, step, res))
        return out

    def dry_run(self) -> int:
        self.echo(f"game day {self.plan.name!r} on run {self.run.spec.run_id} (dry run: nothing is changed)")
        if self.stop_conditions:
            self.echo("stop when: " + "; ".join(map(str, self.stop_conditions)))
        blocking = []
        for i, step, res in self.resolve_all(live=True):
            self.echo(f"  [{i}] {self._describe(step, res)}")
            if res is not None:
                then = ""
                if res.unmet:
                    then = " -> would be skipped (skip_if_absent)" if step.skip_if_absent else " -> the game day would stop here (exit 2)"
                    if not step.skip_if_absent:
                        blocking.append(self._unmet_line(i, step, res))
                self.echo(f"      {res.precondition()}{then}")
        if blocking:
            self.echo(f"dry run: {blocking[0]}")
            self.echo("dry run: nothing was touched")
            return EXIT_BAD_INPUT
        self.echo(f"dry run: every target resolved to the run's own {self.run.node_kind}s; nothing was touched")
        return EXIT_OK

    def _unmet_line(self, i: int, step: Step, res: Resolution) -> str:
        """The one located line an unmet precondition stops the exercise with."""
        assert step.inject is not None
        return str(ValidationIssue(self.plan_path, f"steps[{i}].inject.target",
                                   f"{'; '.join(res.unmet)}; {step.inject.type} ({step.name or f'step-{i}'}) "
                                   "was not started, nothing touched"))

    def _describe(self, step: Step, res: Resolution | None) -> str:
        name = f" ({step.name})" if step.name else ""
        if step.inject is not None:
            cls = lookup(step.inject.type)
            params = f" {step.inject.params}" if step.inject.params else ""
            skip = " (skip_if_absent)" if step.skip_if_absent else ""
            return (f"inject{name} {step.inject.type}{params} -> {res.describe() if res else '?'}"
                    f"  [{cls.describe_mechanism()}]{skip}")
        if step.wait is not None:
            w = step.wait
            since = f", detections since {w.since}" if w.since else ""
            return f"wait {w.seconds:g} s" if w.condition is None else f"wait until {w.condition} (at most {w.within_s:g} s{since})"
        if step.observe is not None:
            return f"observe {step.observe.seconds:g} s"
        if step.check is not None:
            c = step.check
            since = f", detections since {c.since}" if c.since else ""
            return f"check {c.condition} within {c.within_s:g} s (else {c.on_fail}{since})"
        if step.revert is not None:
            return f"revert {step.revert}"
        return f"ask: {step.ask}"

    # -- the exercise -----------------------------------------------------------------------
    def execute(self) -> int:
        resolved = self.resolve_all()  # refuses before anything is touched
        self.t0 = time.time()
        self.observer.start_plan()
        os.makedirs(self.out_dir, exist_ok=True)
        self.journal = FaultJournal(os.path.join(self.out_dir, "fault_journal.jsonl"))
        self.injector = probe.Probe(os.path.join(self.out_dir, "events"), "gameday", 0)
        self.ctx = InjectionContext(self.out_dir, self.run.backend, self.injector, None)
        self.lifecycle = FaultLifecycle(self.ctx, self.journal, self._lock)
        register_run(self.id, self.out_dir)
        monitor = threading.Thread(target=self._monitor, daemon=True, name="trainchaos-gameday-monitor")
        self._event("start", f"game day {self.plan.name} on run {self.run.spec.run_id}")
        with interrupts.installed():
            return self._execute(resolved, monitor)

    def _execute(self, resolved: list[tuple[int, Step, Resolution | None]], monitor: threading.Thread) -> int:
        status, reason, code = "completed", "every step done", EXIT_OK
        try:
            self._refresh()
            monitor.start()
            self.view.start(self._live_status)
            for i, step, res in resolved:
                if step.note:
                    self._say(f"note: {step.note}")
                self._current = (f"{i + 1}/{len(resolved)} {self._describe(step, res)}", time.monotonic())
                self._run_step(i, step, res)
            if any(e.get("outcome") == "failed" for e in self.timeline):
                status, reason, code = "checks_failed", "a check failed (on_fail: continue)", EXIT_TARGET_MISSED
        except Stop as stop:
            status, reason, code = stop.status, stop.reason, stop.exit_code
        except (KeyboardInterrupt, interrupts.Interrupted):
            if self.tripped:
                status, reason, code = "stopped", f"stop condition held: {self.tripped}", EXIT_TARGET_MISSED
            else:
                status, reason, code = "interrupted", "Ctrl-C by the operator", EXIT_INTERRUPTED
        except ChaosError as exc:
            # Exit 2: a target outside the run, caught by the guard at the engine's door.
            status = "refused" if exc.exit_code == EXIT_BAD_INPUT else "tool_error"
            reason, code = str(exc), exc.exit_code
        except Exception as exc:
            status, reason, code = "tool_error", f"{type(exc).__name__}: {exc}", EXIT_TOOL_FAILED
        finally:
            # From here on a signal is recorded, not raised: the reverts run to their end.
            interrupts.hold()
            self._stop_monitor.set()
            self._current = ("reverting what is in effect", time.monotonic())
            failures = self._revert_all(reason if status != "completed" else "end of the exercise")
            failures += [f"{a.name}: {a.revert_error}" for a in self.done if a.revert_error]
            if failures and code in (EXIT_OK, EXIT_TARGET_MISSED):
                status, reason, code = "tool_error", "revert failed: " + "; ".join(dict.fromkeys(failures)), EXIT_TOOL_FAILED
            self._event("end", f"{status}: {reason}")
            self.injector.close()
            if monitor.is_alive():
                monitor.join(timeout=5)
            self.view.stop()
            # The last events written before the end count too (the report's one source).
            with contextlib.suppress(Exception):
                self.observer.take(self.run.poll_events())
            detections = self.observer.detections_since()
            final = {**self.observer.snapshot(), "detections": float(len(detections))}
            self.snapshots.append({"t": time.time(), "step": None, "label": "final", **final})
            path = write_report(self.out_dir, self._report(status, reason, code, detections))
            unregister_run(self.id)
            interrupts.release()
        self.echo(f"game day {status}: {reason}")
        self.echo(f"report: {path}")
        return code

    def _report(self, status: str, reason: str, code: int, detections: list[dict[str, Any]]) -> dict[str, Any]:
        actives = [*self.done, *self.active.values()]
        # Every one has its t_inject: lifecycle.inject sets it in the section that lists it.
        owners = attribute(detections, [(a.name, a.t_inject) for a in actives if a.t_inject is not None])
        faults = []
        for a in actives:
            mine = owners[a.name]
            first = mine[0] if mine else None
            faults.append({
                "step": a.name, "fault_id": a.fault.fault_id, "type": a.fault.type_name,
                "target": a.fault.target.to_dict(), "record": a.record, "t_inject": a.t_inject,
                "t_revert": a.t_revert, "revert_error": a.revert_error, "detections": len(mine),
                "detection_s": round(first["t"] - a.t_inject, 3) if first else None,
                "detected_by": first.get("src") if first else None,
                "suspect": first.get("suspect") if first else None,
                "detection_unknown": None if first else self._blind_to(a.fault),
            })
        return {
            "format": 2, "plan": self.plan.model_dump(), "plan_path": os.path.abspath(self.plan_path),
            "game_day_id": self.id, "run_id": self.run.spec.run_id, "run_dir": self.run.spec.run_dir,
            "status": status, "reason": reason, "exit_code": code,
            "started": self.t0, "ended": time.time(), "reference_pace": self.observer.reference_pace,
            "timeline": self.timeline, "decisions": self.decisions, "notes": self.notes,
            "skipped": self.skipped, "faults": faults, "detections_before_faults": len(owners[None]),
            "metrics": self.snapshots, "detections": detections,
        }

    def _blind_to(self, fault: Any) -> str | None:
        """Why no source could have reported the job's detection of ``fault`` (as a run's
        metrics say it: ``chaos.metrics.per_fault``), with the fix; None: the job could have."""
        sources = self.run.detection
        rec = FaultRecord(fault_id=fault.fault_id, type=fault.type_name, failure_class=fault.failure_class,
                          target_srcs=fault.target.srcs(), also_classes=tuple(type(fault).also_detected_as))
        if sources is None or not sources.blind_to(rec, self.observer.probe_reports):
            return None
        why = f"no detection source sees a {fault.failure_class} fault in this workload"
        return why + (f"; {sources.fix}" if sources.fix else "")

    def _run_step(self, i: int, step: Step, res: Resolution | None) -> None:
        name = step.name or f"step-{i}"
        what = self._describe(step, res)
        if step.inject is not None:
            # Re-resolved now: ranks move, nodes come and go since the plan was checked.
            with self._lock:
                self._refresh()
                res = self.run.resolve_step(step.inject.target)
            what = self._describe(step, res)
            if res.unmet:
                line = self._unmet_line(i, step, res)
                if not step.skip_if_absent:
                    raise Stop("precondition_failed", line, EXIT_BAD_INPUT)
                self._skip(i, name, what, "; ".join(res.unmet))
                return
            if not self._confirm(i, what):
                self._skip(i, name, what, "the operator skipped it")
                return
            self.observer.freeze_reference()
            self._inject(i, name, step, res)
        elif step.wait is not None:
            w = step.wait
            if w.condition is None:
                self._sleep(w.seconds or 0)
                self._event("wait", what, step=i, outcome="done")
            elif self._skipped_with(i, name, what, w.since):
                return
            else:
                since = self.t_injects.get(w.since) if w.since else None
                progress = self._progress_since(w.since)
                ok = self._until(parse_condition(w.condition), w.within_s, since, progress)
                self._event("wait", what, step=i, outcome="held" if ok else "timed out",
                            metrics=self.observer.snapshot(since, progress))
        elif step.observe is not None:
            t = time.time()
            self._sleep(step.observe.seconds)
            self._take_events()
            metrics = self.observer.snapshot(progress_since=self._progress_since(None))
            snap: dict[str, Any] = {"t": time.time(), "step": i, "label": name, "since": t, **metrics}
            self.snapshots.append(snap)
            self._event("observe", what, step=i, outcome="recorded", metrics=snap)
            self._say("  " + ", ".join(f"{k}={v:g}" for k, v in metrics.items()))
        elif step.check is not None:
            c = step.check
            if self._skipped_with(i, name, what, c.since):
                return
            since = self.t_injects.get(c.since) if c.since else None
            progress = self._progress_since(c.since)
            ok = self._until(parse_condition(c.condition), c.within_s, since, progress)
            snap = self.observer.snapshot(since, progress)
            self._event("check", what, step=i, outcome="passed" if ok else "failed", metrics=snap)
            metric = parse_condition(c.condition).metric
            self._say(f"  check {c.condition}: {'passed' if ok else 'FAILED'} ({metric}={snap[metric]:g})")
            if not ok and c.on_fail == "abort":
                raise Stop("check_failed", f"check failed: {c.condition}", EXIT_TARGET_MISSED)
        elif step.revert is not None:
            names = list(self.active) if step.revert == "all" else [step.revert]
            errors = [err for n in reversed(names) if (err := self._revert(n))]
            self._event("revert", what, step=i, outcome="error" if errors else "done")
            if errors:
                # A fault that would not revert is left in effect: stop, and say so loudly.
                raise Stop("tool_error", f"revert failed: {'; '.join(errors)}", EXIT_TOOL_FAILED)
        elif step.ask is not None:
            answer = self._prompt(f"  {step.ask}\n  answer> ")
            self.notes.append({"t": time.time(), "step": i, "text": answer, "question": step.ask})
            self._event("ask", step.ask, step=i, outcome="answered")

    # -- faults ------------------------------------------------------------------------------
    def _inject(self, i: int, name: str, step: Step, res: Resolution) -> None:
        inject = step.inject
        assert inject is not None  # called for an inject step only
        cls = lookup(inject.type)
        params = cls.params_model.model_validate(inject.params).model_dump()
        fault = cls(fault_id=f"gd{i}-{inject.type}", target=res.target, params=params,
                    target_spec=dict(inject.target), seed=i)
        injection = Injection(fault, res.target, name=name, describe=res.describe())
        # In effect (and reverted at the end) from the journal's ``apply`` on, even when the
        # engine raises; ``since:`` counts from the inject's start: the job may notice
        # within milliseconds, while the fault is still being applied.
        self.lifecycle.inject(injection)
        self.t_injects[name] = injection.t_inject or time.time()
        self.t_in_effect[name] = time.time()
        if injection.exception is not None:
            raise injection.exception
        self._event("inject", self._describe(step, res), step=i, outcome="injected", fault=fault.fault_id)
        self._say(f"  injected {fault.type_name} on {res.describe()}")

    def _revert(self, name: str, why: str = "plan step") -> str | None:
        injection = self.active.get(name)
        if injection is None:
            return None
        self.lifecycle.revert(injection)
        fault = injection.fault
        self._event("reverted", f"{fault.type_name} ({name}): {why}", outcome="error" if injection.revert_error else "done")
        self._say(f"  reverted {name} ({fault.type_name})" + (f": FAILED {injection.revert_error}" if injection.revert_error else ""))
        return injection.revert_error

    def _revert_all(self, why: str) -> list[str]:
        failures = []
        for name in reversed(list(self.active)):
            err = self._revert(name, why)
            if err:
                failures.append(f"{name}: {err}")
        return failures

    # -- time, metrics, stop conditions -----------------------------------------------------
    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self._due_reverts()
            time.sleep(min(0.1, max(0.0, end - time.monotonic())))

    def _progress_since(self, since: str | None) -> float | None:
        """From when a step's pace counts: the named inject's (else the newest inject's) end of
        its engine call; None before any inject (the plain window)."""
        if since is not None:
            return self.t_in_effect.get(since)
        return max(self.t_in_effect.values(), default=None)

    def _until(self, cond: Condition, within_s: float, since: float | None = None,
               progress_since: float | None = None) -> bool:
        """Whether ``cond`` holds within ``within_s``; each look reads the run's events first
        (what was written a moment ago counts, not only what the monitor last saw)."""
        end = time.monotonic() + within_s
        while True:
            self._due_reverts()
            self._take_events()
            if cond.holds(self.observer.snapshot(since, progress_since)):
                return True
            if time.monotonic() >= end:
                return False
            time.sleep(0.1)

    def _due_reverts(self) -> None:
        for fault in self.ctx.due_reverts():
            for name, active in list(self.active.items()):
                if active.fault is fault:
                    self._revert(name, "its duration_s ended")

    def _refresh(self) -> None:
        events = self.run.refresh()
        self.observer.take(events)
        self.observer.nodes_running = self.run.nodes_running()

    def _take_events(self) -> None:
        with self._lock:
            self.observer.take(self.run.poll_events())

    def _event(self, action: str, what: str, step: int | None = None, outcome: str = "", **extra: Any) -> None:
        now = time.time()
        self.timeline.append({"t": now, "rel_s": round(now - self.t0, 2), "step": step, "action": action,
                              "what": what, "outcome": outcome, **extra})
