"""The run-wide checkers: metric families that belong to no fault family (exactly-once
data, reload sanity, checkpoint freshness, survivors' restarts and stalls). They measure
every run whichever faults fire (a checkpoint that silently rolled back is wrong after a
kill, a partition or no fault at all), have no fault types, capabilities or resources, so
they are not ``chaos.faults`` families: one module each here, defining ``FAMILY``.
``load`` (a built-in of ``chaos.metrics.registry.METRIC_FAMILIES``) registers every module
here, so adding a checker is adding a module. What a fault family measures lives in its own
package (``chaos/faults/<family>/metrics.py``)."""

from __future__ import annotations

import importlib
import pkgutil

__all__ = ["load"]


def load() -> None:
    from chaos.metrics.family import MetricFamily
    from chaos.metrics.registry import METRIC_FAMILIES

    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        family = getattr(importlib.import_module(f"{__name__}.{info.name}"), "FAMILY", None)
        if isinstance(family, MetricFamily):
            METRIC_FAMILIES.register(family)
