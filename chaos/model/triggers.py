"""Trigger forms: when a fault fires, one class per form, one interpreter.

A fault's ``trigger:`` is one of ``at_step``, ``at_time``, ``after_event``, ``random``,
``poisson`` and ``every``; the record the runner reads is ``chaos.model.scenario.Trigger`` (``kind`` and that
kind's fields). Every reader asks the kind's form instead of testing ``kind``: building the
record from the document (``build``), validation (``check``, ``exact_step``), the plan
(``occurrences``: the seeded times, drawn once), the run loop (``due``, and ``near`` for
journaling a fault ahead of its time), the dry run's words
(``describe``) and what a due fault does when its target is not alive (``waits_for_target``).
"""

from __future__ import annotations

import random
import time
from typing import Any, ClassVar, Protocol

from chaos.model.scenario import Trigger

__all__ = ["TRIGGER_FORMS", "RunClock", "TriggerForm", "form_of"]


class RunClock(Protocol):
    """What ``due`` reads of the run as it goes (``chaos.runner.intake.EventIntake``)."""

    def step_seen(self, ranks: tuple[int, ...]) -> int:
        """The highest step the ranks reported (every rank's highest when none named)."""
        ...

    def event_times(self, kind: str) -> list[float]:
        """When each event of ``kind`` was seen so far (unix seconds)."""
        ...

    def since_first_step(self) -> float | None:
        """Seconds since the run's first step; None before it."""
        ...

    def first_step_time(self) -> float | None:
        """When the run's first step was seen (unix seconds); None before it."""
        ...


class TriggerForm:
    """One form of ``trigger:``; subclasses interpret their kind's fields of the record."""

    kind: ClassVar[str]
    exact_step: ClassVar[bool] = False
    """Fires at an exact step: the only form an in-process fault (the probe's) can take."""
    waits_for_target: ClassVar[bool] = False
    """Due while its target has no live process: wait for it (else a tool error)."""

    @staticmethod
    def build(doc: Any) -> Trigger:
        """The record of the document's value under this kind (validated already)."""
        raise NotImplementedError

    @staticmethod
    def check(doc: Any, workload: Any) -> str | None:
        """What is wrong with the value against the workload (None: nothing)."""
        return None

    @staticmethod
    def occurrences(trigger: Trigger, rng: random.Random) -> list[float | None]:
        """Each firing's offset in seconds after the run's first step (None: not timed),
        drawn from the fault's seeded stream (the draws' order is the plan's contract)."""
        return [None]

    @staticmethod
    def due(trigger: Trigger, offset_s: float | None, ranks: tuple[int, ...], clock: RunClock) -> bool:
        """Whether a firing planned at ``offset_s`` on ``ranks`` is due now."""
        since = clock.since_first_step()
        return since is not None and offset_s is not None and since >= offset_s

    @staticmethod
    def planned_time(trigger: Trigger, offset_s: float | None, clock: RunClock) -> float | None:
        """When it is due (unix seconds), once that is known: what the run loop waits for,
        and what its lag is measured from (``chaos.runner.precision``). None for a step trigger,
        or while its reference (the first step, the event) has not come."""
        first = clock.first_step_time()
        return None if first is None or offset_s is None else first + offset_s

    @classmethod
    def near(cls, trigger: Trigger, offset_s: float | None, ranks: tuple[int, ...], clock: RunClock,
             ahead_s: float) -> bool:
        """Whether it is due within about ``ahead_s`` (the run loop journals such a fault's
        ``apply`` ahead, ``chaos.runner.lifecycle.FaultLifecycle.arm``)."""
        planned = cls.planned_time(trigger, offset_s, clock)
        return planned is not None and planned - time.time() <= ahead_s

    @staticmethod
    def describe(trigger: Trigger, offset_s: float | None) -> str:
        """When it fires, in words (``trainchaos run --dry-run``)."""
        return (f"{offset_s:.1f} s after the first step ({trigger.kind})" if offset_s is not None
                else trigger.kind)


TRIGGER_FORMS: dict[str, type[TriggerForm]] = {}


def _form(cls: type[TriggerForm]) -> type[TriggerForm]:
    TRIGGER_FORMS[cls.kind] = cls
    return cls


def form_of(trigger: Trigger) -> type[TriggerForm]:
    return TRIGGER_FORMS[trigger.kind]


@_form
class AtStep(TriggerForm):
    """At step N: in-process faults land exactly there; external ones too, the targeted
    ranks holding after step N until they are in effect (``chaos.probe.hold``)."""

    kind = "at_step"
    exact_step = True

    @staticmethod
    def build(doc: Any) -> Trigger:
        return Trigger(kind="at_step", at_step=doc)

    @staticmethod
    def check(doc: Any, workload: Any) -> str | None:
        if workload is not None and workload.steps is not None and doc >= workload.steps:
            return (f"step {doc} is never reached: {workload.steps_text()}, so at_step must be "
                    f"between 1 and {workload.steps - 1}")
        return None

    @staticmethod
    def due(trigger: Trigger, offset_s: float | None, ranks: tuple[int, ...], clock: RunClock) -> bool:
        return clock.step_seen(ranks) >= (trigger.at_step or 0)

    @staticmethod
    def planned_time(trigger: Trigger, offset_s: float | None, clock: RunClock) -> float | None:
        return None  # the step's end, read from the events (chaos.runner.precision)

    @classmethod
    def near(cls, trigger: Trigger, offset_s: float | None, ranks: tuple[int, ...], clock: RunClock,
             ahead_s: float) -> bool:
        return clock.step_seen(ranks) >= (trigger.at_step or 0) - 1  # the step before

    @staticmethod
    def describe(trigger: Trigger, offset_s: float | None) -> str:
        return f"at step {trigger.at_step}"


@_form
class AtTime(TriggerForm):
    """At a fixed time after the run's first step."""

    kind = "at_time"

    @staticmethod
    def build(doc: Any) -> Trigger:
        return Trigger(kind="at_time", at_time_s=float(doc))

    @staticmethod
    def occurrences(trigger: Trigger, rng: random.Random) -> list[float | None]:
        return [trigger.at_time_s]


@_form
class AfterEvent(TriggerForm):
    """On the count-th event of a kind, after a delay."""

    kind = "after_event"

    @staticmethod
    def build(doc: Any) -> Trigger:
        return Trigger(kind="after_event", event=doc.event, count=doc.count, delay_s=float(doc.delay_s))

    @staticmethod
    def due(trigger: Trigger, offset_s: float | None, ranks: tuple[int, ...], clock: RunClock) -> bool:
        times = clock.event_times(trigger.event or "")
        return len(times) >= trigger.count and time.time() >= times[trigger.count - 1] + trigger.delay_s

    @staticmethod
    def planned_time(trigger: Trigger, offset_s: float | None, clock: RunClock) -> float | None:
        times = clock.event_times(trigger.event or "")
        return times[trigger.count - 1] + trigger.delay_s if len(times) >= trigger.count else None

    @staticmethod
    def describe(trigger: Trigger, offset_s: float | None) -> str:
        return f"after {trigger.event} #{trigger.count} + {trigger.delay_s:g} s"


@_form
class RandomTime(TriggerForm):
    """At a seeded uniform time in a window after the first step."""

    kind = "random"

    @staticmethod
    def build(doc: Any) -> Trigger:
        lo, hi = doc.window_s
        return Trigger(kind="random", window_s=(float(lo), float(hi)))

    @staticmethod
    def occurrences(trigger: Trigger, rng: random.Random) -> list[float | None]:
        assert trigger.window_s is not None
        return [rng.uniform(*trigger.window_s)]


@_form
class Poisson(TriggerForm):
    """Repeated failures with seeded exponential gaps (mean ``mtbf_s``), at most
    ``max_faults``. A failure cannot strike a process that does not exist: one due while
    the job restarts from the previous one lands once its target lives again (the
    sustained-failure experiment, docs/stacks.md)."""

    kind = "poisson"
    waits_for_target = True

    @staticmethod
    def build(doc: Any) -> Trigger:
        return Trigger(kind="poisson", mtbf_s=float(doc.mtbf_s), max_faults=doc.max_faults)

    @staticmethod
    def occurrences(trigger: Trigger, rng: random.Random) -> list[float | None]:
        assert trigger.mtbf_s is not None
        t = 0.0
        out: list[float | None] = []
        for _ in range(trigger.max_faults):
            t += rng.expovariate(1.0 / trigger.mtbf_s)
            out.append(t)
        return out


@_form
class Every(TriggerForm):
    """Repeated failures at a fixed interval (``interval_s`` after the first step, then every
    ``interval_s``), at most ``max_faults``: "one failure a minute" as a schedule rather than a
    mean, so a short sustained run gets the count its window implies. Like ``poisson``, one due
    while its target restarts lands once the target lives again; the later ones keep their
    times (a slow restart does not stretch the schedule)."""

    kind = "every"
    waits_for_target = True

    @staticmethod
    def build(doc: Any) -> Trigger:
        return Trigger(kind="every", interval_s=float(doc.interval_s), max_faults=doc.max_faults)

    @staticmethod
    def occurrences(trigger: Trigger, rng: random.Random) -> list[float | None]:
        assert trigger.interval_s is not None
        return [trigger.interval_s * (i + 1) for i in range(trigger.max_faults)]
