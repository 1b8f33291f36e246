"""The scenario file, declared once: the scenario, its topology, a suite file.

A fault's envelope (target, trigger) is declared in ``chaos.schema.fault_model``, the
targets a run must meet in ``chaos.schema.targets_model``, the workload section by the
registered workload kinds (``chaos.schema.workload_doc``).

These models are the schema: ``chaos.scenario.load`` validates documents with them, the JSON
Schema (``trainchaos schema``) and the reference in docs/scenario.md are generated from
them. Each field's docstring is its documentation; defaults come from the records in
``chaos.model.scenario`` (what the runner reads), so they are written once too.

What a model cannot know on its own is checked across fields in ``chaos.schema.checks``:
ranks and nodes against the topology, at_step against the harness's steps, a fault type's
parameters and target kinds, a backend's options.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    Discriminator,
    Field,
    Tag,
)

from chaos.model import scenario as records
from chaos.model.types import (
    MAX_SECONDS,
    NAME_RULE,
    Expect,
    Name,
    NodeList,
    StrictModel,
    name_or_mapping,
    optional_key,
    record_default,
)
from chaos.schema.fault_model import FaultDoc
from chaos.schema.targets_model import TargetsDoc
from chaos.schema.workload_doc import WorkloadField

__all__ = [
    "MAX_NODES",
    "MAX_RANKS_PER_NODE",
    "MAX_SPARES",
    "MAX_TOTAL_NODES",
    "MAX_WORLD_SIZE",
    "ExpectationDoc",
    "ScenarioDoc",
    "SuiteDoc",
    "TopologyDoc",
]

# Limits of what one machine can host: every node is a torchrun agent with its own processes,
# every rank a process. Measured on the 2-core, 24 GiB reference machine
# (benchmarks/scale_bench.py --cluster, docs/scale.md#emulated-cluster-size): a warm rank takes
# 107 MiB at 8 ranks and 186 MiB at 64 (its per-peer buffers grow with the world), so 64 ranks
# take 12 GiB there and 128 an estimated 28-35 GiB: a larger host's size, allowed here.
MAX_NODES = 32
MAX_RANKS_PER_NODE = 8
MAX_SPARES = 8
MAX_TOTAL_NODES = MAX_NODES + MAX_SPARES
"""nodes + spares. Within what the netns fabric's plan holds: interface names
``tc-<8 hex>-h<node>`` stay within Linux's 15 characters for node < 100, and node addresses
``.10+node`` within the run's /24 (chaos/net/fabric.py; a unit test holds both)."""
MAX_WORLD_SIZE = 128
"""nodes * ranks_per_node: each rank is a process of this machine."""
MAX_RESTARTS = 20
MAX_REPEAT = 100


# --------------------------------------------------------------------------- topology


class TopologyDoc(StrictModel):
    """The nodes of the job (one torchrun agent each, `ranks_per_node` workers per node),
    spare nodes, and how nodes group into racks and power domains."""

    nodes: int = Field(record_default(records.Topology, "nodes"), ge=1, le=MAX_NODES)
    """Nodes of the job."""
    ranks_per_node: int = Field(record_default(records.Topology, "ranks_per_node"), ge=1,
                                le=MAX_RANKS_PER_NODE)
    """Worker processes per node; the world size is nodes * ranks_per_node, at most 128 (from
    16 ranks on, a harness job starts its ranks warm unless it says warm_start: false)."""
    min_nodes: int | None = Field(record_default(records.Topology, "min_nodes"), ge=1, le=MAX_NODES)
    """Elastic lower bound, at most nodes: the job continues with this many nodes left;
    null means every node is required (no elastic shrink)."""
    max_restarts: int = Field(record_default(records.Topology, "max_restarts"), ge=0, le=MAX_RESTARTS)
    """Group restarts torchrun allows before the job fails."""
    spares: int = Field(record_default(records.Topology, "spares"), ge=0, le=MAX_SPARES)
    """Extra nodes started beside `nodes` that wait in the rendezvous and join when a node is
    lost; their indices follow the job's nodes (nodes .. nodes + spares - 1). nodes + spares
    is at most 40."""
    racks: dict[Name, NodeList] = {}
    """Rack name -> node indices (spares included), e.g. {r1: [0, 1], r2: [2, 3]}; each node
    in at most one rack. Makes {rack: NAME} and {random: rack} targets possible."""
    power_domains: dict[Name, NodeList] = {}
    """Power domain name -> node indices (spares included), e.g. {pd-a: [0, 1]}; each node in
    at most one power domain. Makes {power_domain: NAME} and {random: power_domain} targets
    possible."""


# --------------------------------------------------------------------------- scenario


def _one_backend(value: dict[str, Any]) -> dict[str, Any]:
    if len(value) != 1:
        raise ValueError("give one backend with its options, as {NAME: {options}}; got "
                         + (", ".join(map(str, value)) if value else "none"))
    return value


BackendChoice = Annotated[
    Annotated[str, Tag("name"), Field(min_length=1)]
    | Annotated[dict[str, dict[str, Any] | None], AfterValidator(_one_backend), Tag("mapping")],
    Discriminator(name_or_mapping),
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
    description: str = record_default(records.Scenario, "description")
    """Free text, shown in reports."""
    seed: int = Field(record_default(records.Scenario, "seed"), ge=0)
    """Seeds random targets and triggers (and the baseline twin)."""
    workload: WorkloadField = optional_key()
    """The training job, `{KIND: options}` for any registered workload kind; left out: the
    bundled harness with its defaults (null is refused: a section written empty is most
    likely one whose content was lost)."""
    topology: TopologyDoc = TopologyDoc()
    """Nodes, ranks per node, spares, racks and power domains."""
    backend: BackendChoice | None = None
    """Where the nodes run: a backend name or {NAME: {options}}; left out: local."""
    baseline: bool = record_default(records.Scenario, "baseline")
    """Also run a fault-free twin with the same seed; needed by targets.final_state."""
    faults: Annotated[list[FaultDoc], Expect("a list of faults")] | None = None
    """The faults to inject."""
    targets: TargetsDoc | None = None
    """What the run must achieve."""
    repeat: int = Field(record_default(records.Scenario, "repeat"), ge=1, le=MAX_REPEAT)
    """Independent repetitions."""
    timeout_s: float = Field(record_default(records.Scenario, "timeout_s"), gt=0, le=MAX_SECONDS)
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
