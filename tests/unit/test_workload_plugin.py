"""A workload kind registered by another package is a first-class kind: the scenario schema
is built from the registered kinds (``chaos.schema.workload_doc``), so it is validated (its
options by their model, located under its key), named in every message that lists kinds,
listed by the JSON Schema and documented in the reference; what the engine asks of a kind
(replica groups, resource modules) it answers for itself."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from pydantic import Field

import chaos.workload as workloads
from chaos.errors import ScenarioError
from chaos.model import scenario as records
from chaos.model.types import StrictModel
from chaos.scenario.load import parse_scenario
from chaos.schema.jsonschema import scenario_json_schema
from chaos.schema.markdown import reference_markdown
from chaos.schema.workload_doc import workload_doc_model
from chaos.workload import Launch, TorchrunPerNode, Workload, WorkloadSection, kind_of, workload_for


class ToyOpts(StrictModel):
    """Options of the test's kind."""

    key_noun = "toy option"

    steps: int = Field(10, ge=1, le=100)
    """Steps it trains."""
    every: int = Field(2, ge=1)
    """Steps between two saves."""


class _Toy(Workload):
    kind: ClassVar[str] = "toy"
    summary: ClassVar[str] = "a test's kind"
    resource_modules: ClassVar[tuple[str, ...]] = ("toy_resources_module",)

    @classmethod
    def own_key_field(cls) -> dict[str, Any]:
        return {cls.kind: (ToyOpts | None, Field(None, description="The test's kind."))}

    @classmethod
    def validate(cls, doc: WorkloadSection | None, world_size: int | None) -> tuple[Workload | None, list]:
        options = (doc.toy if doc is not None else None) or ToyOpts()
        problems = []
        if options.every > options.steps:
            problems.append((("workload", "toy", "every"), f"more than steps ({options.steps})"))
        return cls(records.Workload(kind=cls.kind, options=options.model_dump())), problems

    @property
    def steps(self) -> int:
        return int((self.spec.options or {})["steps"])

    def steps_text(self) -> str:
        return f"the toy trains {self.steps} steps (workload.toy.steps)"

    def launch(self, run_dir: str, seed: int) -> Launch:
        return Launch(TorchrunPerNode(("toy.py",)), steps_target=self.steps)


class _Grouped(_Toy):
    kind: ClassVar[str] = "grouped"
    replica_groups: ClassVar[bool] = True
    resource_modules: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def validate(cls, doc: WorkloadSection | None, world_size: int | None) -> tuple[Workload | None, list]:
        return cls(records.Workload(kind=cls.kind, options={"steps": 10})), []


@pytest.fixture(autouse=True)
def _registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Known only while a test of this module runs: other tests list every registered kind."""
    workloads.WORKLOADS.load()
    monkeypatch.setattr(workloads.WORKLOADS, "items", dict(workloads.WORKLOADS.items))
    workloads.register_workload(_Toy)
    workloads.register_workload(_Grouped)


def _issues(doc: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"name": "p", "topology": {"nodes": 2, "ranks_per_node": 1}, **doc}, "p.yaml")
    return [(issue.location, issue.message) for issue in info.value.issues]


def test_a_plugin_kind_is_named_in_a_scenario_and_read_back() -> None:
    scenario = parse_scenario({"name": "p", "workload": {"toy": {"steps": 7}}}, "p.yaml")
    assert kind_of(scenario.workload) == "toy"
    assert scenario.workload == records.Workload(kind="toy", options={"steps": 7, "every": 2})
    workload = workload_for(scenario.workload)
    assert isinstance(workload, _Toy) and workload.steps == 7
    defaults = parse_scenario({"name": "p", "workload": {"toy": None}}, "p.yaml")
    assert defaults.workload.options == {"steps": 10, "every": 2}


def test_its_options_are_validated_by_their_model_and_located_under_its_key() -> None:
    assert _issues({"workload": {"toy": {"steps": 0, "evry": 1}}}) == [
        ("workload.toy.steps", "0 is out of range: must be between 1 and 100"),
        ("workload.toy.evry", "unknown toy option 'evry'; did you mean 'every'? allowed: steps, every"),
    ]
    assert _issues({"workload": {"toy": 3}}) == [
        ("workload.toy", "expected a mapping with keys steps, every, got int 3")]
    # the kind's own check, across two options, comes after the model's
    assert _issues({"workload": {"toy": {"steps": 3, "every": 5}}}) == [
        ("workload.toy.every", "more than steps (3)")]


def test_messages_that_list_kinds_list_it() -> None:
    [(where, message)] = _issues({"workload": {"tyo": {}}})
    assert where == "workload.tyo"
    assert message.startswith("unknown workload kind 'tyo'; did you mean 'toy'? known: harness, command, ")
    assert ", toy" in message and ", grouped" in message
    assert message.endswith(" (command also takes progress_regex, steps, checkpoint_dir, checkpoint_every_steps, warm_start beside it)")
    [(where, message)] = _issues({"workload": {"toy": {}, "harness": {}}})
    assert where == "workload" and "'torchft', " in message and "'toy'" in message
    assert message.endswith("; got 'harness' and 'toy'")
    # a key of command's beside it, in the base class's words; a misspelt one names its owner
    assert _issues({"workload": {"toy": {}, "steps": 3}}) == [
        ("workload.steps", "only for 'command': toy takes its options under workload.toy")]
    assert _issues({"workload": {"toy": {}, "stepz": 3}}) == [
        ("workload.stepz", "unknown key 'stepz'; did you mean 'steps'? command takes command, progress_regex, steps, "
                           "checkpoint_dir, checkpoint_every_steps, warm_start")]


def test_the_json_schema_and_the_reference_carry_it() -> None:
    schema = scenario_json_schema()
    doc = schema["$defs"]["WorkloadDoc"]
    assert doc["properties"]["toy"]["anyOf"][0] == {"$ref": "#/$defs/ToyOpts"}
    command_keys = ["progress_regex", "steps", "checkpoint_dir", "checkpoint_every_steps", "warm_start"]
    assert {"required": ["toy"], "not": {"anyOf": [{"required": [key]} for key in command_keys]}} in doc["oneOf"]
    assert set(schema["$defs"]["ToyOpts"]["properties"]) == {"steps", "every"}
    reference = reference_markdown()
    assert "| `toy` | mapping or null | `null` |  | The test's kind. |" in reference
    section = reference.split("### `workload.toy` options", 1)[1].split("###", 1)[0]
    assert "| `steps` | int | `10` | between 1 and 100 | Steps it trains. |" in section
    assert "[`workload.toy`](#workloadtoy-options)" in reference


def test_replica_groups_are_asked_of_the_kind() -> None:
    fault = {"type": "kill_node", "target": {"replica_group": 1}, "trigger": {"at_step": 3}}
    [(where, message)] = _issues({"workload": {"toy": {}}, "faults": [fault]})
    assert where == "faults[0].target.replica_group"
    assert message == ("a replica group is a torchft or a grouped job's failure domain; this workload "
                       "is toy: use {node: N} or {rank: R}")
    parse_scenario({"name": "p", "topology": {"nodes": 2, "ranks_per_node": 1},
                    "workload": {"grouped": {}}, "faults": [fault]}, "p.yaml")


def test_the_resource_kinds_a_kind_needs_are_loaded_by_its_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    imported: list[str] = []
    monkeypatch.setattr(workloads.importlib, "import_module", imported.append)
    workloads.load_resource_kinds()
    assert "toy_resources_module" in imported and "chaos.workload.torchft.lighthouse" in imported


def test_two_kinds_may_not_claim_one_key() -> None:
    class _Thief(_Grouped):
        kind: ClassVar[str] = "thief"

        @classmethod
        def section_fields(cls) -> dict[str, Any]:
            return {**cls.own_key_field(), "steps": (int, Field(None))}

    workloads.register_workload(_Thief)
    with pytest.raises(TypeError, match="workload kinds 'command' and 'thief' both declare the key 'steps'"):
        workload_doc_model()
