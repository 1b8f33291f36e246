"""io_slow's per-operation latency distributions (fixed, uniform, lognormal, pareto) per
operation class (metadata vs data): the draws, their seeding, the rule the fault writes and
its validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.scenario.load import ScenarioError, load_suite


def test_latency_distributions_are_seeded_per_rule_and_op_class() -> None:
    import statistics

    from chaos.storage.latency import LatencyDraw, op_class
    from chaos.storage.rules import Caller, Rule, RuleSet

    assert (op_class("getattr"), op_class("rename"), op_class("write"), op_class("fsync")) == (
        "metadata", "metadata", "data", "data")

    def draws(spec: dict, op: str, n: int = 4000, seed: str = "7/f0") -> list[float]:
        d = LatencyDraw(spec, seed)
        return [d.seconds(op) * 1000 for _ in range(n)]

    fixed = draws({"distribution": "fixed", "data_ms": 5, "metadata_ms": 40}, "write", 10)
    assert fixed == [5.0] * 10 and draws({"distribution": "fixed", "data_ms": 5, "metadata_ms": 40}, "open", 3) == [40.0] * 3
    uni = draws({"distribution": "uniform", "data_ms": 10, "spread": 0.5}, "read")
    assert 5.0 <= min(uni) and max(uni) <= 15.0 and abs(statistics.mean(uni) - 10) < 0.3
    logn = draws({"distribution": "lognormal", "data_ms": 10, "sigma": 1.0}, "read")
    assert abs(statistics.median(logn) - 10) < 1.0 and max(logn) > 100  # median at the scale, a long tail
    par = draws({"distribution": "pareto", "data_ms": 2, "alpha": 1.5}, "write")
    assert min(par) >= 2.0 and statistics.quantiles(par, n=100)[98] > 10 * statistics.median(par) / 2
    capped = draws({"distribution": "pareto", "data_ms": 2, "alpha": 1.1, "max_ms": 50}, "write")
    assert max(capped) == 50.0
    # Seeded: the same rule draws the same sequence; another rule (or class) another one.
    spec = {"distribution": "lognormal", "data_ms": 10, "metadata_ms": 10, "sigma": 1.0}
    assert draws(spec, "read", 50) == draws(spec, "read", 50)
    assert draws(spec, "read", 50) != draws(spec, "read", 50, seed="7/f1")
    assert draws(spec, "read", 50) != draws(spec, "open", 50)
    # Through a rule (as the daemon reads it from the control file): only metadata slowed.
    rule = Rule.from_dict({"rule_id": "f0", "action": "slow", "seed": 7, "ops": ["open", "write"],
                           "latency_dist": {"distribution": "fixed", "data_ms": 0, "metadata_ms": 30}})
    rules = RuleSet([Rule.from_dict(rule.to_dict())])
    assert rules.decide("open", "a", Caller()).sleep_s == 0.03
    assert rules.decide("write", "a", Caller(), nbytes=10).sleep_s == 0.0


def test_io_slow_distribution_params_are_validated_and_become_the_rule(tmp_path: Path) -> None:
    from chaos.faults.base import lookup
    from chaos.model.targets import ResolvedTarget

    cls = lookup("io_slow")
    params = cls.params_model.model_validate({"distribution": "pareto", "latency_ms": 2, "alpha": 1.5,
                                              "metadata_latency_ms": 20, "max_ms": 500,
                                              "ops": ["open", "getattr", "write", "fsync"]}).model_dump()
    rule = cls("f0-io_slow", ResolvedTarget(nodes=(1,)), params, seed=3).rule()
    assert rule["latency_dist"] == {"distribution": "pareto", "data_ms": 2.0, "metadata_ms": 20.0, "spread": 0.5,
                               "sigma": 0.5, "alpha": 1.5, "max_ms": 500.0}
    assert rule["latency_s"] == 0.0
    with pytest.raises(ScenarioError) as info:
        load_suite([str(_storage_scenario(tmp_path, "{distribution: zipf, alpha: 0, latency_ms: 1}"))])
    assert {i.location for i in info.value.issues} >= {"faults[0].params.distribution", "faults[0].params.alpha"}
    with pytest.raises(ScenarioError) as info:
        load_suite([str(_storage_scenario(tmp_path, "{metadata_latency_ms: 5, ops: [write]}"))])
    assert [i.location for i in info.value.issues] == ["faults[0].params.metadata_latency_ms"]


def _storage_scenario(tmp_path: Path, params: str) -> Path:
    path = tmp_path / "slow.yaml"
    path.write_text(f"""name: slow
workload: {{harness: {{model: {{name: mlp}}, steps: 50, checkpoint: {{every_steps: 10}}}}}}
topology: {{nodes: 2, ranks_per_node: 1}}
faults:
  - type: io_slow
    target: {{node: 1}}
    trigger: {{at_step: 10}}
    params: {params}
""")
    return path
