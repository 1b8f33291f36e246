"""Workload kinds, by name: what ``workload:`` in a scenario names (``harness``, ``command``,
or any registered kind: ``workload: {KIND: options}``).

The ``Workload`` seam (``chaos.workload.base``): a kind's class is the only code of the
engine that knows how its job is launched and read. The built-in kinds are listed here as
module names (``chaos.util.registry``), imported on first use, each registering itself; another
package adds a kind through the entry-point group ``trainchaos.workloads`` (``name =
"package.module:Class"``), a module in ``TRAINCHAOS_PLUGINS`` or ``register_workload``;
the scenario schema (``chaos.schema.workload_doc``) is built from the kinds registered, so
such a kind is validated, listed by ``trainchaos schema`` and documented like a built-in
one. docs/engine.md, "Adding a workload", walks through one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from chaos.errors import ScenarioError, ValidationIssue
from chaos.util.registry import Registry
from chaos.workload.base import Launch, StorageLayout, Workload, WorkloadSection
from chaos.workload.torchrun import TorchrunPerNode

if TYPE_CHECKING:
    from chaos.model import scenario as records

__all__ = ["ENTRY_POINT_GROUP", "DEFAULT_KIND", "Launch", "StorageLayout", "TorchrunPerNode",
           "UnknownWorkload", "WORKLOADS", "Workload", "WorkloadSection", "kind_of", "known_workloads",
           "load_resource_kinds", "lookup_workload", "register_workload", "workload_for"]

ENTRY_POINT_GROUP = "trainchaos.workloads"
DEFAULT_KIND = "harness"
"""The kind of a scenario that leaves ``workload`` out."""

_BUILTIN = ("chaos.workload.harness", "chaos.workload.command", "chaos.workload.lightning",
            "chaos.workload.accelerate", "chaos.workload.dcp", "chaos.workload.nvrx_inprocess",
            "chaos.workload.torchft", "chaos.workload.deepspeed", "chaos.workload.megatron")
"""The built-in kinds' modules, in the order the reference lists them (each registers itself)."""


class UnknownWorkload(ScenarioError):
    """A workload kind nobody registered: located, with the known kinds."""

    def __init__(self, name: str, known: list[str], file: str = "<scenario>",
                 location: str = "workload") -> None:
        self.name = name
        super().__init__([ValidationIssue(file, location, f"unknown workload kind {name!r}; "
                                                          f"known: {', '.join(known)}")])


def _kind(cls: type[Workload]) -> str:
    if not (isinstance(cls, type) and issubclass(cls, Workload)):
        raise TypeError(f"{cls!r} is not a chaos.workload.Workload")
    return cls.kind


WORKLOADS: Registry[type[Workload]] = Registry("workload kind", _kind, builtins=_BUILTIN,
                                               group=ENTRY_POINT_GROUP)
register_workload = WORKLOADS.register
"""Class decorator: make a workload kind known by its ``kind``."""


def known_workloads() -> dict[str, type[Workload]]:
    """Every kind, the built-in ones first (in the order a scenario's reference lists them)."""
    known = WORKLOADS.known()
    builtin = {cls.kind: cls for cls in known.values() if cls.__module__ in _BUILTIN}
    builtin = dict(sorted(builtin.items(), key=lambda item: _BUILTIN.index(item[1].__module__)))
    return {**builtin, **known}


def lookup_workload(name: str, file: str = "<scenario>", location: str = "workload") -> type[Workload]:
    """The kind called ``name``; UnknownWorkload (exit 2, located at ``file``/``location``) if none is."""
    known = known_workloads()
    if name not in known:
        raise UnknownWorkload(name, list(known), file, location)
    return known[name]


def load_resource_kinds() -> None:
    """Import every kind's resource-kind modules (``Workload.resource_modules``;
    ``chaos.runfiles.resources.RESOURCE_KINDS`` names this, so that layer names no kind)."""
    for cls in known_workloads().values():
        for module in cls.resource_modules:
            importlib.import_module(module)


def kind_of(spec: records.Workload | WorkloadSection | None) -> str:
    """The kind a scenario's workload names: the key of it that is set (``command``,
    ``harness``); the default kind when it is left out."""
    if spec is None:
        return DEFAULT_KIND
    given = getattr(spec, "model_fields_set", None)  # a document: the keys written
    kind = getattr(spec, "kind", None)
    if given is None and isinstance(kind, str) and kind:  # a record of a kind with an options key
        return kind
    for name in known_workloads():
        if (name in given) if given is not None else getattr(spec, name, None) is not None:
            return name
    return DEFAULT_KIND


def workload_for(spec: records.Workload) -> Workload:
    """The workload of a validated scenario (``Scenario.workload``)."""
    return lookup_workload(kind_of(spec))(spec)
