"""Network faults on an emulated fabric (partitions, link flaps, packet loss, bandwidth,
latency) and Toxiproxy toxics on TCP services; their metrics (slowdown, heal time).

The family's ``FamilySpec`` (``chaos.faults.family``); the types are in ``faults``.
"""

from __future__ import annotations

from chaos.faults.family import FamilySpec, Meaning, register_family
from chaos.faults.network.metrics import METRICS

__all__ = ["FAMILY", "MEANINGS"]

MEANINGS: tuple[Meaning, ...] = (
    # what users call a failure -> this family's types that express it (chaos.schema.suggest)
    ((("partition",), ("brain",), ("network", "fail")), (
        ("partition", "cuts the fabric: isolates nodes, splits them into groups, or drops one direction"),
    )),
    ((("network", "slow"), ("link", "slow")), (
        ("latency", "delays every packet on the target links"),
        ("bandwidth", "limits the rate of the target nodes' links"),
    )),
    ((("packet", "loss"), ("network", "loss")), (
        ("packet_loss", "loses a share of the packets on the target nodes' links"),
    )),
    ((("bandwidth",),), (
        ("bandwidth", "limits the rate of the target nodes' links"),
    )),
    ((("flap",), ("link", "fail")), (
        ("link_flap", "takes links down for down_s every period_s"),
    )),
    ((("toxic",),), (
        ("toxic", "a Toxiproxy toxic on a proxied TCP service"),
    )),
)

FAMILY = register_family(FamilySpec(
    "network",
    "partitions, link flaps, packet loss, bandwidth, latency, TCP-service toxics",
    fault_modules=("chaos.faults.network.faults", "chaos.faults.network.latency",
                   "chaos.faults.network.toxic"),
    meanings=MEANINGS,
    metrics=METRICS,
    docs="network.md"))
