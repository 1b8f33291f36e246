"""Metric families: what a fault family (or a run-wide aspect such as checkpoints) adds to
the metrics, registered instead of named by the engine.

A ``MetricFamily`` carries its ``MetricSpec``s (the catalogue's entries: label, unit,
tolerance, target) and its metric functions: one per fired fault it measures, one per run,
and a say in which detections a fault explains. ``compute_metrics`` iterates the registered
families (``chaos.metrics.registry``); no engine module names a family.

Which faults a family measures: by default those whose fault type's ``family`` (``FaultType
.family``, which the runner records in ``FaultRecord.family``) is the family's ``name``;
``applies`` overrides that (silent corruption is a failure class, whichever family injected
it). The metrics import nothing from ``chaos.faults``: the record carries the family.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chaos.metrics.records import BaselineInfo, FaultMetrics, FaultRecord, RunInfo, RunMetrics
from chaos.metrics.spec import MetricSpec
from chaos.metrics.timeline import Event, Timeline

__all__ = ["FaultContext", "MetricFamily", "RunContext", "family_of"]


@dataclass(frozen=True)
class FaultContext:
    """What a family's per-fault function gets: one fired fault and the run around it."""

    record: FaultRecord
    metrics: FaultMetrics
    """The fault's metrics so far (the engine's: t_inject, t_revert, detection, recovery...)."""
    timeline: Timeline
    run: RunInfo
    injected: Event | None
    """The fault's first ``fault_injected`` event (its ``details``: what the injector did)."""
    detection: Event | None
    """The detection the engine counted for this fault; None: undetected."""
    t_inject: float
    """When the fault took effect (``metrics.t_inject``, never None here: the fault fired)."""


@dataclass(frozen=True)
class RunContext:
    """What a family's per-run function gets: the run's timeline and its metrics so far."""

    timeline: Timeline
    run: RunInfo
    metrics: RunMetrics
    """With every fault's metrics (``metrics.faults``), restarts and false detections."""
    baseline: BaselineInfo | None = None
    """The fault-free twin, when the scenario runs one (checkers compare against it)."""


FaultFn = Callable[[FaultContext], Mapping[str, Any] | None]
RunFn = Callable[[RunContext], Mapping[str, Any] | None]


@dataclass(frozen=True)
class MetricFamily:
    name: str
    """The fault family it measures (``FaultType.family``), or an aspect of every run."""
    specs: tuple[MetricSpec, ...] = ()
    fault_metrics: FaultFn | None = None
    """Per fired fault it applies to: returns ``{key: value}`` (or sets them on
    ``ctx.metrics`` itself and returns None)."""
    run_metrics: RunFn | None = None
    """Once per run, after every fault's metrics: returns ``{key: value}``."""
    applies: Callable[[FaultRecord], bool] | None = None
    """Which faults ``fault_metrics`` measures; None: those of the family ``name``."""
    explains_detection: Callable[[FaultRecord, Any], bool] | None = None
    """Whether a fault of this family explains a detection of the given class that blames
    one of its targets; None: it does. A detection no fault explains is a false alarm."""

    def measures(self, record: FaultRecord) -> bool:
        if self.applies is not None:
            return self.applies(record)
        return family_of(record) == self.name


def family_of(record: FaultRecord) -> str | None:
    """The fault's family, as the runner recorded it (``FaultType.family``)."""
    return record.family
