"""Cluster backends, by name: what ``backend:`` in a scenario picks (default ``local``).

A backend starts the nodes of one run and answers the questions the runner, the faults and
cleanup ask (``chaos.cluster.base.ClusterBackend``); what it can do beyond that it declares
as capabilities (``chaos.cluster.capabilities``). Nothing outside this package names a
concrete backend: they are looked up here, in a registry (``chaos.util.registry``) that lists the
built-in ones as module names and takes others from ``TRAINCHAOS_PLUGINS`` and the
``trainchaos.backends`` entry point group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chaos.util.registry import Registry

if TYPE_CHECKING:
    from chaos.cluster.base import ClusterBackend

__all__ = ["BACKENDS", "UnknownBackend", "backend_as", "backend_of", "known_backends", "lookup_backend",
           "register_backend"]


class UnknownBackend(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


BACKENDS: Registry[type[ClusterBackend]] = Registry(
    "backend", key=lambda cls: cls.name, group="trainchaos.backends", unknown=UnknownBackend,
    builtins=("chaos.cluster.local", "chaos.cluster.netns", "chaos.cluster.docker", "chaos.cluster.slurm"))

register_backend = BACKENDS.register
"""Class decorator: make a backend known by its ``name``."""


def lookup_backend(name: str) -> type[ClusterBackend]:
    return BACKENDS.lookup(name)


def known_backends() -> dict[str, type[ClusterBackend]]:
    return BACKENDS.known()


def backend_as(name: str, capability: type) -> type[Any] | None:
    """The backend class called ``name``, to be used through ``capability``'s classmethods (a
    game day's ``Attachable.attach``); None when it does not declare it (the caller says which
    do, ``chaos.cluster.capabilities.providers``)."""
    from chaos.cluster.capabilities import has

    cls = lookup_backend(name)
    return cls if has(cls, capability) else None


def backend_of(record: dict[str, Any], capability: type) -> type[Any]:
    """The backend class that made a journaled change (``record["backend"]``), to undo it from
    the journal alone through the capability's classmethods (``trainchaos cleanup``: no
    backend running)."""
    from chaos.cluster.capabilities import describe, has
    from chaos.errors import ToolError

    name = record.get("backend")
    if not isinstance(name, str) or not name:
        raise ToolError(f"its fault journal record names no backend (a pre-release trainchaos "
                        f"wrote it), so no {capability.__name__} can undo it: undo {record!r} by hand")
    cls = lookup_backend(name)
    if not has(cls, capability):
        raise ToolError(f"backend {cls.name} has no {describe(capability)}: cannot undo {record!r}")
    return cls
