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
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from chaos.errors import ValidationIssue
from chaos.runfiles.record import RunRecord, RunRecordError, load_run_record
from chaos.runfiles.record_metrics import MetricsRecord
from chaos.runfiles.rundir import RUN_RECORD_FILE
from chaos.scale.issues import ScaleInputError

__all__ = ["Measured", "RunSamples", "Sample", "read_runs"]


@dataclass(frozen=True)
class Sample:
    fault_type: str
    detection_s: float
    restart_s: float | None
    lost_work_s: float | None
    journal: str


@dataclass
class RunSamples:
    """What ``--from-runs`` found: samples per fault type, and what it could not use."""

    root: str
    journals: int = 0
    samples: list[Sample] = field(default_factory=list)
    unusable: dict[str, int] = field(default_factory=dict)
    """Fault type -> faults that fired but were undetected or never recovered."""
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
        return Measured(
            fault_types=tuple(sorted({s.fault_type for s in chosen})),
            n=len(chosen),
            detection_s=statistics.median(s.detection_s for s in chosen),
            restart_s=statistics.median(restarts) if restarts else None,
            lost_work_s=statistics.median(lost) if lost else None,
            unusable=sum(self.unusable.get(t, 0) for t in wanted),
        )


@dataclass(frozen=True)
class Measured:
    """Medians for one failure class."""

    fault_types: tuple[str, ...]
    n: int
    detection_s: float
    restart_s: float | None
    lost_work_s: float | None
    unusable: int


def read_runs(root: str) -> RunSamples:
    """Every usable fault sample under ``root``; ScaleInputError when there is none."""
    if not os.path.isdir(root):
        what = "not a directory" if os.path.exists(root) else "no such directory"
        raise ScaleInputError([ValidationIssue(root, "--from-runs", what)])
    found = RunSamples(root=root)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        if RUN_RECORD_FILE not in filenames:
            continue
        path = os.path.join(dirpath, RUN_RECORD_FILE)
        try:
            record = load_run_record(path)
        except RunRecordError:
            found.unreadable.append(path)
            continue
        found.journals += 1
        _collect(record, path, found)
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
