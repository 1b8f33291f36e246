"""The typed scenario: what ``chaos.scenario.load`` builds from YAML and the runner consumes.

Plain dataclasses with a docstring per field, easy to build in tests. The scenario *file* is
declared in ``chaos.schema.models`` (validation, JSON Schema, docs/scenario.md), which takes
its defaults from these records; ``chaos.schema.build`` turns a validated file into them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, make_dataclass
from typing import TYPE_CHECKING, Any, Literal

__all__ = ["Backend", "Bound", "Expectation", "FaultSpec", "Scenario", "Targets", "Topology", "Trigger",
           "Workload"]

TriggerKind = Literal["at_step", "at_time", "after_event", "random", "poisson", "every"]


@dataclass(frozen=True)
class Topology:
    nodes: int = 2
    """Simulated nodes: one torchrun agent each."""
    ranks_per_node: int = 2
    """Worker processes per node (``--nproc-per-node``)."""
    min_nodes: int | None = None
    """Elastic lower bound (``--nnodes MIN:MAX``); None = all nodes required."""
    max_restarts: int = 3
    """Group restarts torchrun allows before the job fails."""
    racks: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Rack name -> node indices (each node in at most one rack)."""
    power_domains: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Power domain name -> node indices (each node in at most one domain)."""
    spares: int = 0
    """Extra nodes started beside ``nodes``: they wait in the rendezvous and join the next
    round when a node is lost. Their indices are ``nodes .. nodes + spares - 1``."""

    @property
    def world_size(self) -> int:
        """Ranks of the job at full size (spares excluded: they only stand in)."""
        return self.nodes * self.ranks_per_node

    @property
    def total_nodes(self) -> int:
        """Nodes the backend starts: the job's nodes plus its spares."""
        return self.nodes + self.spares

    def rack_of(self, node: int) -> str | None:
        return next((name for name, members in self.racks.items() if node in members), None)

    def power_domain_of(self, node: int) -> str | None:
        return next((name for name, members in self.power_domains.items() if node in members), None)


@dataclass(frozen=True)
class Backend:
    name: str = "local"
    """A registered cluster backend (``chaos.cluster.known_backends``): local, netns, ..."""
    options: dict[str, Any] = field(default_factory=dict)
    """The backend's own options, validated by its ``options_model`` (defaults filled in)."""


@dataclass(frozen=True)
class Workload:
    harness: dict[str, Any] | None = None
    """Options of the bundled harness (``python -m harness --help``); None when ``command``."""
    command: str | None = None
    """A user's own training command, run per node by torchrun (``{nproc}``... see docs)."""
    progress_regex: str | None = None
    """For ``command``: regex with named groups ``step`` (and optionally ``loss``) on log lines."""
    steps: int | None = None
    """For ``command``: the step it trains to (``workload.steps``); None when not stated."""
    checkpoint_dir: str | None = None
    """For ``command``: where it saves checkpoints, relative to the run directory
    (``workload.checkpoint_dir``); None: the run's ``checkpoints``."""
    checkpoint_every_steps: int | None = None
    """For ``command``: how often it saves (``workload.checkpoint_every_steps``); None: not stated."""
    warm_start: bool | None = None
    """For ``command``: its ranks forked by a per-node zygote that has imported torch
    (``workload.warm_start``); None: ``TRAINCHAOS_WARM_START``, else cold."""
    kind: str | None = None
    """A kind whose options are a mapping under its own key (``lightning``, ``accelerate``:
    ``chaos.workload.script``): its name; None for ``harness`` and ``command``."""
    options: dict[str, Any] | None = None
    """That kind's options, as its ``validate`` accepted them (defaults filled in)."""


@dataclass(frozen=True)
class Trigger:
    kind: TriggerKind
    """at_step | at_time | after_event | random | poisson | every."""
    at_step: int | None = None
    """at_step: the step (in-process faults land exactly there, signals at N or N+1)."""
    at_time_s: float | None = None
    """at_time: seconds after the first step of the run."""
    event: str | None = None
    """after_event: the event kind waited for (``ckpt_save_end``, ``step_end``...)."""
    count: int = 1
    """after_event: fire on the count-th such event."""
    delay_s: float = 0.0
    """after_event: extra delay after the event."""
    window_s: tuple[float, float] | None = None
    """random: fire at a seeded uniform time in [lo, hi] seconds after the first step."""
    mtbf_s: float | None = None
    """poisson: mean time between faults (seeded exponential gaps)."""
    interval_s: float | None = None
    """every: seconds between faults, the first that long after the first step."""
    max_faults: int = 1
    """poisson, every: at most this many faults."""


@dataclass(frozen=True)
class FaultSpec:
    index: int
    """Position in ``faults`` (for locations in messages)."""
    type: str
    """A registered fault type (``trainchaos faults``)."""
    target: dict[str, Any]
    """As written: ``{rank: 3}``, ``{ranks: [1, 2]}``, ``{node: 1}``, ``{nodes: [0, 1]}``,
    ``{rack: r1}``, ``{power_domain: pd-a}``, ``{random: rank|node|rack|power_domain}``.
    Resolved to live processes at injection time (``chaos.cluster.base``)."""
    trigger: Trigger
    params: dict[str, Any] = field(default_factory=dict)
    """Type-specific parameters, defaults filled in."""
    probability: float = 1.0
    """Chance the fault fires when triggered (seeded)."""
    name: str | None = None

    @property
    def fault_id(self) -> str:
        return self.name or f"f{self.index}-{self.type}"


@dataclass(frozen=True)
class Bound:
    max: float | None = None
    min: float | None = None


@dataclass(frozen=True)
class _TargetsBase:
    """The targets that are not a metric's bound, and access to a target's bound by metric
    key, whether or not it is a field (see Targets)."""

    final_state: Literal["matches_baseline", "loss_within"] | None = None
    loss_tolerance: float = 0.05
    """For ``final_state: loss_within``: max relative deviation from the baseline loss."""
    attribution: Literal["correct"] | None = None
    """``correct``: the first detection must blame the faulty rank/node and failure class."""
    data: Literal["exactly_once", "at_least_once", "bounds"] | None = None
    """The exactly-once data checker: the mode as written (exactly_once, at_least_once,
    bounds) and the bounds it stands for (None: not bounded)."""
    data_max_lost: int | None = None
    data_max_duplicated: int | None = None
    completes: bool = True
    """The run must reach its last step within ``timeout_s``."""

    def bound(self, key: str) -> Bound | None:
        """The bound set on metric ``key``; None when the scenario sets none."""
        if key in self.__dataclass_fields__:
            value = getattr(self, key)
            return value if isinstance(value, Bound) else None
        return self.__dict__.get("_more_bounds", {}).get(key)

    @classmethod
    def with_bounds(cls, bounds: Mapping[str, Bound | None], **modes: Any) -> Any:
        """Targets from ``{metric key: bound}`` and the non-bound targets (final_state...). A
        key without a field (a metric family registered after this module was imported, in a
        test) is kept aside: ``bound`` finds it, the journal's scenario dict does not list it."""
        names = cls.__dataclass_fields__
        named: dict[str, Any] = {k: v for k, v in bounds.items() if k in names}
        targets = cls(**modes, **named)
        more = {k: v for k, v in bounds.items() if k not in names and v is not None}
        object.__setattr__(targets, "_more_bounds", more)
        return targets


def _targets_class() -> type:
    """``Targets``: the non-bound targets (``_TargetsBase``), then one ``Bound | None`` field
    per metric of the catalogue that can be a target (``chaos.metrics.catalogue.target_specs``),
    so that a new metric with a target is one entry in its family's list, here as in the schema."""
    from chaos.metrics.catalogue import target_specs

    bounds = [(s.key, "Bound | None", field(default=None)) for s in target_specs()]
    return make_dataclass("Targets", bounds, bases=(_TargetsBase,), frozen=True,
                          namespace={"__module__": __name__, "__doc__": "What a run must achieve: "
                                     "the bound of each metric target (None: not a target), and "
                                     "final_state, attribution, data and completes."})


if TYPE_CHECKING:
    class Targets(_TargetsBase):
        """What a type checker sees of ``Targets``, built at run time by ``_targets_class``
        (a class made by ``make_dataclass`` is a value, not a type, to mypy): the non-bound
        targets as declared there, and each metric's bound as an attribute."""

        def __init__(self, **targets: Any) -> None: ...

        def __getattr__(self, key: str) -> Bound | None: ...
else:
    Targets = _targets_class()


@dataclass(frozen=True)
class Expectation:
    """A known finding (``expect: {fail: REASON, issue: URL}``): the run is expected to miss
    its targets. Missing them is reported ``XFAIL`` and does not fail the suite; meeting them
    is ``XPASS`` (fails only with ``--strict``). A run trainchaos itself broke is an error
    whatever the expectation: the finding was not reproduced, nothing was learned."""

    fail: str
    """Why the run is expected to miss its targets (shown with the XFAIL)."""
    issue: str | None = None
    """Where the finding is tracked (an http(s) URL), shown beside the reason."""


@dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    description: str = ""
    seed: int = 0
    workload: Workload = field(default_factory=Workload)
    topology: Topology = field(default_factory=Topology)
    faults: tuple[FaultSpec, ...] = ()
    targets: Targets = field(default_factory=Targets)
    baseline: bool = False
    repeat: int = 1
    timeout_s: float = 300.0
    backend: Backend = field(default_factory=Backend)
    expect: Expectation | None = None
    """Set for a scenario that ships a known finding: see ``Expectation``."""
