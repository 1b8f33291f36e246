"""The schema, declared once: the JSON Schema editors use, the reference in docs/scenario.md
and validation agree, because all three come from the same models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from click.testing import CliRunner
from jsonschema import Draft202012Validator
from pydantic import BaseModel, ConfigDict

import chaos.cluster
from chaos.cli import cli
from chaos.errors import ScenarioError
from chaos.faults.base import known_types
from chaos.model.scenario import Backend, Bound, Topology
from chaos.scenario.load import load_scenario, parse_scenario
from chaos.schema.errors import location
from chaos.schema.jsonschema import SCHEMA_DIALECT, scenario_json_schema
from chaos.schema.markdown import BEGIN, END, reference_markdown, replace_reference

ROOT = Path(__file__).resolve().parents[2]
BAD = ROOT / "tests" / "scenarios" / "bad"
DOCS = ROOT / "docs" / "scenario.md"

# Bad-corpus files the JSON Schema rejects on its own: unknown keys, wrong types, numbers out
# of range, missing keys, values outside an enumeration, a fault type's params, targets and
# triggers (chosen by `type`).
STRUCTURAL = {
    "backend_unknown_option.yaml", "bad_harness_option.yaml", "bad_name.yaml",
    "bool_is_not_int.yaml", "bound_unknown_key.yaml", "goodput_above_one.yaml",
    "in_process_at_time.yaml", "missing_name.yaml", "negative_timeout.yaml",
    "param_not_in_choices.yaml", "param_out_of_range.yaml", "param_unknown.yaml",
    "param_wrong_type.yaml", "probability_zero.yaml", "rack_target_on_rank_fault.yaml",
    "spares_out_of_range.yaml", "target_kind_mismatch.yaml", "top_level_list.yaml",
    "trigger_two_kinds.yaml", "unknown_backend.yaml", "unknown_event.yaml",
    "unknown_fault_type.yaml", "unknown_top_level_key.yaml", "unknown_trigger_key.yaml",
    "workload_both.yaml", "wrong_type.yaml", "bitflip_bit_too_large.yaml",
    "packet_loss_above_100.yaml", "expect_not_a_mapping.yaml", "expect_without_reason.yaml",
    "expect_issue_not_a_url.yaml",
}
# Well-formed documents whose mistake needs more than one field (or the harness's own
# checks): only `trainchaos validate` finds these, the JSON Schema accepts them.
CROSS_FIELD = {
    "at_step_beyond_run.yaml", "batch_not_divisible.yaml", "duplicate_fault_name.yaml",
    "final_state_without_baseline.yaml", "min_nodes_above_nodes.yaml",
    "node_in_two_power_domains.yaml", "node_out_of_range.yaml", "rack_index_out_of_range.yaml",
    "rack_target_without_racks.yaml", "random_window_empty.yaml", "rank_out_of_range.yaml",
    "regex_without_step.yaml", "unknown_power_domain_target.yaml",
    "bitflip_unknown_tensor.yaml", "bitflip_bit_outside_dtype.yaml", "bitflip_rank_outside_world.yaml",
    "bitflip_stuck_at_without_duration.yaml",
    "partition_node_in_two_groups.yaml", "partition_group_unknown_node.yaml",
    "partition_link_to_itself.yaml", "partition_unknown_rack.yaml", "network_fault_on_local.yaml",
    "container_fault_on_local.yaml",
    "link_flap_down_not_shorter.yaml",
}
# Not a YAML document at all: nothing for a schema to look at.
NOT_YAML = {"malformed_yaml.yaml", "duplicate_key.yaml"}


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    schema = scenario_json_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _shipped_scenarios() -> list[Path]:
    files = sorted((ROOT / "scenarios").rglob("*.y*ml")) + sorted((ROOT / "tests/scenarios/good").glob("*"))
    out = []
    for path in files:
        if "scale" in path.relative_to(ROOT).parts:  # trainchaos simulate inputs, not scenarios
            continue
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "suite" in data:
            continue
        out.append(path)
    return out


def _leaves(errors: Any) -> Any:
    for error in errors:
        if error.context:
            yield from _leaves(error.context)
        else:
            yield error


def _bad_case(filename: str) -> tuple[str, str]:
    from tests.unit.test_bad_scenarios import CASES

    return CASES[filename]


# ------------------------------------------------------------------ JSON Schema vs files


def test_the_json_schema_is_draft_2020_12_with_id_and_title() -> None:
    schema = scenario_json_schema()
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == SCHEMA_DIALECT
    assert schema["$id"] and schema["title"]
    assert schema["required"] == ["name"] and schema["additionalProperties"] is False


def test_shipped_scenarios_pass_the_json_schema_and_the_loader(validator: Draft202012Validator) -> None:
    shipped = _shipped_scenarios()
    assert len(shipped) >= 9, shipped
    for path in shipped:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        errors = [f"{location(e.absolute_path)}: {e.message}" for e in validator.iter_errors(data)]
        assert not errors, f"{path}: {errors}"
        if "gpu" not in path.relative_to(ROOT).parts:  # loads on a GPU host only (test_gpu_check)
            load_scenario(str(path))


def test_the_bad_corpus_is_partitioned() -> None:
    on_disk = {p.name for p in BAD.glob("*.yaml")}
    assert STRUCTURAL | CROSS_FIELD | NOT_YAML == on_disk
    assert not (STRUCTURAL & CROSS_FIELD) and not (NOT_YAML & (STRUCTURAL | CROSS_FIELD))


@pytest.mark.parametrize("filename", sorted(STRUCTURAL))
def test_structural_mistakes_are_rejected_by_the_json_schema_where_they_are(
        filename: str, validator: Draft202012Validator) -> None:
    data = yaml.safe_load((BAD / filename).read_text(encoding="utf-8"))
    errors = list(validator.iter_errors(data))
    assert errors, f"{filename} passes the JSON Schema"
    # jsonschema reports an unknown or missing key at the mapping, anything else at the value
    expected, _ = _bad_case(filename)
    where = {location(e.absolute_path) for e in _leaves(errors)}
    parent = expected.rpartition(".")[0] if "." in expected else ""
    assert expected in where or parent in where or expected.split("[")[0] in where, (expected, where)


@pytest.mark.parametrize("filename", sorted(CROSS_FIELD))
def test_cross_field_mistakes_pass_the_json_schema_and_fail_validate(
        filename: str, validator: Draft202012Validator) -> None:
    data = yaml.safe_load((BAD / filename).read_text(encoding="utf-8"))
    errors = [f"{location(e.absolute_path)}: {e.message}" for e in validator.iter_errors(data)]
    assert not errors, f"{filename}: {errors}"
    with pytest.raises(ScenarioError):
        load_scenario(str(BAD / filename))


def test_every_property_carries_its_documentation() -> None:
    """What an editor shows on hover: no key of the schema without a description."""
    schema = scenario_json_schema()
    missing = []
    for owner, node in [("(top)", schema), *schema["$defs"].items()]:
        for key, prop in node.get("properties", {}).items():
            if not prop.get("description"):
                missing.append(f"{owner}.{key}")
    assert not missing


def test_each_fault_type_brings_its_params_into_the_schema(validator: Draft202012Validator) -> None:
    schema = scenario_json_schema()
    assert schema["$defs"]["FaultDoc"]["properties"]["type"]["enum"] == list(known_types())
    doc = {"name": "x", "faults": [{"type": "straggler", "target": {"rank": 0},
                                    "trigger": {"at_step": 3}, "params": {"factor": 3}}]}
    assert not list(validator.iter_errors(doc))
    doc["faults"][0]["params"] = {"signal": "SIGKILL"}  # kill_rank's, not straggler's
    assert list(validator.iter_errors(doc))


# ------------------------------------------------------------------ new topology fields


GROUPED = """
name: grouped
topology:
  nodes: 4
  ranks_per_node: 1
  racks: {r1: [0, 1], r2: [2, 3]}
  power_domains: {pd-a: [0, 1], pd-b: [2, 3, 4]}
  spares: 1
  min_nodes: 2
backend: local
faults:
  - {type: kill_node, target: {rack: r2}, trigger: {at_step: 10}}
  - {type: kill_node, target: {power_domain: pd-a}, trigger: {at_step: 20}}
  - {type: kill_node, target: {random: rack}, trigger: {at_time: 5}}
  - {type: kill_node, target: {random: power_domain}, trigger: {at_time: 6}}
  - {type: kill_node, target: {node: 4}, trigger: {at_time: 7}}
targets:
  false_detections: {max: 0}
"""


def test_racks_power_domains_and_spares_validate_and_map_onto_the_model(
        validator: Draft202012Validator) -> None:
    data = yaml.safe_load(GROUPED)
    assert not list(validator.iter_errors(data))
    s = parse_scenario(data, "grouped.yaml")
    topo = s.topology
    assert topo == Topology(nodes=4, ranks_per_node=1, min_nodes=2, spares=1,
                            racks={"r1": (0, 1), "r2": (2, 3)},
                            power_domains={"pd-a": (0, 1), "pd-b": (2, 3, 4)})
    assert topo.world_size == 4 and topo.total_nodes == 5
    assert topo.rack_of(2) == "r2" and topo.rack_of(4) is None and topo.power_domain_of(4) == "pd-b"
    assert [f.target for f in s.faults] == [
        {"rack": "r2"}, {"power_domain": "pd-a"}, {"random": "rack"},
        {"random": "power_domain"}, {"node": 4}]
    assert s.targets.false_detections == Bound(max=0)
    assert s.backend == Backend(name="local", options={"memory_mb": None})


def test_backend_left_out_is_local() -> None:
    assert parse_scenario({"name": "x"}, "x.yaml").backend == Backend()


def test_rank_targets_do_not_reach_spares() -> None:
    with pytest.raises(ScenarioError, match="rank 4 does not exist: the job has 4 ranks"):
        parse_scenario({"name": "x", "topology": {"nodes": 2, "spares": 1},
                        "faults": [{"type": "kill_rank", "target": {"rank": 4},
                                    "trigger": {"at_step": 1}}]}, "x.yaml")


@pytest.mark.parametrize(("topology", "location_", "fragment"), [
    ({"nodes": 32, "ranks_per_node": 8}, "topology.ranks_per_node", "256 ranks: at most 128 in all"),
    ({"nodes": 33}, "topology.nodes", "must be between 1 and 32"),
    ({"racks": {"r1": []}}, "topology.racks.r1", "expected a non-empty list of node numbers"),
    ({"racks": {"r1": [0, 0]}}, "topology.racks.r1", "lists the same node twice"),
    ({"racks": {"R1": [0]}}, "topology.racks.R1", "'R1' is not a valid name"),
    ({"racks": {"a": [0], "b": [0]}}, "topology.racks.b[0]", "node 0 is already in rack 'a'"),
])
def test_topology_group_mistakes(topology: dict, location_: str, fragment: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"name": "x", "topology": topology}, "x.yaml")
    ((issue,),) = [info.value.issues]
    assert issue.location == location_ and fragment in issue.message


def test_random_group_target_needs_the_groups() -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"name": "x", "faults": [{"type": "kill_node", "target": {"random": "power_domain"},
                                                 "trigger": {"at_step": 1}}]}, "x.yaml")
    ((issue,),) = [info.value.issues]
    assert issue.location == "faults[0].target.random"
    assert "declares no power domains; declare them under topology, e.g. power_domains:" in issue.message


# ------------------------------------------------------------------ backends' options


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    hosts: list[str]
    """Where the nodes run."""
    port: int = 22
    """SSH port."""


class _FakeBackend:
    name: ClassVar[str] = "fake"
    summary: ClassVar[str] = "a backend of this test"
    options_model: ClassVar[type[BaseModel]] = _Options


class _BareBackend:
    name: ClassVar[str] = "bare"
    summary: ClassVar[str] = "a backend without options_model"


@pytest.fixture
def fake_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    chaos.cluster.known_backends()  # the built-in ones first
    monkeypatch.setitem(chaos.cluster.BACKENDS.items, "fake", _FakeBackend)
    monkeypatch.setitem(chaos.cluster.BACKENDS.items, "bare", _BareBackend)


@pytest.mark.usefixtures("fake_backends")
def test_backend_options_are_validated_by_its_options_model() -> None:
    s = parse_scenario({"name": "x", "backend": {"fake": {"hosts": ["a", "b"]}}}, "x.yaml")
    assert s.backend == Backend(name="fake", options={"hosts": ["a", "b"], "port": 22})
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"name": "x", "backend": {"fake": {"hots": ["a"], "port": "22"}}}, "x.yaml")
    assert [(i.location, i.message) for i in info.value.issues] == [
        ("backend.fake.hots", "unknown fake option 'hots'; did you mean 'hosts'? allowed: hosts, port"),
        ("backend.fake.port", "expected int, got str '22'"),
    ]
    with pytest.raises(ScenarioError, match="backend.bare.x: unknown bare option 'x': backend bare "
                                            "takes no options"):
        parse_scenario({"name": "x", "backend": {"bare": {"x": 1}}}, "x.yaml")
    assert parse_scenario({"name": "x", "backend": "bare"}, "x.yaml").backend == Backend(name="bare")


@pytest.mark.usefixtures("fake_backends")
def test_backends_and_their_options_are_in_the_json_schema() -> None:
    validator = Draft202012Validator(scenario_json_schema())
    assert not list(validator.iter_errors({"name": "x", "backend": {"fake": {"hosts": ["a"]}}}))
    assert not list(validator.iter_errors({"name": "x", "backend": "bare"}))
    for bad in ({"fake": {"hosts": ["a"], "x": 1}}, {"fake": {}}, {"bare": {"x": 1}}, "nope",
                {"fake": {"hosts": ["a"]}, "bare": {}}):
        assert list(validator.iter_errors({"name": "x", "backend": bad})), bad
    assert "#### `fake`" in reference_markdown() and "`hosts`" in reference_markdown()


# ------------------------------------------------------------------ reference and CLI


def _section(text: str) -> str:
    return BEGIN + text.split(BEGIN, 1)[1].split(END, 1)[0] + END


def test_docs_reference_is_up_to_date() -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert _section(text) + "\n" == reference_markdown(), (
        "docs/scenario.md is out of date: run `trainchaos schema --markdown --out docs/scenario.md`")


def _support_rows() -> dict[str, list[str]]:
    table = reference_markdown().split("### Where each fault type runs", 1)[1].split("#### ", 1)[0]
    return {line.split("`")[1]: [c.strip() for c in line.split("|")[1:-1]]
            for line in table.splitlines() if line.startswith("| [`")}


def test_reference_says_where_each_fault_type_runs() -> None:
    """One row per registered type, from its declarations: the family pages link here."""
    rows = _support_rows()
    assert set(rows) == set(known_types())
    for name, cls in known_types().items():
        _, family, backends, requires, triggers = rows[name]
        assert family == cls.family
        assert backends == ", ".join(f"`{b}`" for b in cls.supported_backends())
        assert requires == (", ".join(f"`{c.__name__}`" for c in cls.requires) or "—")
        assert ("at_step" in triggers) == cls.in_process
    # What the docs used to leave out of their hand lists:
    assert rows["latency"][2] == rows["toxic"][2] == "`netns`"
    assert rows["bitflip"][4].startswith("`at_step` only")
    assert rows["io_stall"][2:4] == ["`local`", "`StorageLayer`"]


def test_every_scenario_example_in_the_docs_is_valid(validator: Draft202012Validator) -> None:
    text = DOCS.read_text(encoding="utf-8")
    blocks = [b.split("```", 1)[0] for b in text.split("```yaml")[1:]]
    examples = [yaml.safe_load(b) for b in blocks if b.lstrip().startswith(("name:", "#"))]
    examples = [e for e in examples if isinstance(e, dict) and "name" in e and "suite" not in e]
    assert len(examples) >= 2
    for example in examples:
        assert not list(validator.iter_errors(example)), example["name"]
        parse_scenario(example, "docs/scenario.md")


def test_reference_covers_every_fault_type_and_param() -> None:
    text = reference_markdown()
    for name, cls in known_types().items():
        assert f"#### `{name}`" in text
        for param in cls.params_model.model_fields:
            assert f"| `{param}` |" in text


def test_replace_reference_keeps_the_hand_written_parts() -> None:
    doc = f"# Title\n\nprose\n\n{BEGIN}\nold reference text\n{END}\n\nafter\n"
    new = replace_reference(doc)
    assert new.startswith("# Title\n\nprose\n\n" + BEGIN) and new.endswith(END + "\n\nafter\n")
    assert "old reference text" not in new and "### `topology`" in new
    with pytest.raises(ValueError, match="no reference markers"):
        replace_reference("no markers")


def test_cli_schema_prints_the_json_schema_and_writes_files(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["schema"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == scenario_json_schema()

    out = tmp_path / "scenario.schema.json"
    result = runner.invoke(cli, ["schema", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text(encoding="utf-8"))["$id"] == scenario_json_schema()["$id"]

    result = runner.invoke(cli, ["schema", "--markdown"])
    assert result.exit_code == 0 and result.output == reference_markdown()

    doc = tmp_path / "scenario.md"
    doc.write_text(f"intro\n{BEGIN}\nstale text\n{END}\noutro\n", encoding="utf-8")
    result = runner.invoke(cli, ["schema", "--markdown", "--out", str(doc)])
    assert result.exit_code == 0, result.output
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("intro\n") and text.endswith("outro\n") and "stale text" not in text


def test_faults_params_are_described_from_the_params_model() -> None:
    lines = known_types()["straggler"].describe_params()
    assert lines == [
        "factor (number, default 2.0): Step time multiplier.",
        "steps (int or null, default null): Steps it lasts; null until the end.",
    ]
