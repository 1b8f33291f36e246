"""Workload kinds, by name: what ``workload:`` in a scenario names (``harness``, ``command``).

The ``Workload`` seam (``chaos.workload.base``): a kind's class is the only code of the
engine that knows how its job is launched and read. The built-in kinds are listed here as
data (module and class), imported on first use; another package adds a kind through the
entry-point group ``trainchaos.workloads`` (``name = "package.module:Class"``) or by calling
``register_workload``. docs/engine.md, "Adding a workload", walks through one.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from chaos.errors import ScenarioError, ValidationIssue
from chaos.workload.base import Launch, StorageLayout, Workload
from chaos.workload.torchrun import TorchrunPerNode

if TYPE_CHECKING:
    from chaos import model as records
    from chaos.schema.models import WorkloadDoc

__all__ = ["ENTRY_POINT_GROUP", "DEFAULT_KIND", "Launch", "StorageLayout", "TorchrunPerNode",
           "UnknownWorkload", "Workload", "kind_of", "known_workloads", "lookup_workload",
           "register_workload", "workload_for"]

ENTRY_POINT_GROUP = "trainchaos.workloads"
DEFAULT_KIND = "harness"
"""The kind of a scenario that leaves ``workload`` out."""

_BUILTIN = {
    "harness": "chaos.workload.harness:HarnessWorkload",
    "command": "chaos.workload.command:CommandWorkload",
}
_REGISTRY: dict[str, type[Workload]] = {}


class UnknownWorkload(ScenarioError):
    """A workload kind nobody registered: located, with the known kinds."""

    def __init__(self, name: str, known: list[str], file: str = "<scenario>",
                 location: str = "workload") -> None:
        self.name = name
        super().__init__([ValidationIssue(file, location, f"unknown workload kind {name!r}; "
                                                          f"known: {', '.join(known)}")])


def register_workload(cls: type[Workload]) -> type[Workload]:
    """Class decorator: make a workload kind known by its ``kind``."""
    if cls.kind in _REGISTRY and _REGISTRY[cls.kind] is not cls:
        raise ValueError(f"workload kind {cls.kind!r} registered twice")
    _REGISTRY[cls.kind] = cls
    return cls


def _load(target: str) -> type[Workload]:
    module, _, name = target.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, Workload)):
        raise TypeError(f"{target} is not a chaos.workload.Workload")
    return cls


_ENTRY_POINTS_READ: list[bool] = []
"""Non-empty once the installed packages' entry points were read (once per process)."""


def _load_all() -> None:
    for name, target in _BUILTIN.items():
        if name not in _REGISTRY:
            register_workload(_load(target))
    if not _ENTRY_POINTS_READ:
        for entry in entry_points(group=ENTRY_POINT_GROUP):
            if entry.name not in _REGISTRY:
                register_workload(_load(entry.value))
        _ENTRY_POINTS_READ.append(True)


def known_workloads() -> dict[str, type[Workload]]:
    """Every kind, the built-in ones first (in the order a scenario's reference lists them)."""
    _load_all()
    builtin = {name: _REGISTRY[name] for name in _BUILTIN}
    return {**builtin, **dict(sorted(_REGISTRY.items()))}


def lookup_workload(name: str, file: str = "<scenario>", location: str = "workload") -> type[Workload]:
    """The kind called ``name``; UnknownWorkload (exit 2, located at ``file``/``location``) if none is."""
    if name in _BUILTIN and name not in _REGISTRY:
        register_workload(_load(_BUILTIN[name]))
    if name not in _REGISTRY:
        known = known_workloads()
        if name not in known:
            raise UnknownWorkload(name, list(known), file, location)
    return _REGISTRY[name]


def kind_of(spec: records.Workload | WorkloadDoc | None) -> str:
    """The kind a scenario's workload names: the key of it that is set (``command``,
    ``harness``); the default kind when it is left out."""
    if spec is None:
        return DEFAULT_KIND
    given = getattr(spec, "model_fields_set", None)  # a document: the keys written
    for name in known_workloads():
        if (name in given) if given is not None else getattr(spec, name, None) is not None:
            return name
    return DEFAULT_KIND


def workload_for(spec: records.Workload) -> Workload:
    """The workload of a validated scenario (``Scenario.workload``)."""
    return lookup_workload(kind_of(spec))(spec)
