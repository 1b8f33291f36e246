"""The plan is a pure function of scenario and seed: targets, trigger times, probe orders."""

from __future__ import annotations

from chaos.runner.plan import make_plan, probe_instructions
from chaos.scenario.load import parse_scenario


def _scenario(seed: int = 3):
    return parse_scenario(
        {
            "name": "plan",
            "seed": seed,
            "topology": {"nodes": 2, "ranks_per_node": 2},
            "faults": [
                {"type": "kill_rank", "target": {"random": "rank"}, "trigger": {"random": {"window_s": [5, 50]}}},
                {"type": "kill_node", "target": {"random": "node"}, "trigger": {"poisson": {"mtbf_s": 20, "max_faults": 3}}},
                {"type": "device_error", "target": {"rank": 2}, "trigger": {"at_step": 40}},
                {"type": "crash_during_checkpoint", "target": {"rank": 0}, "trigger": {"at_step": 60}},
                {"type": "straggler", "target": {"ranks": [1, 3]}, "trigger": {"at_step": 5}, "probability": 0.5},
            ],
        },
        "plan.yaml",
    )


def test_same_seed_same_plan_and_different_seed_different_draws():
    a = [p.to_dict() for p in make_plan(_scenario(), 3)]
    b = [p.to_dict() for p in make_plan(_scenario(), 3)]
    assert a == b
    others = [[p.to_dict() for p in make_plan(_scenario(), seed)] for seed in range(4, 12)]
    assert any(o != a for o in others), "the seed must drive the random draws"


def test_poisson_expands_into_increasing_occurrences_with_their_own_ids():
    plan = make_plan(_scenario(), 3)
    poisson = [p for p in plan if p.spec.type == "kill_node"]
    assert [p.fault_id for p in poisson] == ["f1-kill_node#1", "f1-kill_node#2", "f1-kill_node#3"]
    offsets = [p.offset_s for p in poisson]
    assert offsets == sorted(offsets) and offsets[0] > 0


def test_random_window_and_targets_stay_inside_the_job():
    for seed in range(20):
        plan = make_plan(_scenario(), seed)
        kill = plan[0]
        assert 5 <= kill.offset_s <= 50
        assert len(kill.fault.target.ranks) == 1 and 0 <= kill.fault.target.ranks[0] < 4
        for p in plan:
            if p.spec.type == "kill_node":
                (node,) = p.fault.target.nodes
                # a node target also names its ranks: blaming either is right
                assert p.fault.target.ranks == (2 * node, 2 * node + 1)


def test_probe_instructions_cover_only_in_process_faults_that_fire():
    plan = make_plan(_scenario(), 3)
    orders = probe_instructions(plan)
    by_type = {o["type"]: o for o in orders}
    assert "kill_rank" not in by_type and "kill_node" not in by_type
    assert by_type["device_error"] == {**by_type["device_error"], "ranks": [2], "at_step": 40,
                                       "point": "step_end", "action": "device_error", "at_or_after": False}
    # a checkpoint crash hits the first save at or after its step
    assert by_type["crash_during_checkpoint"]["point"] == "ckpt_write"
    assert by_type["crash_during_checkpoint"]["at_or_after"] is True
    straggler = next(p for p in plan if p.spec.type == "straggler")
    assert ("straggler" in by_type) == straggler.fires


def _domains(target: dict, seed: int = 3):
    return parse_scenario(
        {
            "name": "domains",
            "seed": seed,
            "topology": {"nodes": 4, "ranks_per_node": 2, "spares": 1,
                         "racks": {"r1": [0, 1], "r2": [2, 3, 4]},
                         "power_domains": {"pd-a": [0, 2], "pd-b": [1, 3]}},
            "faults": [{"type": "kill_node", "target": target, "trigger": {"at_step": 10}}],
        },
        "domains.yaml",
    )


def test_a_rack_or_power_domain_target_hits_every_node_in_it():
    rack = make_plan(_domains({"rack": "r2"}), 3)[0]
    assert rack.fault.target.nodes == (2, 3, 4)
    # The topology's view names the ranks that start there (the spare, node 4, starts none);
    # the live ones are resolved at injection time.
    assert rack.fault.target.ranks == (4, 5, 6, 7)
    assert rack.to_dict()["target"] == {"rack": "r2"}
    domain = make_plan(_domains({"power_domain": "pd-b"}), 3)[0]
    assert domain.fault.target.nodes == (1, 3)


def test_a_random_domain_is_drawn_from_the_seed_and_recorded_in_the_plan():
    drawn = {make_plan(_domains({"random": "power_domain"}), seed)[0].to_dict()["target"]["power_domain"]
             for seed in range(20)}
    assert drawn == {"pd-a", "pd-b"}
    same = [make_plan(_domains({"random": "rack"}), 7)[0].to_dict() for _ in range(2)]
    assert same[0] == same[1] and same[0]["target"]["rack"] in ("r1", "r2")


def test_each_repeat_draws_its_own_plan_and_repeat_zero_is_the_scenario_seed():
    from chaos.runner.plan import plan_seed

    assert plan_seed(3, 0) == 3
    seeds = [plan_seed(3, i) for i in range(5)]
    assert len(set(seeds)) == 5 and seeds == [plan_seed(3, i) for i in range(5)]
    offsets = {make_plan(_scenario(), s)[0].offset_s for s in seeds}
    assert len(offsets) == 5, "a random trigger must land at a different time in each repeat"


def test_every_fires_at_a_fixed_interval_and_bad_values_are_located():
    import pytest

    from chaos.errors import ScenarioError

    doc = {"name": "every", "topology": {"nodes": 2, "ranks_per_node": 1},
           "faults": [{"type": "kill_rank", "target": {"rank": 1}, "trigger": {"every": {"interval_s": 60, "max_faults": 3}}}]}
    plan = make_plan(parse_scenario(doc, "every.yaml"), 7)
    assert [(p.fault_id, p.offset_s) for p in plan] == [("f0-kill_rank#1", 60.0), ("f0-kill_rank#2", 120.0),
                                                       ("f0-kill_rank#3", 180.0)]
    for bad, where in (({"interval_s": 0}, "interval_s"), ({"interval_s": 60, "max_faults": 0}, "max_faults"),
                       ({"interval_s": 60, "period": 2}, "period")):
        doc["faults"][0]["trigger"] = {"every": bad}
        with pytest.raises(ScenarioError) as exc:
            parse_scenario(doc, "every.yaml")
        assert str(exc.value).startswith(f"every.yaml: faults[0].trigger.every.{where}: "), str(exc.value)
