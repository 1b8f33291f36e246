"""One registry per kind of pluggable thing (fault types, backends, resource kinds, ...).

Each kind keeps the same three sources, loaded once, on the first lookup:

1. its built-ins, listed *as module names* (imported with ``importlib``): the module that
   declares a registry never imports its members, so a member importing the registry back
   (to register itself) makes no import cycle. An entry ``module:function`` also calls the
   function after the import: how a registry is fed from another (the fault types and the
   metric families of the registered fault families, ``chaos.faults.family``);
2. the modules in ``TRAINCHAOS_PLUGINS`` (comma-separated; one module may register things of
   several kinds), the way a team adds its own without packaging them;
3. the entry points of the kind's group (``trainchaos.faults``, ``trainchaos.backends``,
   ``trainchaos.resource_kinds``, ``trainchaos.workloads``, ``trainchaos.families``,
   ``trainchaos.metric_families``), so an installed package adds its own with no edit here. An entry point may name a module (whose import registers what it
   defines) or one object, registered as it is loaded.

Members register with the registry's ``register`` decorator; a second, different member
under a taken name is an error (two plugins fighting over a name must not be settled by
import order).
"""

from __future__ import annotations

import importlib
import logging
import os
import types
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from chaos import contract

__all__ = ["Registry", "load_plugins"]

"""Comma-separated modules imported before anything is looked up in a registry: a team's own
fault types (or backends, resource kinds...) register themselves on import."""

T = TypeVar("T")

_imported: set[str] = set()


def load_plugins() -> None:
    """Import every module named in ``TRAINCHAOS_PLUGINS`` (once each)."""
    for name in (n.strip() for n in os.environ.get(contract.PLUGINS_ENV, "").split(",")):
        if name and name not in _imported:
            _imported.add(name)
            importlib.import_module(name)


class Registry(Generic[T]):
    """Members of one kind by name."""

    def __init__(self, kind: str, key: Callable[[T], str], builtins: tuple[str, ...] = (),
                 group: str | None = None, unknown: Callable[[str], KeyError] = KeyError,
                 isolate_entry_points: bool = False) -> None:
        self.kind = kind
        """What a member is, in messages (``fault type``)."""
        self.key = key
        self.builtins = builtins
        self.group = group
        self.unknown = unknown
        """Raised by ``lookup`` for a name nobody registered (a KeyError subclass)."""
        self.isolate_entry_points = isolate_entry_points
        """An entry point that fails to load is logged and skipped instead of raised: for a
        kind whose consumers must keep working without it (a broken plugin's metrics must
        not take the built-in metrics of every report down)."""
        self.items: dict[str, T] = {}
        self._entry_points_read = False

    def register(self, item: T) -> T:
        """Decorator: make ``item`` known by its key."""
        name = self.key(item)
        if name in self.items and self.items[name] is not item:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self.items[name] = item
        return item

    def unregister(self, name: str) -> None:
        self.items.pop(name, None)

    def load(self) -> None:
        """Built-ins, ``TRAINCHAOS_PLUGINS`` (read again each time: cheap, and a test may set
        it), then the entry points: read once per process, since scanning the installed
        packages' metadata costs milliseconds per lookup and they do not change under a run."""
        for builtin in self.builtins:
            module, _, function = builtin.partition(":")
            imported = importlib.import_module(module)
            if function:
                getattr(imported, function)()
        load_plugins()
        if self.group is None or self._entry_points_read:
            return
        self._entry_points_read = True
        for ep in entry_points(group=self.group):
            try:
                loaded = ep.load()
            except Exception:
                if not self.isolate_entry_points:
                    raise
                logging.getLogger(__name__).exception("%s %s not loaded", self.kind, ep.name)
                continue
            if not isinstance(loaded, types.ModuleType):
                self.register(loaded)

    def lookup(self, name: str) -> T:
        self.load()
        try:
            return self.items[name]
        except KeyError:
            raise self.unknown(name) from None

    def known(self) -> dict[str, T]:
        """Every member, by name in order."""
        self.load()
        return dict(sorted(self.items.items()))
