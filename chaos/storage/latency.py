"""Per-operation latency drawn from a distribution (``io_slow``'s ``distribution``): pure
logic, no FUSE, no I/O.

Storage latency is not a constant: an object store's or a metadata server's response times
have a long tail, and a checkpoint's save time is set by its slowest requests. Each rule
draws the delay of every operation it slows from its own seeded generator, one per
operation class, so a repeat of the plan draws the same sequence for the same class
(the order operations reach the layer in may still differ between runs).

Operation classes: ``metadata`` (open, create, rename, unlink, mkdir, rmdir, readdir,
getattr, statfs: what a metadata server answers) and ``data`` (read, write, fsync, flush,
truncate: what the data servers or the disk do).

Distributions, each around a scale in milliseconds (``data_ms`` or ``metadata_ms``):

``fixed``      the scale, every time;
``uniform``    uniform over ``scale * (1 - spread)`` .. ``scale * (1 + spread)`` (its mean);
``lognormal``  ``scale * exp(N(0, sigma))`` (its median; a long right tail for large sigma);
``pareto``     ``scale * Pareto(alpha)`` (its minimum; a heavy tail: infinite variance for
               alpha <= 2, infinite mean for alpha <= 1);

each capped at ``max_ms`` when set.
"""

from __future__ import annotations

import math
import random
import threading
from typing import Any

__all__ = ["DISTRIBUTIONS", "METADATA_OPS", "LatencyDraw", "op_class"]

DISTRIBUTIONS: tuple[str, ...] = ("fixed", "uniform", "lognormal", "pareto")
METADATA_OPS: frozenset[str] = frozenset({"open", "create", "rename", "unlink", "mkdir", "rmdir", "readdir",
                                          "getattr", "statfs"})


def op_class(op: str) -> str:
    return "metadata" if op in METADATA_OPS else "data"


class LatencyDraw:
    """The delays of one rule: ``spec`` is the rule's ``latency_dist`` mapping (``distribution``,
    ``data_ms``, ``metadata_ms``, ``spread``, ``sigma``, ``alpha``, ``max_ms``)."""

    def __init__(self, spec: dict[str, Any], seed: str) -> None:
        self.spec = spec
        if spec.get("distribution", "fixed") not in DISTRIBUTIONS:
            raise ValueError(f"latency distribution {spec.get('distribution')!r}; allowed: {', '.join(DISTRIBUTIONS)}")
        self._rngs = {cls: random.Random(f"{seed}/latency/{cls}") for cls in ("data", "metadata")}
        self._lock = threading.Lock()

    def seconds(self, op: str) -> float:
        cls = op_class(op)
        scale = float(self.spec.get(f"{cls}_ms") or 0.0)
        if scale <= 0:
            return 0.0
        dist = self.spec.get("distribution", "fixed")
        with self._lock:
            rng = self._rngs[cls]
            if dist == "uniform":
                spread = float(self.spec.get("spread", 0.5))
                ms = rng.uniform(scale * (1 - spread), scale * (1 + spread))
            elif dist == "lognormal":
                ms = scale * math.exp(rng.gauss(0.0, float(self.spec.get("sigma", 0.5))))
            elif dist == "pareto":
                ms = scale * rng.paretovariate(float(self.spec.get("alpha", 2.0)))
            else:
                ms = scale
        cap = self.spec.get("max_ms")
        return (min(ms, float(cap)) if cap is not None else ms) / 1000.0
