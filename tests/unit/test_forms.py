"""Target and trigger forms (chaos.model.targets, chaos.model.triggers): one class per form, and every
form the schema accepts has one, so no reader needs an ``if kind ==`` of its own."""

from __future__ import annotations

import random
import typing
from types import SimpleNamespace
from typing import Any

import pytest

from chaos.model.scenario import Topology, Trigger, TriggerKind
from chaos.model.targets import TARGET_FORMS, TargetUnavailable, parse_target
from chaos.model.triggers import TRIGGER_FORMS, form_of
from chaos.schema.fault_model import TargetDoc, TriggerDoc

TOPO = Topology(nodes=4, ranks_per_node=2, racks={"r1": (0, 1), "r2": (2, 3)}, power_domains={"pd-a": (2, 3)})


def test_every_form_the_schema_accepts_has_one_class() -> None:
    assert set(TARGET_FORMS) == set(TargetDoc.model_fields)
    assert set(TRIGGER_FORMS) == set(TriggerDoc.model_fields) == set(typing.get_args(TriggerKind))


@pytest.mark.parametrize(("target", "ranks", "nodes"), [
    ({"rank": 3}, (3,), ()), ({"ranks": [1, 2]}, (1, 2), ()),
    ({"node": 1}, (2, 3), (1,)), ({"nodes": [0, 3]}, (0, 1, 6, 7), (0, 3)),
    ({"replica_group": 2}, (4, 5), (2,)), ({"rack": "r2"}, (4, 5, 6, 7), (2, 3)),
    ({"power_domain": "pd-a"}, (4, 5, 6, 7), (2, 3)), ({"job": True}, tuple(range(8)), (0, 1, 2, 3)),
    ({"links": [[0, 2]]}, (0, 1, 4, 5), (0, 2)),
])
def test_the_topology_view_of_each_form(target: dict[str, Any], ranks: tuple[int, ...], nodes: tuple[int, ...]) -> None:
    planned = parse_target(target).planned(TOPO)
    assert (planned.ranks, planned.nodes) == (ranks, nodes)


class _Live:
    topology = TOPO

    def __init__(self) -> None:
        self.ranks = {0: SimpleNamespace(node=0, pid=100), 5: SimpleNamespace(node=2, pid=105)}

    def rank_process(self, rank: int) -> Any:
        return self.ranks.get(rank)

    def live_ranks(self) -> dict[int, Any]:
        return dict(self.ranks)

    def node_alive(self, node: int) -> bool:
        return node != 3

    def poll(self) -> dict[int, Any]:
        return {n: SimpleNamespace(returncode=None if n != 3 else 1, lost=False) for n in range(4)}


def test_live_resolution_of_each_kind_of_form() -> None:
    live = _Live()
    assert parse_target({"rank": 5}).resolve(live).pids == {5: 105}
    with pytest.raises(TargetUnavailable, match=r"rank 4 has no live process .* ranks \[0, 5\]"):
        parse_target({"ranks": [5, 4]}).resolve(live)
    links = parse_target({"links": [[2, 0]]}).resolve(live)
    assert (links.ranks, links.nodes, links.links) == ((0, 5), (0, 2), ((2, 0),))
    with pytest.raises(TargetUnavailable, match="node 3 has no live process"):
        parse_target({"power_domain": "pd-a"}).resolve(live)
    job = parse_target({"job": True}).resolve(live)
    assert (job.ranks, job.nodes) == ((0, 5), (0, 1, 2))


def test_a_random_pick_is_drawn_from_the_seeded_stream() -> None:
    drawn = [parse_target({"random": kind}).draw(TOPO, random.Random(7)).spec()
             for kind in ("rank", "node", "rack", "power_domain")]
    rng = random.Random(7)
    assert drawn[0] == {"rank": rng.randrange(8)}
    assert drawn[2]["rack"] in TOPO.racks and drawn[3] == {"power_domain": "pd-a"}
    assert parse_target({"random": "node"}).nodes(TOPO) is None  # not drawn: names nothing yet


class _Clock:
    def __init__(self, steps: dict[int, int], events: dict[str, list[float]], since: float | None) -> None:
        self.steps, self.events, self.since = steps, events, since

    def step_seen(self, ranks: tuple[int, ...]) -> int:
        return max((self.steps.get(r, 0) for r in ranks), default=max(self.steps.values(), default=0))

    def event_times(self, kind: str) -> list[float]:
        return self.events.get(kind, [])

    def since_first_step(self) -> float | None:
        return self.since


def test_each_trigger_form_says_when_it_is_due() -> None:
    clock = _Clock({0: 12, 1: 9}, {"ckpt_save_end": [0.0, 1.0]}, since=30.0)
    at_step = Trigger(kind="at_step", at_step=10)
    assert form_of(at_step).due(at_step, None, (0,), clock) and not form_of(at_step).due(at_step, None, (1,), clock)
    after = Trigger(kind="after_event", event="ckpt_save_end", count=2)
    assert form_of(after).due(after, None, (), clock)
    assert not form_of(after).due(Trigger(kind="after_event", event="ckpt_save_end", count=3), None, (), clock)
    timed = Trigger(kind="at_time", at_time_s=20.0)
    assert form_of(timed).due(timed, 20.0, (), clock) and not form_of(timed).due(timed, 31.0, (), clock)
    assert not form_of(timed).due(timed, 1.0, (), _Clock({}, {}, since=None))  # no step yet
    assert [f.kind for f in TRIGGER_FORMS.values() if f.exact_step] == ["at_step"]
    assert [f.kind for f in TRIGGER_FORMS.values() if f.waits_for_target] == ["poisson", "every"]
    assert form_of(after).describe(after, None) == "after ckpt_save_end #2 + 0 s"
