"""The registered metric families. The built-in ones are the modules of
``chaos.metrics.families`` (each defines ``FAMILY``), loaded by name so that this module
imports none of them; the entry-point group ``trainchaos.metric_families`` adds families
from other packages (an entry point names a ``MetricFamily``); ``register_family`` adds one
at run time (a test)."""

from __future__ import annotations

import importlib
import logging
import pkgutil
from importlib.metadata import entry_points

from chaos.metrics.family import MetricFamily

__all__ = ["ENTRY_POINT_GROUP", "families", "register_family", "unregister_family"]

ENTRY_POINT_GROUP = "trainchaos.metric_families"
_BUILTIN_PACKAGE = "chaos.metrics.families"

_FAMILIES: dict[str, MetricFamily] = {}
_loaded = False


def register_family(family: MetricFamily) -> MetricFamily:
    """Add (or replace, by name) a metric family; its specs join the catalogue."""
    _load_builtin()
    _FAMILIES[family.name] = family
    return family


def unregister_family(name: str) -> None:
    """Remove a family (tests register one for a while)."""
    _FAMILIES.pop(name, None)


def families() -> tuple[MetricFamily, ...]:
    """Every registered family: the built-in ones in module-name order, then the others."""
    _load_builtin()
    return tuple(_FAMILIES.values())


def _load_builtin() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    package = importlib.import_module(_BUILTIN_PACKAGE)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{_BUILTIN_PACKAGE}.{info.name}")
        family = getattr(module, "FAMILY", None)
        if isinstance(family, MetricFamily):
            _FAMILIES.setdefault(family.name, family)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            family = point.load()
        except Exception:  # noqa: BLE001 - a broken plugin must not take the built-in metrics down
            logging.getLogger(__name__).exception("metric family %s not loaded", point.name)
            continue
        if isinstance(family, MetricFamily):
            _FAMILIES.setdefault(family.name, family)
