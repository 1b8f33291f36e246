"""The cross-field checks of a fault's target (``chaos.schema.checks``): its form suits the
fault type's target kinds, and the ranks, nodes, links, racks, power domains and replica
groups it names exist in the topology.
"""

from __future__ import annotations

from chaos.faults.base import FaultType
from chaos.model import scenario as records
from chaos.model.targets import TARGET_FORMS
from chaos.model.types import close_match
from chaos.schema.errors import Path
from chaos.schema.fault_model import TargetDoc
from chaos.schema.models import TopologyDoc
from chaos.workload import Workload, known_workloads

__all__ = ["GROUPS", "TargetChecks", "nodes_text"]

# Each target form's level (what it hits, as fault types declare ``target_kinds``) and its
# words come from the form itself (chaos.model.targets).
_LEVEL = {key: form.level for key, form in TARGET_FORMS.items() if key != "random"}
_WORD = {key: form.word for key, form in TARGET_FORMS.items() if key != "random"}
_FORMS = {"rank": "{rank: R}, {ranks: [R, ...]} or {random: rank}",
          "node": "{node: N}, {nodes: [N, ...]}, {rack: NAME}, {power_domain: NAME} or "
                  "{random: node|rack|power_domain}",
          "job": "{job: true}",
          "link": "{links: [[FROM, TO], ...]}"}
GROUPS = {"rack": ("racks", "racks: {r1: [0, 1], r2: [2, 3]}"),
          "power_domain": ("power_domains", "power_domains: {pd-a: [0, 1], pd-b: [2, 3]}")}


class TargetChecks:
    """The target checks of ``chaos.schema.checks``' checker (a mixin: it reports through
    the checker's ``add``)."""

    def add(self, path: Path, message: str) -> None:
        raise NotImplementedError

    def target(self, loc: Path, target: TargetDoc, fault_type: type[FaultType] | None,
               topology: records.Topology | None, workload: Workload | None = None) -> None:
        (key,) = target.model_fields_set
        value = getattr(target, key)
        level, word = _LEVEL.get(key), _WORD.get(key)
        if key == "random":
            level, word = TARGET_FORMS[value].level, _WORD[value]
        if key == "replica_group":
            self.replica_group((*loc, key), value, fault_type, topology, workload)
            return
        if fault_type is not None and level not in fault_type.target_kinds:
            self.add((*loc, key), f"{fault_type.type_name} targets a "
                     f"{' or '.join(fault_type.target_kinds)}, not a {word}; use "
                     + "; ".join(_FORMS[k] for k in fault_type.target_kinds if k in _FORMS))
            return
        if key == "job" and value is not True:
            self.add((*loc, key), "a job target is {job: true}: the whole job")
            return
        form = value if key == "random" else key
        only = fault_type.target_keys if fault_type is not None else None
        if only and fault_type is not None and form not in only:
            self.add((*loc, key), f"{fault_type.type_name} targets a "
                     f"{' or '.join(_WORD[k] for k in only)}, not a {_WORD.get(form, form)}; use "
                     + " or ".join(f"{{{k}: NAME}} or {{random: {k}}}" for k in only))
            return
        if key == "links":
            self.links((*loc, key), value, topology)
            return
        if topology is None:
            return
        if key in ("rank", "ranks", "node", "nodes"):
            numbers = [((*loc, key), value)] if isinstance(value, int) else [
                ((*loc, key, i), n) for i, n in enumerate(value)]
            for where, number in numbers:
                if level == "rank" and number >= topology.world_size:
                    self.add(where, f"rank {number} does not exist: the job has "
                             f"{topology.world_size} ranks (0-{topology.world_size - 1})")
                elif level == "node" and number >= topology.total_nodes:
                    self.add(where, f"node {number} does not exist: {nodes_text(topology)}")
        elif key in GROUPS or (key == "random" and value in GROUPS):
            kind = key if key in GROUPS else value
            field, example = GROUPS[kind]
            groups = getattr(topology, field)
            if not groups:
                self.add((*loc, key), f"the topology declares no {_WORD[kind]}s; declare them "
                         f"under topology, e.g. {example} (node indices)")
            elif key != "random" and value not in groups:
                self.add((*loc, key), f"unknown {_WORD[kind]} {value!r}"
                         f"{close_match(value, groups)} known: {', '.join(groups)}")

    def replica_group(self, loc: Path, group: int, fault_type: type[FaultType] | None,
                      topology: records.Topology | None, workload: Workload | None) -> None:
        """A replica group: group i is node i, so a node fault takes the group's node and a
        rank fault its ranks; only a kind whose job has them (``Workload.replica_groups``)."""
        if workload is not None and not workload.replica_groups:
            having = " or ".join(f"a {name}" for name, cls in known_workloads().items() if cls.replica_groups)
            self.add(loc, f"a replica group is {having or 'no registered'} job's failure domain; this "
                     f"workload is {workload.kind}: use {{node: N}} or {{rank: R}}")
            return
        if fault_type is not None and not {"rank", "node"} & set(fault_type.target_kinds):
            self.add(loc, f"{fault_type.type_name} targets a {' or '.join(fault_type.target_kinds)}, "
                     f"not a replica group; use " + "; ".join(_FORMS[k] for k in fault_type.target_kinds
                                                               if k in _FORMS))
            return
        if topology is not None and group >= topology.nodes:
            self.add(loc, f"replica group {group} does not exist: the job has {topology.nodes} "
                     f"replica groups (0-{topology.nodes - 1}), one per node")

    def links(self, loc: Path, links: list[list[int]], topology: records.Topology | None) -> None:
        """Each directed link joins two different nodes of the topology."""
        for i, (a, b) in enumerate(links):
            if a == b:
                self.add((*loc, i), f"a link from node {a} to itself; a link joins two different nodes")
            elif topology is not None:
                for j, node in enumerate((a, b)):
                    if node >= topology.total_nodes:
                        self.add((*loc, i, j), f"node {node} does not exist: {nodes_text(topology)}")

def nodes_text(topology: records.Topology | TopologyDoc) -> str:
    total = topology.nodes + topology.spares
    spares = (f" and {topology.spares} spare{'s' if topology.spares > 1 else ''}"
              if topology.spares else "")
    return f"the job has {topology.nodes} nodes{spares} (0-{total - 1})"
