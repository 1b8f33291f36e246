"""Timeline -> metrics: detection, recovery, catch-up, lost steps, goodput, correctness.

Pure logic over the merged event timeline (``chaos.runfiles.events``); no I/O, stdlib only. The
definitions (incarnations, each per-fault and per-run metric, false detections, what the
families add) are docs/metrics.md; this package is their executable form. Its parts:
``records`` (inputs and outputs), ``timeline`` (the indexed events), ``per_fault`` and
``per_run`` (the engine), ``catalogue`` (one ``MetricSpec`` per metric: label, unit,
tolerance, target) and ``family`` with ``families/`` (what network, power, storage and
silent-corruption faults add, registered rather than named by the engine).
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
