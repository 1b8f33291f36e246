"""Scenario -> Plan: faults with concrete targets and seeded trigger times.

The plan is a pure function of the scenario and the seed: the same seed gives the same plan
(which rank, node, rack or power domain a ``random`` target picks, when a Poisson fault
fires), recorded in the journal. Which *processes* a target means is not part of the plan:
ranks move between nodes when a spare joins or the group shrinks, so the runner asks the
backend at injection time (``ClusterBackend.resolve``). The plan's ``ResolvedTarget`` is the
topology's view, for dry runs and for faults that never reach a live process (in-process
faults are matched by rank number inside the rank itself).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

from chaos.faults.base import FaultType, lookup
from chaos.model.scenario import FaultSpec, Scenario, Topology
from chaos.model.targets import ResolvedTarget, parse_target
from chaos.model.triggers import form_of
from chaos.probe import hold

__all__ = ["PlannedFault", "draw_target", "make_plan", "plan_seed", "probe_instructions", "resolve_target"]


def plan_seed(seed: int, repeat_index: int) -> int:
    """The seed of one repeat's plan: repeats of a random or Poisson trigger must draw their
    own times and targets, or "3 repeats" would be one experiment three times. Repeat 0 uses
    the scenario seed itself (what ``--dry-run`` shows); the training seed never changes, so
    every repeat is still judged against the one fault-free baseline."""
    if repeat_index == 0:
        return seed
    digest = hashlib.sha256(f"trainchaos-plan/{seed}/{repeat_index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


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
            "target": dict(self.fault.target_spec),
            "planned_target": {"ranks": list(self.fault.target.ranks), "nodes": list(self.fault.target.nodes)},
            "trigger": trigger,
            "offset_s": self.offset_s,
            "fires": self.fires,
            "params": dict(self.fault.params),
        }


def draw_target(target: dict[str, Any], topo: Topology, rng: random.Random) -> dict[str, Any]:
    """The target with a ``random`` pick drawn (seeded): ``{random: rack}`` -> ``{rack: r2}``."""
    return parse_target(target).draw(topo, rng).spec()


def resolve_target(target: dict[str, Any], topo: Topology) -> ResolvedTarget:
    """The topology's view of a drawn target: a node target also names the ranks that start
    on its nodes (both are right to blame)."""
    return parse_target(target).planned(topo)


def make_plan(scenario: Scenario, seed: int) -> list[PlannedFault]:
    plan: list[PlannedFault] = []
    for spec in scenario.faults:
        # One stream per fault: adding a fault to a scenario does not move the others.
        rng = random.Random(f"{seed}/{spec.index}")
        cls = lookup(spec.type)
        occurrences = form_of(spec.trigger).occurrences(spec.trigger, rng)
        for n, offset in enumerate(occurrences):
            drawn = draw_target(spec.target, scenario.topology, rng)
            fault_id = spec.fault_id if len(occurrences) == 1 else f"{spec.fault_id}#{n + 1}"
            fault = cls(fault_id=fault_id, target=resolve_target(drawn, scenario.topology),
                        params=dict(spec.params), target_spec=drawn)
            fires = rng.random() < spec.probability
            # Its own stream: drawing from ``rng`` would move the next occurrence's draws.
            fault.seed = random.Random(f"{seed}/{spec.index}/{n}/fault").getrandbits(31)
            plan.append(PlannedFault(spec=spec, fault=fault, occurrence=n, offset_s=offset, fires=fires))
    return plan


def probe_instructions(plan: list[PlannedFault]) -> list[dict[str, Any]]:
    """What the in-process probe of each rank must fire, and where (TRAINCHAOS_PROBE_FAULTS):
    the in-process faults' actions, and a ``hold`` at the step of each external fault
    planned at a step (``chaos.probe.hold``), for its target's ranks (a target that names none,
    a job-wide one, holds every rank)."""
    out = []
    for planned in plan:
        if not planned.fires:
            continue
        if not planned.fault.in_process:
            if form_of(planned.spec.trigger).exact_step:
                out.append({"id": planned.fault_id, "type": planned.spec.type,
                            "ranks": list(planned.fault.target.ranks) or None,
                            "at_step": planned.spec.trigger.at_step, "at_or_after": False,
                            "action": hold.ACTION, "point": "step_end",
                            "timeout_s": hold.DEFAULT_TIMEOUT_S})
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
