"""Power faults without processes: validation of outages, the blast-radius metrics, and the
``--compare`` expansion and table."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from chaos.cli import cli
from chaos.errors import EXIT_BAD_INPUT, ScenarioError
from chaos.faults.power.metrics import power_metrics
from chaos.metrics import FaultMetrics
from chaos.report.comparison import comparison_rows, write_comparison
from chaos.runfiles.record import RunRecord
from chaos.scenario.load import load_scenario, load_suite
from chaos.scenario.variants import VariationError, parse_variation

BASE = """\
name: outage
workload: {harness: {steps: 40, global_batch: 12}}
topology:
  nodes: 3
  ranks_per_node: 1
  min_nodes: 2
  power_domains: {pd-a: [1, 2], pd-b: [0]}
faults:
  - type: power_outage
    target: {power_domain: pd-a}
    trigger: {at_step: 10}
"""


def _write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _problems(tmp_path: Path, text: str) -> list[tuple[str, str]]:
    with pytest.raises(ScenarioError) as info:
        load_scenario(str(_write(tmp_path, text)))
    return [(i.location, i.message) for i in info.value.issues]


def _edit(text: str, **changes: object) -> str:
    data = yaml.safe_load(text)
    for dotted, value in changes.items():
        node = data
        *head, last = dotted.split("__")
        for key in head:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return yaml.safe_dump(data, sort_keys=False)


def test_outage_that_leaves_too_few_nodes_is_refused(tmp_path: Path) -> None:
    (loc, msg), = _problems(tmp_path, BASE)
    assert loc == "faults[0].target.power_domain"
    assert "takes nodes 1, 2 down and leaves 1 of 3 nodes" in msg
    assert "fewer than the job needs (2: topology.min_nodes)" in msg
    assert "targets: {completes: false}" in msg


@pytest.mark.parametrize("change", [
    {"targets": {"completes": False}},                      # the job is expected to stop
    {"topology__spares": 1, "topology__power_domains": {"pd-a": [1, 2], "pd-b": [0, 3]}},
    {"topology__min_nodes": 1},                              # an elastic shrink to one node
    {"faults__0__params": {"duration_s": 10}},              # power back within the join wait
])
def test_outage_the_job_survives_is_accepted(tmp_path: Path, change: dict) -> None:
    load_scenario(str(_write(tmp_path, _edit(BASE, **change))))


def test_power_back_too_late_counts_as_lost(tmp_path: Path) -> None:
    (loc, _msg), = _problems(tmp_path, _edit(BASE, faults__0__params={"duration_s": 600}))
    assert loc == "faults[0].target.power_domain"


@pytest.mark.parametrize("change, location, fragment", [
    ({"faults__0__target": {"power_domain": "pd-z"}}, "faults[0].target.power_domain",
     "unknown power domain 'pd-z'"),
    ({"topology__power_domains": None}, "faults[0].target.power_domain",
     "the topology declares no power domains"),
    ({"faults__0__params": {"local_data": "some"}}, "faults[0].params.local_data",
     "'some' is not allowed; allowed values: unfsynced, all"),
    ({"faults__0__target": {"node": 1}}, "faults[0].target.node",
     "power_outage targets a power domain, not a node; use {power_domain: NAME}"),
    ({"faults__0__target": {"random": "rack"}, "topology__racks": {"r": [0]}},
     "faults[0].target.random", "power_outage targets a power domain, not a rack"),
    ({"faults__0__params": {"duration_s": -1}}, "faults[0].params.duration_s", "must be > 0"),
])
def test_bad_outages(tmp_path: Path, change: dict, location: str, fragment: str) -> None:
    # min_nodes 1: the outage itself leaves enough nodes, only the change is wrong
    problems = _problems(tmp_path, _edit(BASE, **{"topology__min_nodes": 1, **change}))
    assert any(loc == location and fragment in msg for loc, msg in problems), problems


def test_rack_loss_takes_racks_only(tmp_path: Path) -> None:
    text = _edit(BASE, topology__min_nodes=1, topology__racks={"r1": [1], "r2": [0, 2]},
                 faults__0__type="rack_loss", faults__0__target={"rack": "r1"})
    load_scenario(str(_write(tmp_path, text)))
    bad = _edit(text, faults__0__target={"power_domain": "pd-a"})
    (loc, msg), = _problems(tmp_path, bad)
    assert loc == "faults[0].target.power_domain" and "rack_loss targets a rack" in msg



def test_random_domain_largest(tmp_path: Path) -> None:
    text = _edit(BASE, faults__0__target={"random": "power_domain"})
    (loc, msg), = _problems(tmp_path, text)
    assert loc == "faults[0].target.random" and "leaves 1 of 3 nodes" in msg


# -- metrics ----------------------------------------------------------------------------


def test_power_metrics_from_the_timeline() -> None:
    injected = {"t": 100.0, "kind": "fault_injected", "details": {
        "nodes": [1, 2], "ranks": [2, 3, 4, 5], "kill_spread_ms": 3.5}}
    events = [
        {"t": 99.0, "src": "rank-0", "kind": "step_end", "step": 30, "incarnation": 0},
        {"t": 101.0, "src": "rank-0", "kind": "rank_start", "world_size": 2, "incarnation": 1},
        {"t": 102.0, "src": "rank-0", "kind": "ckpt_load", "step": 20, "tier": "local",
         "copy": "replica", "incarnation": 1},
        {"t": 103.0, "src": "rank-0", "kind": "step_end", "step": 21, "incarnation": 1},
        {"t": 110.0, "src": "rank-0", "kind": "rank_start", "world_size": 6, "incarnation": 2},
        {"t": 112.5, "src": "rank-0", "kind": "step_end", "step": 40, "incarnation": 2},
    ]
    fm = FaultMetrics("f0", "power_outage", "crash", [], True)
    power_metrics(fm, events, injected["details"], injected["t"], world_size=6)
    assert (fm.blast_nodes, fm.blast_ranks, fm.kill_spread_ms) == (2, 4, 3.5)
    assert fm.full_size_s == pytest.approx(12.5)
    assert (fm.resumed_tier, fm.resumed_copy) == ("local", "replica")


def test_never_full_size_again() -> None:
    injected = {"t": 0.0, "details": {"nodes": [1], "ranks": [1], "kill_spread_ms": 0.1}}
    events = [{"t": 1.0, "src": "rank-0", "kind": "rank_start", "world_size": 1, "incarnation": 1},
              {"t": 2.0, "src": "rank-0", "kind": "step_end", "step": 5, "incarnation": 1}]
    fm = FaultMetrics("f0", "power_outage", "crash", [], True)
    power_metrics(fm, events, injected["details"], injected["t"], world_size=2)
    assert fm.full_size_s is None and fm.resumed_tier is None


# -- --compare ---------------------------------------------------------------------------


def test_parse_variation() -> None:
    v = parse_variation("checkpoint.every_steps=5,20")
    assert v.path == ("workload", "harness", "checkpoint", "every_steps") and v.values == (5, 20)
    assert parse_variation("topology.spares=0,1").path == ("topology", "spares")
    for bad in ("x", "=1,2", "a.b=1", "a..b=1,2", "a=1,,2", "a=1,1"):
        with pytest.raises(VariationError):
            parse_variation(bad)


def test_compare_expands_and_validates_each_value(tmp_path: Path) -> None:
    path = _write(tmp_path, _edit(BASE, topology__min_nodes=1))
    scenarios = load_suite([str(path)], parse_variation("checkpoint.every_steps=5,20"))
    assert [s.name for s in scenarios] == ["outage--5", "outage--20"]
    with pytest.raises(ScenarioError) as info:
        load_suite([str(path)], parse_variation("checkpoint.every_steps=5,often"))
    (issue,) = info.value.issues
    assert "[checkpoint.every_steps=often]" in issue.file
    assert issue.location == "workload.harness.checkpoint.every_steps"


def test_compare_bad_argument_exit_2(tmp_path: Path) -> None:
    path = _write(tmp_path, _edit(BASE, topology__min_nodes=1))
    result = CliRunner().invoke(cli, ["run", str(path), "--compare", "checkpoint.every_steps=5"])
    assert result.exit_code == 2 and "at least two values" in result.output
    result = CliRunner().invoke(cli, ["run", str(path), "--dry-run",
                                      "--compare", "checkpoint.every_steps=5,x"])
    assert isinstance(result.exception, ScenarioError)
    assert result.exception.exit_code == EXIT_BAD_INPUT


def test_comparison_rows_side_by_side() -> None:
    v = parse_variation("checkpoint.placement=local,replicated")

    def journal(name: str, lost: int, tier: str) -> RunRecord:
        return RunRecord.from_dict({"schema_version": 2, "scenario": {"name": name}, "status": "completed",
                "verdict": {"passed": True}, "faults": [{"fault_id": "f0", "type": "power_loss"}],
                "metrics": {"goodput": 0.5, "faults": [{
                    "blast_nodes": 2, "blast_ranks": 2, "kill_spread_ms": 4.0, "recovery_s": 3.0,
                    "full_size_s": 9.0, "lost_steps": lost, "resumed_from": 40 - lost,
                    "resumed_tier": tier, "detection_s": 0.1}]}})

    rows = comparison_rows([journal("pd--local", 20, "shared"),
                            journal("pd--replicated", 5, "local")], v)
    assert [r[:2] for r in rows] == [["pd", "local"], ["pd", "replicated"]]
    assert rows[0][4] == "2 nodes, 2 ranks in 4.0 ms"
    assert rows[0][8] == "20" and rows[1][8] == "5"
    assert rows[1][9] == "step 35 (local)"


def test_policy_table_does_not_overwrite_the_regression_gates_table(tmp_path: Path) -> None:
    # `run --compare` and `run --baseline-from` write into the same suite folder.
    gate = tmp_path / "compare.md"
    gate.write_text("the gate's table")
    journal = RunRecord.from_dict({"schema_version": 2, "scenario": {"name": "pd--local"}, "status": "completed",
                                   "metrics": None})
    path = write_comparison(str(tmp_path), [journal], parse_variation("checkpoint.placement=local,replicated"))
    assert Path(path) == tmp_path / "policies.md"
    assert "# Comparison: checkpoint.placement" in Path(path).read_text()
    assert gate.read_text() == "the gate's table"
