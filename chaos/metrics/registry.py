"""The registered metric families, a ``chaos.util.registry.Registry`` like every pluggable kind.

Its built-ins come from two places, both named here as ``module:function`` (this module
imports neither): the run-wide checkers of ``chaos.metrics.families`` (each module there
defines ``FAMILY``) and the metric families the registered fault families carry
(``chaos.faults.family.FamilySpec.metrics``). The entry-point group
``trainchaos.metric_families`` adds metric families from other packages (an entry point
names a ``MetricFamily``; one that fails to load is logged and skipped, so a broken plugin
cannot take every report's metrics down); ``register_family`` adds one at run time (a
test)."""

from __future__ import annotations

from chaos.metrics.family import MetricFamily
from chaos.util.registry import Registry

__all__ = ["ENTRY_POINT_GROUP", "METRIC_FAMILIES", "families", "register_family", "unregister_family"]

ENTRY_POINT_GROUP = "trainchaos.metric_families"

METRIC_FAMILIES: Registry[MetricFamily] = Registry(
    "metric family", key=lambda family: family.name, group=ENTRY_POINT_GROUP, isolate_entry_points=True,
    builtins=("chaos.metrics.families:load", "chaos.faults.family:load_metric_families"))

register_family = METRIC_FAMILIES.register
"""Add a metric family; its specs join the catalogue."""


def unregister_family(name: str) -> None:
    """Remove a family (tests register one for a while)."""
    METRIC_FAMILIES.unregister(name)


def families() -> tuple[MetricFamily, ...]:
    """Every registered family, in name order (the catalogue's order of their metrics)."""
    return tuple(METRIC_FAMILIES.known().values())
