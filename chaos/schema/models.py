"""The scenario file, declared once.

These models are the schema: ``chaos.scenario`` validates documents with them, the JSON
Schema (``trainchaos schema``) and the reference in docs/scenario.md are generated from
them. Each field's docstring is its documentation; defaults come from the records in
``chaos.model`` (what the runner reads), so they are written once too.

What a model cannot know on its own is checked across fields in ``chaos.schema.checks``:
ranks and nodes against the topology, at_step against the harness's steps, a fault type's
parameters and target kinds, a backend's options.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    create_model,
    model_validator,
)

from chaos import model as records
from chaos.events import KINDS as _EVENT_KIND_NAMES
from chaos.metrics.catalogue import target_specs
from chaos.schema.types import MAX_SECONDS, NAME_RULE, Expect, Name, Noun, StrictModel, index_list

__all__ = [
    "MAX_NODES",
    "MAX_RANKS_PER_NODE",
    "MAX_SPARES",
    "MAX_TOTAL_NODES",
    "AfterEventDoc",
    "BoundDoc",
    "ExpectationDoc",
    "FaultDoc",
    "FractionBoundDoc",
    "LossWithinDoc",
    "PoissonDoc",
    "RandomDoc",
    "ScenarioDoc",
    "SuiteDoc",
    "TargetDoc",
    "TargetsDoc",
    "TopologyDoc",
    "TriggerDoc",
    "WorkloadDoc",
]

# Limits of what one machine can host: every node is a torchrun agent with its own processes.
MAX_NODES = 8
MAX_RANKS_PER_NODE = 8
MAX_SPARES = 8
MAX_TOTAL_NODES = 12
"""nodes + spares."""
MAX_RESTARTS = 20
MAX_REPEAT = 100

EventKind = Literal[tuple(_EVENT_KIND_NAMES)]  # type: ignore[valid-type]
RankList = index_list("rank")
NodeList = index_list("node")
LinkList = Annotated[
    list[Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=2, max_length=2)]],
    Field(min_length=1),
    Expect("a non-empty list of directed links [from, to] (node numbers)"),
]


def _default(record: type, name: str) -> Any:
    """The default of a ``chaos.model`` record's field: declared there, once."""
    (found,) = (f for f in dataclasses.fields(record) if f.name == name)
    assert found.default is not dataclasses.MISSING, f"{record.__name__}.{name} has no plain default"
    return found.default


def optional_key(**constraints: Any) -> Any:
    """A key that may be left out but not written as null (``rank: null`` is an error): the
    None default is never validated, and the JSON Schema shows no default for it."""
    return Field(None, **constraints)


def _given(model: StrictModel) -> list[str]:
    return [name for name in type(model).model_fields if name in model.model_fields_set]


# --------------------------------------------------------------------------- workload


def _progress_regex(value: str) -> str:
    try:
        compiled = re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    if "step" not in compiled.groupindex:
        raise ValueError("needs a named group 'step', e.g. 'step (?P<step>\\d+)' "
                         "(optionally also 'loss': '(?P<loss>[\\d.]+)')")
    return value


MAX_POISSON_FAULTS = 1000
"""Each fault of a Poisson trigger is planned (and journaled) one by one."""

MAX_COMMAND_STEPS = 10_000_000
"""More steps than any run of this tool could train in its timeout; a bound keeps a typo
from turning into a number the progress display and metrics would carry around."""


_COMMAND_ONLY = ("progress_regex", "steps")
"""Keys of ``command`` itself; every other key of ``WorkloadDoc`` is a workload kind."""

_KIND_HINTS = {"harness": "options of the bundled training job",
               "command": "your own training command"}
"""How the one-kind error tells the first two kinds; a stack's kind is told by its name."""


class WorkloadDoc(StrictModel):
    """The training job under test: exactly one kind, by its key: `harness` (the bundled job),
    `command` (your own command line), or a training stack's own script run per rank by
    torchrun (`lightning`, `accelerate`, `dcp`, `nvrx_inprocess`), or a torchft job (`torchft`)."""

    model_config = ConfigDict(json_schema_extra=lambda schema: _one_kind_schema(schema))

    harness: dict[str, Any] | None = None
    """Options of the bundled harness, as in `python -m harness --help`, nested by section
    (model, checkpoint, failure); null or {} means all defaults."""
    command: str = optional_key(min_length=1)
    """Your own training command, started on each node by torchrun; it reports progress
    through chaos.probe or, with progress_regex, through its log lines."""
    progress_regex: Annotated[str, AfterValidator(_progress_regex)] = optional_key()
    """Only with command: a regular expression applied to its log lines, with a named group
    `step` (required) and `loss` (optional)."""
    steps: int = optional_key(ge=1, le=MAX_COMMAND_STEPS)
    """Only with command: the step the command trains to. The run is complete when it is
    reached; progress shows it, and at_step triggers are checked against it."""
    lightning: dict[str, Any] | None = None
    """A Lightning Trainer script run per rank by torchrun (DDP); null or {} runs the
    bundled example (examples/lightning/train.py)."""
    accelerate: dict[str, Any] | None = None
    """An Accelerate training script run per rank by torchrun; null or {} runs the bundled
    example (examples/accelerate/train.py)."""
    dcp: dict[str, Any] | None = None
    """A DDP/FSDP2 script checkpointing with torch.distributed.checkpoint, run per rank by
    torchrun; null or {} runs the bundled example (examples/dcp/train.py)."""
    nvrx_inprocess: dict[str, Any] | None = None
    """A training function wrapped by NVIDIA's in-process restart (inprocess.Wrapper), run per
    rank by torchrun; null or {} runs the bundled example (examples/nvrx_inprocess/train.py)."""
    torchft: dict[str, Any] | None = None
    """A torchft job: a lighthouse, and one torchrun per replica group (a topology node);
    null or {} runs the bundled example (examples/torchft/train.py)."""

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        kinds = [name for name in type(self).model_fields if name not in _COMMAND_ONLY]
        given = [name for name in kinds if name in self.model_fields_set]
        if len(given) != 1:
            told = ", ".join(f"'{k}' ({_KIND_HINTS[k]})" if k in _KIND_HINTS else f"'{k}'"
                             for k in kinds)
            raise ValueError(f"give exactly one workload kind: {told}; got "
                             + (" and ".join(f"'{k}'" for k in given) if given else "none"))
        return self


def _one_kind_schema(schema: dict[str, Any]) -> None:
    """Exactly one kind's key; ``progress_regex`` and ``steps`` only beside ``command``."""
    kinds = [name for name in schema.get("properties", {}) if name not in _COMMAND_ONLY]
    schema["oneOf"] = [
        {"required": [kind]} if kind == "command" else
        {"required": [kind], "not": {"anyOf": [{"required": [key]} for key in _COMMAND_ONLY]}}
        for kind in kinds]


# --------------------------------------------------------------------------- topology


class TopologyDoc(StrictModel):
    """The nodes of the job (one torchrun agent each, `ranks_per_node` workers per node),
    spare nodes, and how nodes group into racks and power domains."""

    nodes: int = Field(_default(records.Topology, "nodes"), ge=1, le=MAX_NODES)
    """Nodes of the job."""
    ranks_per_node: int = Field(_default(records.Topology, "ranks_per_node"), ge=1,
                                le=MAX_RANKS_PER_NODE)
    """Worker processes per node; the world size is nodes * ranks_per_node."""
    min_nodes: int | None = Field(_default(records.Topology, "min_nodes"), ge=1, le=MAX_NODES)
    """Elastic lower bound, at most nodes: the job continues with this many nodes left;
    null means every node is required (no elastic shrink)."""
    max_restarts: int = Field(_default(records.Topology, "max_restarts"), ge=0, le=MAX_RESTARTS)
    """Group restarts torchrun allows before the job fails."""
    spares: int = Field(_default(records.Topology, "spares"), ge=0, le=MAX_SPARES)
    """Extra nodes started beside `nodes` that wait in the rendezvous and join when a node is
    lost; their indices follow the job's nodes (nodes .. nodes + spares - 1). nodes + spares
    is at most 12."""
    racks: dict[Name, NodeList] = {}
    """Rack name -> node indices (spares included), e.g. {r1: [0, 1], r2: [2, 3]}; each node
    in at most one rack. Makes {rack: NAME} and {random: rack} targets possible."""
    power_domains: dict[Name, NodeList] = {}
    """Power domain name -> node indices (spares included), e.g. {pd-a: [0, 1]}; each node in
    at most one power domain. Makes {power_domain: NAME} and {random: power_domain} targets
    possible."""


# --------------------------------------------------------------------------- faults


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
        given = _given(self)
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(type(self).model_fields)}; got "
                             + (", ".join(given) if given else "none"))
        return self


class AfterEventDoc(StrictModel):
    """Fire after the count-th event of a kind (any process), delay_s later."""

    event: Annotated[EventKind, Noun("event kind")]
    """The event kind to wait for."""
    count: int = Field(_default(records.Trigger, "count"), ge=1)
    """Fire on the count-th such event."""
    delay_s: float = Field(_default(records.Trigger, "delay_s"), ge=0, le=MAX_SECONDS)
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
    max_faults: int = Field(_default(records.Trigger, "max_faults"), ge=1, le=MAX_POISSON_FAULTS)
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

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        given = _given(self)
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
    """When to inject: exactly one of at_step, at_time, after_event, random, poisson."""
    probability: float = Field(_default(records.FaultSpec, "probability"), gt=0, le=1)
    """Chance that the fault fires when triggered (seeded)."""
    params: dict[str, Any] | None = None
    """The type's own parameters (see Fault types below); left-out ones get their defaults."""


# --------------------------------------------------------------------------- targets


def _check_bound(bound: BoundDoc) -> None:
    if bound.max is None and bound.min is None:
        raise ValueError("give max and/or min")
    if bound.max is not None and bound.min is not None and bound.min > bound.max:
        raise ValueError(f"min ({bound.min:g}) is greater than max ({bound.max:g}): "
                         "no value can pass")


class BoundDoc(StrictModel):
    """A bound on a measured value: max and/or min, min <= max."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    max: float = optional_key(ge=0)
    """The measured value must be at most this."""
    min: float = optional_key(ge=0)
    """The measured value must be at least this."""

    @model_validator(mode="after")
    def _some_bound(self) -> Self:
        _check_bound(self)
        return self


class FractionBoundDoc(StrictModel):
    """A bound on a fraction: max and/or min, between 0 and 1, min <= max."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    max: float = optional_key(ge=0, le=1)
    """The measured fraction must be at most this."""
    min: float = optional_key(ge=0, le=1)
    """The measured fraction must be at least this."""

    @model_validator(mode="after")
    def _some_bound(self) -> Self:
        _check_bound(self)  # type: ignore[arg-type]
        return self


class LossWithinDoc(StrictModel):
    """Final loss within a relative tolerance of the baseline's."""

    loss_within: float = Field(gt=0)
    """The max relative loss deviation from the baseline, e.g. 0.05."""


def _name_or_mapping(value: Any) -> str:
    return "mapping" if isinstance(value, dict) else "name"


class DataBoundsDoc(StrictModel):
    """How many samples the surviving training may lose or train twice (docs/checkers.md)."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    max_lost: int = optional_key(ge=0)
    """At most this many samples lost (never trained by the surviving training)."""
    max_duplicated: int = optional_key(ge=0)
    """At most this many extra trainings of a sample by the surviving training."""

    @model_validator(mode="after")
    def _some_bound(self) -> Self:
        if self.max_lost is None and self.max_duplicated is None:
            raise ValueError("give max_lost and/or max_duplicated")
        return self


def _metric_targets() -> type[StrictModel]:
    """One optional key per metric of the catalogue that can be a target
    (``chaos.metrics.catalogue.target_specs``): a ``{max, min}`` bound, or a bound on a
    fraction; its description is the metric's ``target_doc``."""
    forms = {"bound": BoundDoc, "fraction_bound": FractionBoundDoc}
    keys: dict[str, Any] = {
        spec.key: (forms[spec.target or "bound"], Field(None, description=" ".join(spec.target_doc.split())))
        for spec in target_specs()
    }
    return create_model("MetricTargetsDoc", __base__=StrictModel, **keys)


class TargetsDoc(_metric_targets()):  # type: ignore[misc]
    """What a run must achieve; every key is optional."""

    key_noun = "target"

    final_state: Annotated[
        Annotated[Literal["matches_baseline"], Tag("name")] | Annotated[LossWithinDoc, Tag("mapping")],
        Discriminator(_name_or_mapping),
        Expect("matches_baseline or {loss_within: X}"),
    ] = optional_key()
    """Correctness against the fault-free baseline run (needs baseline: true):
    matches_baseline (bitwise equal final model) or {loss_within: X}."""
    attribution: Annotated[Literal["correct"], Noun("attribution target")] = optional_key()
    """correct: the first detection must blame the faulty rank/node and failure class."""
    data: Annotated[
        Annotated[Literal["exactly_once", "at_least_once"], Tag("name")] | Annotated[DataBoundsDoc, Tag("mapping")],
        Discriminator(_name_or_mapping),
        Expect("exactly_once, at_least_once or {max_lost: N, max_duplicated: N}"),
    ] = optional_key()
    """The exactly-once data checker (the workload reports its samples: probe.samples or
    probe.track; docs/checkers.md): exactly_once (no sample lost or trained twice by the
    training that survived), at_least_once (none lost; repeats allowed) or
    {max_lost: N, max_duplicated: N}. Samples are counted against the fault-free twin's
    when baseline: true."""
    completes: bool = _default(records.Targets, "completes")
    """The run must reach its last step within timeout_s."""


# --------------------------------------------------------------------------- scenario


def _one_backend(value: dict[str, Any]) -> dict[str, Any]:
    if len(value) != 1:
        raise ValueError("give one backend with its options, as {NAME: {options}}; got "
                         + (", ".join(map(str, value)) if value else "none"))
    return value


BackendChoice = Annotated[
    Annotated[str, Tag("name"), Field(min_length=1)]
    | Annotated[dict[str, dict[str, Any] | None], AfterValidator(_one_backend), Tag("mapping")],
    Discriminator(_name_or_mapping),
    Expect("a backend name (backend: local) or one backend with its options "
           "(backend: {NAME: {options}})"),
]


_ISSUE_URL = r"^https?://[^\s/]+\S*$"


def _issue_url(value: str) -> str:
    if not re.fullmatch(_ISSUE_URL, value):
        raise ValueError(f"{value!r} is not a link: give the http(s) URL where the finding is tracked "
                         "(e.g. https://github.com/org/repo/issues/12)")
    return value


class ExpectationDoc(StrictModel):
    """A known finding shipped as a scenario (pytest's xfail for resilience): the run is
    expected to miss its targets."""

    key_noun = "expect key"

    fail: str = Field(min_length=1)
    """Why the run is expected to miss its targets. A run that misses them is reported XFAIL
    with this reason and does not fail the suite (exit 0); one that meets every target is
    reported XPASS (exit 1 only with `--strict`). A failure of trainchaos itself is still an
    error."""
    issue: Annotated[str, AfterValidator(_issue_url)] = optional_key(
        json_schema_extra={"pattern": _ISSUE_URL, "format": "uri"})
    """The http(s) URL where the finding is tracked, shown beside the reason."""


class ScenarioDoc(StrictModel):
    """A trainchaos scenario: a training workload, a topology, the faults to inject and the
    targets the run must meet."""

    name: Name = Field(description=f"The scenario's name: {NAME_RULE}. It names the report "
                       "folder, so it must be unique in a suite.")
    description: str = _default(records.Scenario, "description")
    """Free text, shown in reports."""
    seed: int = Field(_default(records.Scenario, "seed"), ge=0)
    """Seeds random targets and triggers (and the baseline twin)."""
    workload: WorkloadDoc = optional_key()
    """The training job; left out: the bundled harness with its defaults (null is refused:
    a section written empty is most likely one whose content was lost)."""
    topology: TopologyDoc = TopologyDoc()
    """Nodes, ranks per node, spares, racks and power domains."""
    backend: BackendChoice | None = None
    """Where the nodes run: a backend name or {NAME: {options}}; left out: local."""
    baseline: bool = _default(records.Scenario, "baseline")
    """Also run a fault-free twin with the same seed; needed by targets.final_state."""
    faults: Annotated[list[FaultDoc], Expect("a list of faults")] | None = None
    """The faults to inject."""
    targets: TargetsDoc | None = None
    """What the run must achieve."""
    repeat: int = Field(_default(records.Scenario, "repeat"), ge=1, le=MAX_REPEAT)
    """Independent repetitions."""
    timeout_s: float = Field(_default(records.Scenario, "timeout_s"), gt=0, le=MAX_SECONDS)
    """Wall-clock limit of one run, seconds."""
    expect: ExpectationDoc = optional_key()
    """A known finding: {fail: REASON, issue: URL}. Missing the targets is then XFAIL (the
    suite still passes), meeting them XPASS (fails with --strict)."""


class SuiteDoc(StrictModel):
    """A suite file: scenario files, directories and other suite files, run in order."""

    key_noun = "suite key"

    suite: Annotated[
        list[Annotated[str, Field(min_length=1), Expect("a path")]],
        Field(min_length=1),
        Expect("a non-empty list of scenario files, directories or suite files (relative to "
               "this file)"),
    ]
    """Paths relative to the suite file."""
    name: str = optional_key()
    """The suite's name."""
    description: str = optional_key()
    """Free text."""
