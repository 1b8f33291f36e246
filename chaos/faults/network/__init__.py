"""Network faults on an emulated fabric (partitions, link flaps, packet loss, bandwidth,
latency) and Toxiproxy toxics on TCP services; their metrics (slowdown, heal time).

The family's ``FamilySpec`` (``chaos.faults.family``); the types are in ``faults``.
"""

from __future__ import annotations

from chaos.faults.family import FamilySpec, register_family
from chaos.faults.network.metrics import METRICS

__all__ = ["FAMILY"]

FAMILY = register_family(FamilySpec(
    "network",
    "partitions, link flaps, packet loss, bandwidth, latency, TCP-service toxics",
    fault_modules=("chaos.faults.network.faults",),
    metrics=METRICS,
    docs="network.md"))
