"""Fault families: one package each, one registered ``FamilySpec`` carrying all it adds.

A family is a package ``chaos/faults/<family>/`` (or a module of another package, through
the ``trainchaos.families`` entry point or ``TRAINCHAOS_PLUGINS``) whose import registers
one ``FamilySpec`` (torchtitan's ``TrainSpec`` is the model: one record holds everything a
model family contributes). The spec says what the engine needs of the family without the
engine naming it:

- its fault types: the modules whose import registers them with ``chaos.faults.base
  .FAULT_TYPES`` (named, not imported: the spec stays cheap to load for a report that only
  wants the metrics), each type's ``family`` being the spec's ``name``;
- its metrics: a ``chaos.metrics.MetricFamily`` (its ``MetricSpec``s join the catalogue,
  its functions run in ``compute_metrics``, its ``explains_detection`` says which detection
  classes its faults explain);
- the run-scoped resources it plans before the nodes start (``mounts``: the storage fault
  layer's mounts) and the resource kinds it defines (modules registering them with
  ``chaos.runfiles.resources.RESOURCE_KINDS``, loaded whenever that registry is, so that
  ``trainchaos cleanup`` knows them in a fresh process);
- the probe actions its in-process types fire (``chaos.probe`` actions, by name);
- what users call the failures its types express (``meanings``: ``trainchaos validate``'s
  did-you-mean for an unknown type, ``chaos.schema.suggest``).
- the faults ``trainchaos run --crash-points`` writes (``crash_sweep``: the family whose
  fault layer can freeze at a durability boundary and lose power there).

The backend capabilities it acts through are its types' ``requires`` (``requires()`` here
gathers them), declared once, on the type that uses them.

The registries of fault types, metric families and resource kinds are fed from the specs
by the ``load_*`` functions below, which they name as built-ins (``module:function``): they
never import this module, and this module imports none of the families.

Built-in families are found, not listed: every subpackage of ``chaos.faults`` is one.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import chaos.faults
from chaos.util.registry import Registry

if TYPE_CHECKING:
    from chaos.cluster.base import StorageMount
    from chaos.faults.base import FaultType
    from chaos.metrics.family import MetricFamily
    from chaos.workload.base import StorageLayout

__all__ = ["FAMILIES", "CrashSweep", "FamilySpec", "Meaning", "MountPlanner", "crash_sweep", "families",
           "load_fault_types", "load_metric_families", "load_resource_kinds", "planned_mounts",
           "register_family"]

MountPlanner = Callable[[dict[str, Any], "StorageLayout | None", str], "tuple[StorageMount, ...]"]
"""``(scenario as plain dicts, the workload's storage layout, run dir) -> mounts``."""

Meaning = tuple[tuple[tuple[str, ...], ...], tuple[tuple[str, str], ...]]
"""``(phrases, ((type, why), ...))``: a phrase is a set of canonical words (``("storage",
"slow")``, the tokens of ``chaos.schema.suggest``) that must all appear in the unknown type
a user wrote for the family's types to be suggested, each with one line of why."""


@dataclass(frozen=True)
class CrashSweep:
    """The fault types of the checkpoint durability sweep (``chaos.runner.crashsweep``): one arms
    the fault layer to freeze at one point of a save (right after a durability boundary, or
    at a file operation) and report it as the event ``event``; the others, triggered by that
    event, are the crash there: a power loss, or a process crash."""

    arm_type: str
    """Params ``tier``, ``save_step``, ``after`` (-1: count the boundaries, freeze at none);
    process points: ``model``, ``op``, ``when``, ``path``, ``cut``, ``prev_step``, ``trace_ops``."""
    power_loss_type: str
    """Params ``tier``; a node target."""
    event: str
    process_crash_type: str = ""
    """Params ``tier``; a node target; empty: the family offers no process crash."""


@dataclass(frozen=True)
class FamilySpec:
    name: str
    """The family's name: every one of its fault types has it as ``FaultType.family``."""
    summary: str
    """What the family stands for, in one line."""
    fault_modules: tuple[str, ...]
    """Modules whose import registers the family's fault types."""
    metrics: MetricFamily | None = None
    """What the family adds to the metrics; None: the engine's own metrics say it all."""
    mounts: MountPlanner | None = None
    """The storage-layer mounts a scenario's faults of this family need, planned before any
    node starts and handed to the backend in ``RunSpec.mounts``; None: it needs none."""
    resource_modules: tuple[str, ...] = ()
    """Modules whose import registers the run-scoped resource kinds the family creates."""
    probe_actions: tuple[str, ...] = ()
    """The ``chaos.probe`` actions its in-process fault types fire."""
    meanings: tuple[Meaning, ...] = ()
    """What users call the failures its types express, for did-you-mean."""
    crash_sweep: CrashSweep | None = None
    """The types ``trainchaos run --crash-points`` writes; None: the family has none."""
    docs: str = ""
    """Its page under docs/ (``network.md``)."""

    def fault_types(self) -> dict[str, type[FaultType]]:
        """Its registered fault types by name."""
        from chaos.faults.base import known_types

        return {name: cls for name, cls in known_types().items() if cls.family == self.name}

    def requires(self) -> tuple[type, ...]:
        """Every backend capability one of its types acts through, each once."""
        found: list[type] = []
        for cls in self.fault_types().values():
            found += [cap for cap in cls.requires if cap not in found]
        return tuple(found)


def _builtin_families() -> tuple[str, ...]:
    """Every subpackage of ``chaos.faults``: adding a family is adding a package."""
    return tuple(f"chaos.faults.{info.name}" for info in sorted(
        pkgutil.iter_modules(chaos.faults.__path__), key=lambda i: i.name) if info.ispkg)


FAMILIES: Registry[FamilySpec] = Registry("fault family", key=lambda spec: spec.name,
                                          builtins=_builtin_families(), group="trainchaos.families")
"""Every fault family by name: the subpackages of ``chaos.faults``, then the modules of
``TRAINCHAOS_PLUGINS`` and the ``trainchaos.families`` entry point group."""

register_family = FAMILIES.register
"""Make a ``FamilySpec`` known (a family package calls it on its spec at import)."""


def families() -> dict[str, FamilySpec]:
    """Every registered family by name, in name order."""
    return FAMILIES.known()


def load_fault_types() -> None:
    """Import every family's fault-type modules (``FAULT_TYPES`` names this as a built-in)."""
    for spec in families().values():
        for module in spec.fault_modules:
            importlib.import_module(module)


def load_metric_families() -> None:
    """Register every family's ``MetricFamily`` (the metric-family registry's built-in)."""
    from chaos.metrics.registry import METRIC_FAMILIES

    for spec in families().values():
        if spec.metrics is not None:
            METRIC_FAMILIES.register(spec.metrics)


def load_resource_kinds() -> None:
    """Import every family's resource-kind modules (``RESOURCE_KINDS`` names this)."""
    for spec in families().values():
        for module in spec.resource_modules:
            importlib.import_module(module)


def crash_sweep() -> CrashSweep | None:
    """The crash-point sweep's fault types, from the family that has them (None: none does)."""
    return next((spec.crash_sweep for spec in families().values() if spec.crash_sweep is not None), None)


def planned_mounts(scenario: dict[str, Any], layout: StorageLayout | None, run_dir: str
                   ) -> tuple[StorageMount, ...]:
    """Every mount the scenario's faults need, family by family (``FamilySpec.mounts``)."""
    return tuple(mount for spec in families().values() if spec.mounts is not None
                 for mount in spec.mounts(scenario, layout, run_dir))
