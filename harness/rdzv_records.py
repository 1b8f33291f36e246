"""torchrun's rendezvous, naming the events it records without ``inspect.stack()``.

Every state change of torch's c10d rendezvous (``dynamic_rendezvous``: joining, keep-alives,
a round completing, a node leaving) is recorded as an event named after the method that
recorded it, and ``get_method_name`` finds that name with ``inspect.stack()``, twice per
event. ``inspect.stack()`` builds every frame's source context: it reads the source file of
each frame and searches ``sys.modules`` (about 2,000 modules once torch is imported) for
each frame's module. On this machine that is 2 ms a call once the sources are cached, and a
torchrun agent's whole CPU during a run was mostly that: a warm agent of a fault-free 2-node
run took 0.63-0.95 CPU-s, 0.17-0.23 with the names read off the frame (2026-12-03). Every
node's agent pays it in every rendezvous round, so a restart's rendezvous is slower by it
on any host; on a few cores shared by many simulated nodes, the ranks wait on it too.

Under ``harness.warm_start`` (trainchaos's quick launch path, which the run record names)
the agent's prelude replaces ``get_method_name`` with :func:`method_name`: the same names,
read off the frame. A cold agent runs torchrun as shipped, as a stack's own launch does.
"""

from __future__ import annotations

import sys

__all__ = ["method_name", "name_records_by_frame"]


def method_name(depth: int = 2) -> str:
    """What ``dynamic_rendezvous.get_method_name(depth)`` returns: the name of the function
    ``depth`` frames above this one (1: its caller), ``"no_method_name"`` above the stack."""
    try:
        return sys._getframe(depth).f_code.co_name  # noqa: SLF001 (what inspect.currentframe uses)
    except ValueError:
        return "no_method_name"


def name_records_by_frame() -> bool:
    """Make torch's rendezvous name its events with :func:`method_name`; False (and torch as
    it is) where that torch has no ``get_method_name`` to replace."""
    try:
        from torch.distributed.elastic.rendezvous import dynamic_rendezvous
    except ImportError:
        return False
    if not callable(getattr(dynamic_rendezvous, "get_method_name", None)):
        return False
    dynamic_rendezvous.get_method_name = method_name
    return True
