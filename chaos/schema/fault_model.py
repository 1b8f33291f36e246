"""A fault of the scenario file: its envelope (type, name, target, trigger, probability).

Part of the schema (``chaos.schema.models`` holds the scenario around it); a type's own
``params`` are declared by the type (``chaos.faults``) and checked across fields in
``chaos.schema.checks``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from chaos.model import scenario as records
from chaos.model.types import (
    MAX_SECONDS,
    Expect,
    NodeList,
    Noun,
    RankList,
    StrictModel,
    given_keys,
    optional_key,
    record_default,
)
from chaos.runfiles.events import KINDS as _EVENT_KIND_NAMES

__all__ = ["AfterEventDoc", "EveryDoc", "FaultDoc", "PoissonDoc", "RandomDoc", "TargetDoc", "TriggerDoc"]

if TYPE_CHECKING:
    # The kinds are the catalogue's (chaos.runfiles.events), known when the module loads: a Literal built
    # from a tuple at run time is a value to mypy, so it sees the plain string the kinds are.
    EventKind = str
else:
    EventKind = Literal[tuple(_EVENT_KIND_NAMES)]
LinkList = Annotated[
    list[Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=2, max_length=2)]],
    Field(min_length=1),
    Expect("a non-empty list of directed links [from, to] (node numbers)"),
]

MAX_POISSON_FAULTS = 1000
"""Each fault of a Poisson trigger is planned (and journaled) one by one."""


class TargetDoc(StrictModel):
    """Which rank(s), node(s), links or job a fault hits: exactly one key. Rank faults take
    rank targets; node faults take node, rack and power-domain targets; partition and
    latency also take links; preempt_job and toxic take only {job: true}. Each type's forms:
    its Targets line under Fault types."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1, "maxProperties": 1})
    key_noun = "target key"
    misplaced_params_where = "target"

    rank: int = optional_key(ge=0)
    """One rank, 0 .. world size - 1."""
    ranks: RankList = optional_key()
    """Several ranks, hit at once."""
    node: int = optional_key(ge=0)
    """One node, 0 .. nodes + spares - 1."""
    nodes: NodeList = optional_key()
    """Several nodes, hit at once."""
    replica_group: int = optional_key(ge=0)
    """One replica group of a torchft workload, 0 .. nodes - 1 (group i runs on node i): its
    node for node faults, its ranks for rank faults."""
    rack: str = optional_key(min_length=1)
    """Every node of a rack declared under topology.racks."""
    power_domain: str = optional_key(min_length=1)
    """Every node of a power domain declared under topology.power_domains."""
    links: LinkList = optional_key()
    """Directed links between nodes, [[from, to], ...] (``[[0, 1], [1, 0]]``: both ways
    between nodes 0 and 1), for the network faults that act on links."""
    job: bool = optional_key()
    """The whole job, ``{job: true}`` (false is refused): for faults that act on the job itself (preempt_job)."""
    random: Annotated[Literal["rank", "node", "rack", "power_domain"],
                      Noun("random target")] = optional_key()
    """A seeded random pick of a rank, node, rack or power domain."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        given = given_keys(self)
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(type(self).model_fields)}; got "
                             + (", ".join(given) if given else "none"))
        return self


class AfterEventDoc(StrictModel):
    """Fire after the count-th event of a kind (any process), delay_s later."""

    event: Annotated[EventKind, Noun("event kind")]
    """The event kind to wait for."""
    count: int = Field(record_default(records.Trigger, "count"), ge=1)
    """Fire on the count-th such event."""
    delay_s: float = Field(record_default(records.Trigger, "delay_s"), ge=0, le=MAX_SECONDS)
    """Seconds to wait after the event."""


def _window(window: list[float]) -> list[float]:
    lo, hi = window
    if lo >= hi:
        raise ValueError(f"[{lo:g}, {hi:g}] is empty: need lo < hi")
    return window


class RandomDoc(StrictModel):
    """Fire once at a seeded uniform time in a window."""

    window_s: Annotated[list[Annotated[float, Field(ge=0)]], Field(min_length=2, max_length=2),
                        AfterValidator(_window),
                        Expect("[lo, hi]: seconds after the first step, 0 <= lo < hi")]
    """[lo, hi]: seconds after the first step, 0 <= lo < hi."""


class PoissonDoc(StrictModel):
    """Fire at seeded exponential gaps (a Poisson process), in order. An occurrence due while
    its target has no live process (the job still restarting from the previous one) fires
    once the target lives again: the sustained-failure experiment of docs/stacks.md."""

    mtbf_s: float = Field(gt=0, le=MAX_SECONDS)
    """Mean seconds between faults."""
    max_faults: int = Field(record_default(records.Trigger, "max_faults"), ge=1, le=MAX_POISSON_FAULTS)
    """At most this many faults."""


class EveryDoc(StrictModel):
    """Fire at a fixed interval, in order: the first `interval_s` after the first step, then
    every `interval_s`. As with `poisson`, an occurrence due while its target has no live
    process fires once the target lives again; the later ones keep their times."""

    interval_s: float = Field(gt=0, le=MAX_SECONDS)
    """Seconds between faults (and from the first step to the first)."""
    max_faults: int = Field(record_default(records.Trigger, "max_faults"), ge=1, le=MAX_POISSON_FAULTS)
    """At most this many faults."""


class TriggerDoc(StrictModel):
    """When a fault fires: exactly one key. In-process faults (bitflip, crash_during_checkpoint,
    device_error, straggler) are delivered by the probe at an exact step and take only
    at_step."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1, "maxProperties": 1})
    key_noun = "trigger"

    at_step: int = optional_key(ge=1)
    """At this step; with the harness, below workload.harness.steps."""
    at_time: float = optional_key(gt=0, le=MAX_SECONDS)
    """Seconds after the first step of the run."""
    after_event: AfterEventDoc = optional_key()
    """After an event: {event: K, count: 1, delay_s: 0}."""
    random: RandomDoc = optional_key()
    """At a seeded uniform time: {window_s: [lo, hi]}."""
    poisson: PoissonDoc = optional_key()
    """Seeded exponential gaps: {mtbf_s: M, max_faults: 1}."""
    every: EveryDoc = optional_key()
    """A fixed interval: {interval_s: S, max_faults: 1}."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        given = given_keys(self)
        if len(given) != 1:
            raise ValueError(f"give exactly one trigger of {', '.join(type(self).model_fields)}; "
                             "got " + (" and ".join(given) if given else "none"))
        return self


class FaultDoc(StrictModel):
    """One fault: the common envelope (type, name, target, trigger, probability) plus the
    type's own params."""

    misplaced_params_where = "the fault's envelope"

    type: str = Field(min_length=1)
    """A registered fault type: `trainchaos faults` lists them with their parameters."""
    name: str = optional_key(min_length=1)
    """Unique among the faults; names the fault in reports (default: f<index>-<type>)."""
    target: TargetDoc
    """Which rank(s) or node(s) to hit: exactly one of {rank: R}, {ranks: [R, ...]},
    {node: N}, {nodes: [N, ...]}, {replica_group: G}, {rack: NAME}, {power_domain: NAME},
    {links: [[FROM, TO], ...]},
    {job: true}, {random: rank|node|rack|power_domain}."""
    trigger: TriggerDoc
    """When to inject: exactly one of at_step, at_time, after_event, random, poisson, every."""
    probability: float = Field(record_default(records.FaultSpec, "probability"), gt=0, le=1)
    """Chance that the fault fires when triggered (seeded)."""
    params: dict[str, Any] | None = None
    """The type's own parameters (see Fault types below); left-out ones get their defaults."""
