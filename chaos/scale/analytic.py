"""Closed forms the Monte-Carlo engine is checked against, and the classic optimum intervals.

Notation (seconds): M mean time between failures of the whole job, tau the training time
between checkpoints (``checkpoint.interval_s``), C the training time one checkpoint blocks,
P = tau + C one checkpoint period, D the downtime per failure (detection + restart + waiting
for a node), p the time after the blocking part until an async checkpoint is durable.

First-order ETTR: failures are rare (M >> P, D) and arrive uniformly in the period, so each
loses, on average, the running time since the last durable checkpoint, P/2 + p, plus its
downtime D; of the running time that is kept, the fraction tau/P trains::

    ETTR = (tau / P) * (1 - (D + P/2 + p) / M)

The neglected terms are of order (P/M)^2, (D/M)^2: failures during downtime, and the
shortened first period after a restart.
"""

from __future__ import annotations

import math

__all__ = ["daly_interval", "first_order_ettr", "poisson_se", "young_interval"]


def young_interval(mtbf_s: float, checkpoint_s: float) -> float:
    """Young (1974): tau = sqrt(2 C M), the first-order optimum."""
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval(mtbf_s: float, checkpoint_s: float) -> float:
    """Daly (2006), the higher-order optimum: for C < 2M,
    tau = sqrt(2CM) * (1 + sqrt(C/(2M))/3 + C/(18M)) - C; else tau = M."""
    c, m = checkpoint_s, mtbf_s
    if c >= 2.0 * m:
        return m
    return math.sqrt(2.0 * c * m) * (1.0 + math.sqrt(c / (2.0 * m)) / 3.0 + c / (18.0 * m)) - c


def first_order_ettr(mtbf_s: float, interval_s: float, blocking_s: float, downtime_s: float,
                     persist_s: float = 0.0) -> float:
    """The first-order effective training time ratio (module docstring)."""
    period = interval_s + blocking_s
    return (interval_s / period) * (1.0 - (downtime_s + period / 2.0 + persist_s) / mtbf_s)


def poisson_se(mean_count: float, trials: int) -> float:
    """Standard error of the mean of ``trials`` Poisson counts of this mean."""
    return math.sqrt(mean_count / trials)
