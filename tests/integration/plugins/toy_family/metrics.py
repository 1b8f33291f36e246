"""The toy family's metric: ``toy_ballast_mb``, the MiB of ballast the run's toy faults held
(from the injector's record of each, ``fault_injected.details.ballast_mb``)."""

from __future__ import annotations

from chaos.metrics import MetricFamily, MetricSpec, Tolerance
from chaos.metrics.family import RunContext

__all__ = ["METRICS"]


def _run_metrics(ctx: RunContext) -> dict[str, int]:
    held = [e["details"]["ballast_mb"] for e in ctx.timeline.events
            if e.get("kind") == "fault_injected" and isinstance(e.get("details"), dict)
            and "ballast_mb" in e["details"]]
    return {"toy_ballast_mb": int(sum(held))}


METRICS = MetricFamily(
    "toy",
    specs=(MetricSpec("toy_ballast_mb", "toy ballast", "count", "MiB", tolerance=Tolerance(rel=0.0, abs=0),
                      title="Toy ballast", meaning="MiB of ballast the toy faults held", target="bound",
                      target_doc="MiB of ballast the run's toy faults held (the toy test family)."),),
    run_metrics=_run_metrics,
)
