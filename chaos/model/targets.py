"""Target forms: what a fault's ``target:`` names, one class per form, one interpreter.

A scenario writes a target as a one-key mapping (``{rank: 3}``, ``{nodes: [0, 1]}``,
``{rack: r1}``, ``{random: power_domain}``...); ``parse_target`` turns it into its form,
and every reader asks the form: the plan (``draw`` a ``random`` pick, ``planned``: the
topology's view), the backend at injection time (``resolve``: the live processes it means
now), a game day's guard (``ranks``/``nodes``), validation (``level``, ``word``) and the
check that nodes are left (``nodes``). Nothing else looks inside the mapping.

This module imports nothing of the backends: ``resolve`` reads the live state through the
small ``LiveState`` protocol, which ``chaos.cluster.base.ClusterBackend`` satisfies.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from chaos.errors import ToolError
from chaos.model.scenario import Topology

__all__ = ["TARGET_FORMS", "LiveState", "ResolvedTarget", "TargetForm", "TargetUnavailable", "parse_target"]


class TargetUnavailable(ToolError):
    """A fault's target has no live process at injection time: trainchaos cannot inject it,
    which says nothing about the training stack."""


@dataclass(frozen=True)
class ResolvedTarget:
    """The ranks, nodes and processes a fault hits, resolved from live state.

    A node target names the ranks living on it at that moment as well: blaming either is a
    correct attribution.
    """

    ranks: tuple[int, ...] = ()
    nodes: tuple[int, ...] = ()
    pids: dict[int, int] = field(default_factory=dict)
    """rank -> pid of its live worker (empty for a target resolved from the topology only)."""
    links: tuple[tuple[int, int], ...] = ()
    """Directed links [from, to] of a ``{links: ...}`` target (``nodes`` holds their ends)."""

    def srcs(self) -> list[str]:
        """Event sources blamed by a correct attribution (``rank-3``, ``node-1``)."""
        return [f"rank-{r}" for r in self.ranks] + [f"node-{n}" for n in self.nodes]

    def describe(self) -> str:
        parts = []
        if self.ranks:
            parts.append("rank " + ",".join(map(str, self.ranks)))
        if self.nodes:
            parts.append("node " + ",".join(map(str, self.nodes)))
        return " ".join(parts) or "job"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ranks": list(self.ranks), "nodes": list(self.nodes),
                               "pids": {str(r): p for r, p in self.pids.items()}}
        if self.links:
            out["links"] = [list(link) for link in self.links]
        return out


class LiveRankView(Protocol):
    # Read-only: a backend's record of a live rank is frozen (``chaos.cluster.base.LiveRank``).
    @property
    def node(self) -> int: ...

    @property
    def pid(self) -> int: ...


class LiveState(Protocol):
    """What ``resolve`` reads of a run's backend: where ranks live now, which nodes run."""

    topology: Topology

    def rank_process(self, rank: int) -> LiveRankView | None: ...

    def live_ranks(self) -> dict[int, Any]: ...

    def node_alive(self, node: int) -> bool: ...

    def poll(self) -> dict[int, Any]: ...


class TargetForm:
    """One form of ``target:``; subclasses name their ``key`` and interpret their value."""

    key: ClassVar[str]
    level: ClassVar[str]
    """What it hits, as fault types declare it (``target_kinds``): rank, node, job or link."""
    word: ClassVar[str]
    """The form in words, for messages (``power domain``)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def spec(self) -> dict[str, Any]:
        """The form as a scenario writes it."""
        return {self.key: self.value}

    def draw(self, topology: Topology, rng: random.Random) -> TargetForm:
        """The target with any seeded pick made (only ``random`` picks)."""
        return self

    def ranks(self) -> tuple[int, ...] | None:
        """The ranks a rank-level form names; None for the others."""
        return None

    def nodes(self, topology: Topology) -> tuple[int, ...] | None:
        """The node indices a node-level form names; None for a rank form. An unknown rack
        or power domain raises KeyError."""
        return None

    def planned(self, topology: Topology) -> ResolvedTarget:
        """The topology's view (dry runs, in-process faults): a node form also names the
        ranks that start on its nodes (both are right to blame)."""
        nodes = self.nodes(topology) or ()
        starting = tuple(r for n in nodes if n < topology.nodes
                         for r in range(n * topology.ranks_per_node, (n + 1) * topology.ranks_per_node))
        return ResolvedTarget(ranks=starting, nodes=nodes)

    def resolve(self, live: LiveState) -> ResolvedTarget:
        """The processes the form means now; raises TargetUnavailable when none lives."""
        nodes = self.nodes(live.topology)
        if nodes is None:
            raise ToolError(f"cannot resolve target {self.spec()!r}")
        dead = [n for n in nodes if not live.node_alive(n)]
        if dead:
            raise TargetUnavailable(
                f"node {', '.join(map(str, dead))} has no live process at injection time "
                "(already down); nothing was injected")
        on_nodes = {r: lr for r, lr in live.live_ranks().items() if lr.node in nodes}
        return ResolvedTarget(ranks=tuple(sorted(on_nodes)), nodes=nodes,
                              pids={r: lr.pid for r, lr in sorted(on_nodes.items())},
                              links=self.links())

    def links(self) -> tuple[tuple[int, int], ...]:
        return ()


TARGET_FORMS: dict[str, type[TargetForm]] = {}


def _form(cls: type[TargetForm]) -> type[TargetForm]:
    TARGET_FORMS[cls.key] = cls
    return cls


class _RankForm(TargetForm):
    level, word = "rank", "rank"

    def planned(self, topology: Topology) -> ResolvedTarget:
        return ResolvedTarget(ranks=self.ranks() or ())

    def resolve(self, live: LiveState) -> ResolvedTarget:
        ranks = self.ranks() or ()
        pids = {}
        for rank in ranks:
            process = live.rank_process(rank)
            if process is None:
                raise TargetUnavailable(
                    f"rank {rank} has no live process at injection time (the job now has "
                    f"ranks {sorted(live.live_ranks()) or 'none'}); nothing was injected")
            pids[rank] = process.pid
        return ResolvedTarget(ranks=ranks, pids=pids)


@_form
class Rank(_RankForm):
    key = "rank"

    def ranks(self) -> tuple[int, ...]:
        return (int(self.value),)


@_form
class Ranks(_RankForm):
    key = "ranks"

    def ranks(self) -> tuple[int, ...]:
        return tuple(int(r) for r in self.value)


@_form
class Node(TargetForm):
    key, level, word = "node", "node", "node"

    def nodes(self, topology: Topology) -> tuple[int, ...]:
        return (int(self.value),)


@_form
class Nodes(TargetForm):
    key, level, word = "nodes", "node", "node"

    def nodes(self, topology: Topology) -> tuple[int, ...]:
        return tuple(int(n) for n in self.value)


@_form
class ReplicaGroup(TargetForm):
    """A torchft replica group: group i runs on node i."""

    key, level, word = "replica_group", "node", "replica group"

    def nodes(self, topology: Topology) -> tuple[int, ...]:
        return (int(self.value),)


@_form
class Rack(TargetForm):
    key, level, word = "rack", "node", "rack"
    groups: ClassVar[str] = "racks"
    """The topology's field that declares them."""

    def nodes(self, topology: Topology) -> tuple[int, ...]:
        return tuple(getattr(topology, self.groups)[self.value])


@_form
class PowerDomain(Rack):
    key, level, word = "power_domain", "node", "power domain"
    groups = "power_domains"


@_form
class Job(TargetForm):
    """The whole job, as it runs when the fault is due."""

    key, level, word = "job", "job", "job"

    def nodes(self, topology: Topology) -> tuple[int, ...]:
        return tuple(range(topology.nodes))

    def resolve(self, live: LiveState) -> ResolvedTarget:
        ranks = live.live_ranks()
        running = tuple(sorted(n for n, s in live.poll().items() if s.returncode is None and not s.lost))
        return ResolvedTarget(ranks=tuple(sorted(ranks)), nodes=running,
                              pids={r: lr.pid for r, lr in sorted(ranks.items())})


@_form
class Links(TargetForm):
    """Directed links between nodes; the nodes are their ends."""

    key, level, word = "links", "link", "link"

    def nodes(self, topology: Topology) -> tuple[int, ...]:
        return tuple(sorted({int(n) for link in self.value for n in link}))

    def links(self) -> tuple[tuple[int, int], ...]:
        return tuple((int(a), int(b)) for a, b in self.value)


@_form
class RandomPick(TargetForm):
    """``{random: rank|node|rack|power_domain}``: drawn once at plan time (seeded)."""

    key, level, word = "random", "node", "random pick"

    @property
    def picks(self) -> type[TargetForm]:
        """The form the pick is of (its level and words are the pick's)."""
        return TARGET_FORMS[self.value]

    def draw(self, topology: Topology, rng: random.Random) -> TargetForm:
        if self.value == "node":
            return Node(rng.randrange(topology.nodes))
        form = TARGET_FORMS.get(self.value)
        if form is not None and issubclass(form, Rack):  # a rack or a power domain
            return form(rng.choice(sorted(getattr(topology, form.groups))))
        return Rank(rng.randrange(topology.world_size))

    # Not drawn yet: it names no rank or node (``nodes``/``ranks`` say None, ``resolve``
    # refuses it).


def parse_target(target: dict[str, Any]) -> TargetForm:
    """The form of a one-key target mapping (validated already, or a game day's plan)."""
    for key, value in target.items():
        form = TARGET_FORMS.get(key)
        if form is not None:
            return form(value)
    raise ToolError(f"cannot resolve target {target!r}")
