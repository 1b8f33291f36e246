"""Cluster backends, by name: what ``backend:`` in a scenario picks (default ``local``).

A backend starts the nodes of one run and answers the questions the runner, the faults and
cleanup ask (``chaos.cluster.base.ClusterBackend``). Nothing outside this package names a
concrete backend: they are looked up here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chaos.cluster.base import ClusterBackend

__all__ = ["UnknownBackend", "backend_of", "known_backends", "lookup_backend", "register_backend"]

_REGISTRY: dict[str, type[ClusterBackend]] = {}


class UnknownBackend(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def register_backend(cls: type[ClusterBackend]) -> type[ClusterBackend]:
    """Class decorator: make a backend known by its ``name``."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"backend {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def _load_builtin() -> None:
    import chaos.cluster.docker  # noqa: F401  (the docker backend and its resource kinds)
    import chaos.cluster.local  # noqa: F401  (registers itself)
    import chaos.cluster.netns  # noqa: F401
    import chaos.cluster.slurm  # noqa: F401


def lookup_backend(name: str) -> type[ClusterBackend]:
    _load_builtin()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownBackend(name) from None


def known_backends() -> dict[str, type[ClusterBackend]]:
    _load_builtin()
    return dict(sorted(_REGISTRY.items()))


def backend_of(record: dict[str, Any], capability: type, default: str) -> type[Any]:
    """The backend class that made a journaled change (``record["backend"]``; ``default`` for
    records written before faults named their backend), to undo it from the journal alone
    through the capability's classmethods (``trainchaos cleanup``: no backend running)."""
    from chaos.cluster.capabilities import describe, has
    from chaos.errors import ToolError

    cls = lookup_backend(str(record.get("backend") or default))
    if not has(cls, capability):
        raise ToolError(f"backend {cls.name} has no {describe(capability)}: cannot undo {record!r}")
    return cls
