"""Scenario -> Plan: faults with resolved targets and concrete, seeded trigger times.

The plan is a pure function of the scenario and the seed: the same seed gives the same plan
(which rank a ``random`` target picks, when a Poisson fault fires), recorded in the journal.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from chaos.faults.base import FaultType, ResolvedTarget, lookup
from chaos.model import FaultSpec, Scenario, Topology

__all__ = ["PlannedFault", "make_plan", "probe_instructions", "resolve_target"]


@dataclass
class PlannedFault:
    spec: FaultSpec
    fault: FaultType
    occurrence: int = 0
    offset_s: float | None = None
    """random/poisson/at_time: seconds after the run's first step at which it fires."""
    fires: bool = True
    """False when the seeded draw against ``probability`` said no."""

    @property
    def fault_id(self) -> str:
        return self.fault.fault_id

    def to_dict(self) -> dict[str, Any]:
        trig = self.spec.trigger
        trigger = {k: v for k, v in vars(trig).items() if v is not None}
        return {
            "fault_id": self.fault_id,
            "type": self.spec.type,
            "target": {"ranks": list(self.fault.target.ranks), "nodes": list(self.fault.target.nodes)},
            "trigger": trigger,
            "offset_s": self.offset_s,
            "fires": self.fires,
            "params": dict(self.fault.params),
        }


def resolve_target(target: dict[str, Any], kinds: tuple[str, ...], topo: Topology,
                   rng: random.Random) -> ResolvedTarget:
    """Concrete ranks/nodes; a node target also names its ranks (both are right to blame)."""
    if "random" in target:
        kind = target["random"]
        if kind == "node":
            target = {"node": rng.randrange(topo.nodes)}
        else:
            target = {"rank": rng.randrange(topo.world_size)}
    ranks: list[int] = []
    nodes: list[int] = []
    if "rank" in target:
        ranks = [int(target["rank"])]
    elif "ranks" in target:
        ranks = [int(r) for r in target["ranks"]]
    elif "node" in target:
        nodes = [int(target["node"])]
    elif "nodes" in target:
        nodes = [int(n) for n in target["nodes"]]
    if nodes:
        ranks = [r for n in nodes for r in range(n * topo.ranks_per_node, (n + 1) * topo.ranks_per_node)]
    return ResolvedTarget(ranks=tuple(ranks), nodes=tuple(nodes))


def make_plan(scenario: Scenario, seed: int) -> list[PlannedFault]:
    plan: list[PlannedFault] = []
    for spec in scenario.faults:
        # One stream per fault: adding a fault to a scenario does not move the others.
        rng = random.Random(f"{seed}/{spec.index}")
        cls = lookup(spec.type)
        trig = spec.trigger
        occurrences: list[float | None]
        if trig.kind == "poisson":
            assert trig.mtbf_s is not None
            t, occurrences = 0.0, []
            for _ in range(trig.max_faults):
                t += rng.expovariate(1.0 / trig.mtbf_s)
                occurrences.append(t)
        elif trig.kind == "random":
            assert trig.window_s is not None
            occurrences = [rng.uniform(*trig.window_s)]
        elif trig.kind == "at_time":
            occurrences = [trig.at_time_s]
        else:
            occurrences = [None]
        for n, offset in enumerate(occurrences):
            target = resolve_target(spec.target, cls.target_kinds, scenario.topology, rng)
            fault_id = spec.fault_id if len(occurrences) == 1 else f"{spec.fault_id}#{n + 1}"
            fault = cls(fault_id=fault_id, target=target, params=dict(spec.params))
            fires = rng.random() < spec.probability
            plan.append(PlannedFault(spec=spec, fault=fault, occurrence=n, offset_s=offset, fires=fires))
    return plan


def probe_instructions(plan: list[PlannedFault]) -> list[dict[str, Any]]:
    """What the in-process probe of each rank must fire, and where (TRAINCHAOS_PROBE_FAULTS)."""
    out = []
    for planned in plan:
        if not planned.fault.in_process or not planned.fires:
            continue
        for action in planned.fault.probe_actions():
            out.append({
                "id": planned.fault_id,
                "type": planned.spec.type,
                "ranks": list(planned.fault.target.ranks),
                "at_step": planned.spec.trigger.at_step,
                "at_or_after": action["point"] == "ckpt_write",
                **action,
            })
    return out
