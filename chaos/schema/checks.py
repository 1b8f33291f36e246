"""Checks that need more than one field, run on every part of a document that passed the
models (so that a bad name does not hide an out-of-range rank, and a rank is not checked
against a topology that is itself wrong).

- the topology: min_nodes <= nodes, nodes + spares, rack and power-domain membership;
- each fault: its type is registered, its target kind suits the type and its ranks, nodes,
  racks and power domains exist, in-process types take only at_step, at_step is reached,
  the type's params (``FaultType.params_model``, then the type's own ``check_params``:
  a bitflip's tensor name against the workload's tensors); fault names are unique;
- the workload: keys of another kind beside its kind (``chaos.schema.workload_doc``), then
  its kind's own ``validate`` (``chaos.workload``: the harness's options by its own checker
  and messages, the global batch against the world size);
- the backend is registered and its options pass its ``options_model``;
- targets.final_state needs baseline: true.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from chaos.faults.base import (
    FaultType,
    ParamsContext,
    UnknownFaultType,
    example_of,
    known_types,
    lookup,
    param_gaps,
)
from chaos.model import scenario as records
from chaos.model.targets import parse_target
from chaos.model.triggers import TRIGGER_FORMS
from chaos.model.types import close_match
from chaos.schema.build import backend_choice, topology_record, trigger_kind
from chaos.schema.errors import Path, Problem, translate
from chaos.schema.fault_model import FaultDoc, TriggerDoc
from chaos.schema.models import MAX_WORLD_SIZE, ScenarioDoc, TopologyDoc
from chaos.schema.suggest import suggest_param, suggest_type
from chaos.schema.target_checks import GROUPS, TargetChecks, nodes_text
from chaos.schema.targets_model import TargetsDoc
from chaos.schema.workload_doc import section_problems
from chaos.workload import Workload, kind_of, lookup_workload

__all__ = ["cross_check"]

# --------------------------------------------------------------------------- usable parts


@functools.cache
def _adapter(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    info = model.model_fields[name]
    annotation: Any = info.annotation  # a declared field always has one; pydantic types it Optional
    return TypeAdapter(Annotated[annotation, *info.metadata] if info.metadata else annotation)


def clean_fields(model: type[BaseModel], data: Any, error_locs: Sequence[tuple[Any, ...]]
                 ) -> dict[str, Any]:
    """Field name -> validated value for each field of ``data`` that no error touches
    (defaults for those left out); fields with errors, and required ones left out, are
    absent."""
    if not isinstance(data, dict):
        return {}
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        key = info.alias or name
        if any(loc[:1] == (key,) for loc in error_locs):
            continue
        if key not in data:
            if not info.is_required():
                out[name] = info.get_default(call_default_factory=True)
            continue
        out[name] = _adapter(model, name).validate_python(data[key])
    return out


def _under(error_locs: Sequence[tuple[Any, ...]], *prefix: Any) -> list[tuple[Any, ...]]:
    return [loc[len(prefix):] for loc in error_locs if loc[:len(prefix)] == prefix]


def cross_check(data: dict[str, Any], error_locs: Sequence[tuple[Any, ...]]) -> list[Problem]:
    """The cross-field problems of a scenario document, given where the models found errors."""
    top = clean_fields(ScenarioDoc, data, error_locs)
    faults: list[tuple[int, dict[str, Any]]] = []
    raw_faults = data.get("faults")
    if isinstance(raw_faults, list):
        faults = [(i, clean_fields(FaultDoc, entry, _under(error_locs, "faults", i)))
                  for i, entry in enumerate(raw_faults)]
    targets = clean_fields(TargetsDoc, data.get("targets"), _under(error_locs, "targets"))
    checker = _Checker()
    for where, message in section_problems(data.get("workload")):
        checker.add(where, message)
    checker.run(top, faults, targets)
    return checker.problems


# --------------------------------------------------------------------------- checks


class _Checker(TargetChecks):
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self._known: list[str] | None = None
        self._types: dict[str, type[FaultType] | None] = {}
        self._bad_params: set[Path] = set()
        """Faults whose params the type refused (reported there): a later check reads none of them."""

    def fault_type(self, name: str) -> type[FaultType] | None:
        """The registered type of ``name``, None for an unknown one; asked of the registry
        once per distinct name (a lookup scans the plugin entry points: thousands of faults
        of one unknown type must not scan thousands of times)."""
        if name not in self._types:
            try:
                self._types[name] = lookup(name)
            except UnknownFaultType:
                self._types[name] = None
        return self._types[name]

    def known_types(self) -> list[str]:
        if self._known is None:
            self._known = list(known_types())
        return self._known

    def add(self, path: Path, message: str) -> None:
        self.problems.append(Problem(path, message))

    def run(self, top: dict[str, Any], faults: list[tuple[int, dict[str, Any]]],
            targets: dict[str, Any]) -> None:
        topology = self.topology(top["topology"]) if "topology" in top else None
        self.backend_name = "local"
        if top.get("backend") is not None:
            self.backend(top["backend"])
            with contextlib.suppress(TypeError, ValueError, AttributeError):
                self.backend_name = backend_choice(top["backend"])[0]
        workload = self.workload(top["workload"], topology) if "workload" in top else None
        for index, fault in faults:
            self.fault(("faults", index), fault, topology, workload)
        self.fault_names(faults)
        self.targets_producible(faults, targets)
        if topology is not None and targets.get("completes", True):
            self.nodes_left(faults, topology)
        if targets.get("final_state") is not None and top.get("baseline") is False:
            self.add(("targets", "final_state"), "compares against the fault-free baseline run: "
                     "set baseline: true at the top level")

    # ---------------------------------------------------------------- topology

    def topology(self, doc: TopologyDoc) -> records.Topology | None:
        before = len(self.problems)
        total = doc.nodes + doc.spares
        if doc.min_nodes is not None and doc.min_nodes > doc.nodes:
            self.add(("topology", "min_nodes"),
                     f"{doc.min_nodes} is out of range: must be between 1 and {doc.nodes}")
        if doc.nodes * doc.ranks_per_node > MAX_WORLD_SIZE:
            self.add(("topology", "ranks_per_node"),
                     f"{doc.nodes} nodes x {doc.ranks_per_node} ranks = {doc.nodes * doc.ranks_per_node} "
                     f"ranks: at most {MAX_WORLD_SIZE} in all (every rank is a process of this machine; "
                     "e.g. 32 nodes x 4 ranks)")
        for key, word in (("racks", "rack"), ("power_domains", "power domain")):
            owner: dict[int, str] = {}
            for name, members in getattr(doc, key).items():
                for i, node in enumerate(members):
                    where = ("topology", key, name, i)
                    if node >= total:
                        self.add(where, f"node {node} does not exist: {nodes_text(doc)}")
                    elif node in owner:
                        self.add(where, f"node {node} is already in {word} {owner[node]!r}; "
                                 f"a node belongs to at most one {word}")
                    else:
                        owner[node] = name
        return topology_record(doc) if len(self.problems) == before else None

    # ---------------------------------------------------------------- backend

    def backend(self, choice: str | dict[str, Any]) -> None:
        from chaos.cluster import known_backends

        name, options = backend_choice(choice)
        where: Path = ("backend",) if isinstance(choice, str) else ("backend", name)
        known = known_backends()
        if name not in known:
            self.add(where, f"unknown backend {name!r}{close_match(name, known)} known: "
                     + ", ".join(known))
            return
        none_text = f"backend {name} takes no options"
        model = getattr(known[name], "options_model", None)
        if model is None:
            for key in options:
                self.add((*where, str(key)), f"unknown {name} option {key!r}: {none_text}")
            return
        try:
            model.model_validate(options)
        except ValidationError as exc:
            self.problems += translate(exc.errors(), model, ("backend", name),
                                       key_noun=f"{name} option", none_text=none_text)

    # ---------------------------------------------------------------- workload

    def workload(self, doc: Any, topology: records.Topology | None) -> Workload | None:
        """The scenario's workload section (``workload_doc_model``'s, None when left out) as
        its kind validates it (None: nothing to go on); keys of another kind beside it are
        told by ``section_problems`` first."""
        workload, problems = lookup_workload(kind_of(doc)).validate(
            doc, topology.world_size if topology is not None else None)
        for where, message in problems:
            self.add(where, message)
        return workload

    # ---------------------------------------------------------------- faults

    def fault(self, loc: Path, fault: dict[str, Any], topology: records.Topology | None,
              workload: Workload | None) -> None:
        fault_type: type[FaultType] | None = None
        if "type" in fault:
            fault_type = self.fault_type(fault["type"])
            if fault_type is None:
                known = self.known_types()
                self.add((*loc, "type"), f"unknown fault type {fault['type']!r}"
                         f"{suggest_type(fault['type'], known)} known: {_first_names(known)}")
        if fault_type is not None:
            self.backend_fits((*loc, "type"), fault_type)
        if "target" in fault:
            self.target((*loc, "target"), fault["target"], fault_type, topology, workload)
        if "trigger" in fault:
            self.trigger((*loc, "trigger"), fault["trigger"], fault_type, workload)
        if fault_type is not None and "params" in fault:
            model = fault_type.params_model
            name = fault_type.type_name
            try:
                params = model.model_validate(fault["params"] or {})
            except ValidationError as exc:
                self._bad_params.add(loc)
                self.problems += translate(exc.errors(), model, (*loc, "params"),
                                           key_noun=f"{name} parameter",
                                           none_text=f"{name} takes no parameters",
                                           suggest=functools.partial(suggest_param, owner=name))
            else:
                context = ParamsContext(workload=workload, world_size=topology.world_size
                                        if topology is not None else None,
                                        total_nodes=topology.total_nodes
                                        if topology is not None else None)
                for where, message in fault_type.check_params(params, context):
                    self.add((*loc, "params", *where), message)
                self.params_fit_backend((*loc, "params"), fault_type, params)
        if fault_type is not None and workload is not None and loc not in self._bad_params:
            self.device_fits(loc, fault, fault_type, workload)

    def device_fits(self, loc: Path, fault: dict[str, Any], fault_type: type[FaultType],
                    workload: Workload) -> None:
        """A real device fault (``device_needed``) on a rank the workload trains on the CPU."""
        params = fault.get("params") if isinstance(fault.get("params"), dict) else {}
        why = fault_type.device_needed(params or {})
        target = fault.get("target")
        rank = getattr(target, "rank", None) if "rank" in getattr(target, "model_fields_set", ()) else None
        if why is None or workload.on_cuda(rank if isinstance(rank, int) else None):
            return
        whom = f"rank {rank}" if isinstance(rank, int) else "every rank it may hit"
        self.add((*loc, "type"), f"{fault_type.type_name} needs {whom} on a CUDA device ({why}); "
                 f"{workload.device_fix()}")

    def params_fit_backend(self, loc: Path, fault_type: type[FaultType], params: Any) -> None:
        """Params whose values need more of the backend than the type does (a power outage
        whose power returns), on a backend without it."""
        from chaos.cluster import UnknownBackend, lookup_backend

        try:
            backend = lookup_backend(self.backend_name)
        except UnknownBackend:
            return  # reported at backend:
        for where, message in param_gaps(fault_type, params, backend):
            self.add((*loc, *where), message)

    def backend_fits(self, loc: Path, fault_type: type[FaultType]) -> None:
        """A fault that acts through a backend capability (a scheduler fault: Slurm's) on a
        backend that lacks it: the backends that have it, and what this one lacks."""
        from chaos.cluster import UnknownBackend, lookup_backend
        from chaos.cluster.capabilities import describe, has

        try:
            backend = lookup_backend(self.backend_name)
        except UnknownBackend:
            return  # reported at backend:
        lacks = [c for c in fault_type.requires if not has(backend, c)]
        if not lacks:
            return
        fits = fault_type.supported_backends()
        why = f": {self.backend_name} has no {' and no '.join(describe(c) for c in lacks)}"
        if not fits:
            self.add(loc, f"{fault_type.type_name} needs {', '.join(describe(c) for c in fault_type.requires)}, "
                     f"which no installed backend has{why}")
            return
        self.add(loc, f"{fault_type.type_name} acts through the {' or '.join(fits)} backend; this "
                 f"scenario runs on {self.backend_name} (set backend: {fits[0]}){why}")

    def trigger(self, loc: Path, trigger: TriggerDoc, fault_type: type[FaultType] | None,
                workload: Workload | None) -> None:
        kind = trigger_kind(trigger)
        form = TRIGGER_FORMS[kind]
        if fault_type is not None and fault_type.in_process and not form.exact_step:
            self.add((*loc, kind), f"{fault_type.type_name} is delivered in-process by the probe "
                     f"and fires only at an exact step: use trigger {{at_step: N}}, not {kind}")
        elif (problem := form.check(getattr(trigger, kind), workload)) is not None:
            self.add((*loc, kind), problem)

    def nodes_left(self, faults: list[tuple[int, dict[str, Any]]], topology: records.Topology) -> None:
        """Faults that take nodes out for good must leave the job the nodes it needs, spares
        included, or the scenario must say the job is expected to stop. Power that returns
        within the rendezvous' join timeout leaves the job waiting, not dead."""
        from chaos.workload.torchrun import JOIN_TIMEOUT_S as REJOIN_WAIT_S

        need = topology.min_nodes or topology.nodes
        down: set[int] = set()
        for index, fault in faults:
            fault_type = self.fault_type(fault.get("type", ""))
            if fault_type is None:
                continue
            target = fault.get("target")
            if not fault_type.cuts_nodes or target is None:
                continue
            (key,) = target.model_fields_set
            value = getattr(target, key)
            try:
                if key == "random" and value in GROUPS:
                    # Drawn at plan time: the largest group is what must be survivable.
                    groups = getattr(topology, GROUPS[value][0]).values()
                    nodes = max((tuple(g) for g in groups), key=len, default=None)
                else:
                    nodes = parse_target({key: value}).nodes(topology)
            except KeyError:
                continue  # an unknown rack or domain: reported at the target already
            if ("faults", index) in self._bad_params:
                continue  # its params are reported already; their raw values mean nothing here
            duration = (fault.get("params") or {}).get("duration_s")
            if nodes is None or (duration is not None and duration < REJOIN_WAIT_S):
                continue
            down |= set(nodes)
            left = topology.total_nodes - len(down)
            if left < need:
                self.add(("faults", index, "target", key),
                         f"takes node{'s' if len(down) > 1 else ''} {', '.join(map(str, sorted(down)))} "
                         f"down and leaves {left} of {topology.total_nodes} nodes (spares "
                         f"included), fewer than the job needs ({need}: "
                         f"{'topology.min_nodes' if topology.min_nodes else 'topology.nodes'}): "
                         "add topology.spares, lower topology.min_nodes, bring power back "
                         f"within {REJOIN_WAIT_S:g} s (params.duration_s), or say the job is "
                         "expected to stop (targets: {completes: false})")
                return

    def targets_producible(self, faults: list[tuple[int, dict[str, Any]]],
                           targets: dict[str, Any]) -> None:
        """A target on a metric that no fault of the scenario can produce is a mistake, not a
        pass waiting to happen: a per-fault metric with no faults; a family's metric
        (sdc_detection_steps) without a fault of that family; a detection target when every
        fault only stretches steps (a straggler raises nothing for a detector to see)."""
        from types import SimpleNamespace

        from chaos.metrics.catalogue import spec
        from chaos.metrics.registry import families

        found = [self.fault_type(f["type"]) if "type" in f else None for _, f in faults]
        types = [t for t in found if t is not None]
        if len(types) != len(found):
            return  # an unknown or missing type is told already; what it produces is unknown
        written = [t.type_name for t in types]
        for key, value in targets.items():
            metric = spec(key) if value is not None else None
            if metric is None or metric.scope != "fault":
                continue
            if not faults:
                self.add(("targets", key), f"{key} is measured per fault and the scenario has no "
                         "faults: nothing can produce it")
                continue
            family = next((f for f in families() if metric in f.specs), None)
            if family is not None:
                def measured(t: type[FaultType], family: Any = family) -> bool:
                    return family.measures(SimpleNamespace(failure_class=t.failure_class,
                                                           family=t.family))
                if not any(measured(t) for t in types):
                    fits = [n for n, t in known_types().items() if measured(t)]
                    self.add(("targets", key), f"{key} is measured on {', '.join(fits)} faults; "
                             f"this scenario has none (its faults: {', '.join(sorted(set(written)))})")
            elif key == "detection_s" and all(
                    t.failure_class == "slow" and t.in_process for t in types):
                self.add(("targets", key), f"nothing in this scenario can be detected: "
                         f"{', '.join(sorted(set(written)))} only stretches steps (no error is "
                         "raised, so no detector fires); drop detection_s, or add a fault that "
                         f"fails ({_failing_examples()}...)")

    def fault_names(self, faults: list[tuple[int, dict[str, Any]]]) -> None:
        first: dict[str, int] = {}
        for index, fault in faults:
            name = fault.get("name")
            if name is None:
                continue
            if name in first:
                self.add(("faults", index, "name"), f"{name!r} is already the name of "
                         f"faults[{first[name]}]; fault names must be unique")
            else:
                first[name] = index


def _first_names(names: list[str], room: int = 300) -> str:
    """As many names as fit in ``room`` characters, then how many more: a message stays
    bounded (chaos.errors clips long ones) as the fault families grow."""
    shown: list[str] = []
    for name in names:
        if len(", ".join([*shown, name])) > room:
            return f"{', '.join(shown)} and {len(names) - len(shown)} more (`trainchaos faults` lists them)"
        shown.append(name)
    return ", ".join(shown)


def _failing_examples() -> str:
    """A type of each class a detector fires on, as the types say (``example_of_class``)."""
    return ", ".join(filter(None, map(example_of, ("crash", "device", "hang"))))
