"""``--from-runs DIR``: measured recovery figures from the journals of trainchaos runs.

Every ``journal.json`` under DIR (recursively; a suite's report folder, or several) is read
with :func:`chaos.runfiles.record.load_run_record`. Each fired fault with a measured detection
is one sample of its fault type (``kill_rank``, ``device_error``...):

- ``detection_s``: the journal's detection time;
- ``restart_s``: recovery time minus detection time (the journal's ``recovery_s`` runs from
  the injection to the first productive step, detection included);
- ``lost_work_s``: lost steps x the run's step time, where the step time is the run's
  productive time over its final step (both in the journal's metrics).

A failure class takes the medians over the samples of the fault types it maps to
(``FailureClass.fault_types``; the Llama 3 classes' default mapping is in
``chaos.scale.llama3``). Faults that were never detected or never recovered carry no figure
and are counted, not used: a median over the detected ones would hide them, so the report
names them.

``--from-stacks DIR`` reads a ``trainchaos bench-stacks`` report the same way, one set of
samples per stack (its scenarios are named ``<fault>--<stack>``), so ``simulate`` can cost
each recovery design with its own measured figures.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from chaos.errors import ValidationIssue
from chaos.runfiles.record import RunRecord, RunRecordError, load_run_record
from chaos.runfiles.record_metrics import MetricsRecord
from chaos.runfiles.rundir import RUN_RECORD_FILE
from chaos.scale.issues import ScaleInputError
from chaos.scenario.stacks import SEPARATOR

__all__ = ["Measured", "RunSamples", "Sample", "read_runs", "read_stack_runs"]


@dataclass(frozen=True)
class Sample:
    fault_type: str
    detection_s: float
    restart_s: float | None
    lost_work_s: float | None
    journal: str
    lost_steps: float | None = None


@dataclass
class RunSamples:
    """What ``--from-runs`` found: samples per fault type, and what it could not use."""

    root: str
    journals: int = 0
    samples: list[Sample] = field(default_factory=list)
    unusable: dict[str, int] = field(default_factory=dict)
    """Fault type -> faults that fired but have no detection (undetected, or unknown: the tool
    was blind) or were never recovered."""
    unreadable: list[str] = field(default_factory=list)

    @property
    def fault_types(self) -> set[str]:
        return {s.fault_type for s in self.samples}

    @property
    def lost_work_types(self) -> set[str]:
        """Fault types with at least one lost-work figure in seconds."""
        return {s.fault_type for s in self.samples if s.lost_work_s is not None}

    def for_types(self, types: Iterable[str]) -> Measured | None:
        """Medians over the samples of these fault types; None when there are none."""
        wanted = set(types)
        chosen = [s for s in self.samples if s.fault_type in wanted]
        if not chosen:
            return None
        restarts = [s.restart_s for s in chosen if s.restart_s is not None]
        lost = [s.lost_work_s for s in chosen if s.lost_work_s is not None]
        lost_steps = [s.lost_steps for s in chosen if s.lost_steps is not None]
        detections = [s.detection_s for s in chosen]
        return Measured(
            fault_types=tuple(sorted({s.fault_type for s in chosen})),
            n=len(chosen),
            detection_s=statistics.median(detections),
            restart_s=statistics.median(restarts) if restarts else None,
            lost_work_s=statistics.median(lost) if lost else None,
            unusable=sum(self.unusable.get(t, 0) for t in wanted),
            detection_range=(min(detections), max(detections)),
            restart_range=(min(restarts), max(restarts)) if restarts else None,
            lost_steps_max=max(lost_steps) if lost_steps else None,
        )

    def overall(self) -> Measured | None:
        """Medians over every sample (a design's figures at a glance)."""
        return self.for_types(self.fault_types)


@dataclass(frozen=True)
class Measured:
    """Medians for one failure class."""

    fault_types: tuple[str, ...]
    n: int
    detection_s: float
    restart_s: float | None
    lost_work_s: float | None
    unusable: int
    detection_range: tuple[float, float] | None = None
    """The spread of the samples (min, max) the medians were taken over."""
    restart_range: tuple[float, float] | None = None
    lost_steps_max: float | None = None
    """The most steps any sample lost: 0 means no run of these rolled back."""


def _records(root: str, flag: str) -> Iterator[tuple[str, RunRecord | None]]:
    """Every ``journal.json`` under ``root`` in a stable order, with its record (None when
    it cannot be read)."""
    if not os.path.isdir(root):
        what = "not a directory" if os.path.exists(root) else "no such directory"
        raise ScaleInputError([ValidationIssue(root, flag, what)])
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        if RUN_RECORD_FILE not in filenames:
            continue
        path = os.path.join(dirpath, RUN_RECORD_FILE)
        try:
            yield path, load_run_record(path)
        except RunRecordError:
            yield path, None


def _take(found: RunSamples, path: str, record: RunRecord | None) -> None:
    if record is None:
        found.unreadable.append(path)
        return
    found.journals += 1
    _collect(record, path, found)


def read_stack_runs(root: str) -> dict[str, RunSamples]:
    """``--from-stacks``: the usable samples of a bench-stacks report, per stack (sorted by
    name); ScaleInputError when no stack has one."""
    stacks: dict[str, RunSamples] = {}
    unnamed = 0
    for path, record in _records(root, "--from-stacks"):
        name = record.scenario.name if record is not None else ""
        if SEPARATOR not in name:
            unnamed += 1
            continue
        stack = name.rsplit(SEPARATOR, 1)[1]
        _take(stacks.setdefault(stack, RunSamples(root=root)), path, record)
    usable = {stack: found for stack, found in sorted(stacks.items()) if found.samples}
    if not usable:
        seen = ", ".join(f"{stack}: {found.journals} journal(s)" for stack, found in sorted(stacks.items()))
        raise ScaleInputError([ValidationIssue(
            root, "--from-stacks", "no detected fault in any stack's journal.json under it ("
            + (seen or f"no journal of a scenario named <fault>{SEPARATOR}<stack>; {unnamed} other(s)")
            + "); point it at a trainchaos bench-stacks report folder, e.g. reports/stacks")])
    return usable


def read_runs(root: str) -> RunSamples:
    """Every usable fault sample under ``root``; ScaleInputError when there is none."""
    found = RunSamples(root=root)
    for path, record in _records(root, "--from-runs"):
        _take(found, path, record)
    if not found.samples:
        seen = f"{found.journals} journal(s)" + (f", {len(found.unreadable)} unreadable"
                                                 if found.unreadable else "")
        raise ScaleInputError([ValidationIssue(
            root, "--from-runs", f"no detected fault in any journal.json under it ({seen}); "
            "point it at the report folder of runs with faults, e.g. reports/smoke")])
    return found


def _collect(record: RunRecord, path: str, found: RunSamples) -> None:
    metrics = record.metrics
    if metrics is None:
        return
    step_s = _step_time(metrics)
    for fault in metrics.faults:
        if fault.fired is False:
            continue
        kind = fault.type
        detection, recovery = _number(fault.detection_s), _number(fault.recovery_s)
        if kind is None:
            continue
        if detection is None or recovery is None:
            found.unusable[kind] = found.unusable.get(kind, 0) + 1
            continue
        lost_steps = _number(fault.lost_steps)
        found.samples.append(Sample(
            fault_type=kind,
            detection_s=detection,
            restart_s=max(0.0, recovery - detection),
            lost_work_s=lost_steps * step_s if lost_steps is not None and step_s is not None else None,
            journal=path,
            lost_steps=lost_steps,
        ))


def _step_time(metrics: MetricsRecord) -> float | None:
    productive, steps = _number(metrics.productive_s), _number(metrics.final_step)
    if productive is None or not steps:
        return None
    return productive / steps


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
