"""chaos.scenario.load: YAML -> validated Scenario, suites, and errors collected with locations."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chaos.errors import ScenarioError
from chaos.model.scenario import Bound, Scenario, Topology, Trigger, Workload
from chaos.scenario.load import load_scenario, load_suite, parse_scenario

ROOT = Path(__file__).resolve().parent.parent.parent
GOOD = ROOT / "tests" / "scenarios" / "good"
DOCS = ROOT / "docs" / "scenario.md"


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


def issues_of(exc: pytest.ExceptionInfo[ScenarioError]) -> list[tuple[str, str]]:
    return [(i.location, i.message) for i in exc.value.issues]


# ------------------------------------------------------------------ valid scenarios


def test_full_scenario_maps_onto_the_model() -> None:
    s = load_scenario(str(GOOD / "rank-kill-mid-step.yaml"))
    assert s.name == "rank-kill-mid-step"
    assert s.path.endswith("rank-kill-mid-step.yaml")
    assert s.seed == 7 and s.baseline is True and s.repeat == 3 and s.timeout_s == 300.0
    assert s.workload == Workload(harness={"model": {"name": "tiny-gpt"}, "steps": 300,
                                           "checkpoint": {"every_steps": 20, "mode": "async"}})
    assert s.topology == Topology(nodes=2, ranks_per_node=2)
    (fault,) = s.faults
    assert (fault.index, fault.type, fault.name, fault.fault_id) == (
        0, "kill_rank", "first-kill", "first-kill")
    assert fault.target == {"rank": 3}
    assert fault.trigger == Trigger(kind="at_step", at_step=120)
    assert fault.params == {"signal": "SIGKILL"}  # the default, filled in
    assert fault.probability == 1.0
    t = s.targets
    assert t.detection_s == Bound(max=2) and t.goodput == Bound(min=0.5)
    assert t.lost_steps == Bound(max=20) and t.catchup_s == Bound(max=30)
    assert t.final_state == "matches_baseline" and t.attribution == "correct" and t.completes


def test_every_trigger_kind_and_command_workload() -> None:
    s = load_scenario(str(GOOD / "own-command-stragglers.yml"))
    assert s.workload.harness is None
    assert s.workload.command == "python my_train.py --steps 100"
    assert re.compile(s.workload.progress_regex).groupindex.keys() == {"step", "loss"}
    triggers = [f.trigger for f in s.faults]
    assert [t.kind for t in triggers] == ["at_step", "random", "after_event", "poisson", "at_time"]
    assert triggers[1].window_s == (5.0, 20.0)
    assert (triggers[2].event, triggers[2].count, triggers[2].delay_s) == ("ckpt_save_end", 2, 0.5)
    assert (triggers[3].mtbf_s, triggers[3].max_faults) == (60.0, 3)
    assert triggers[4].at_time_s == 30.0
    assert s.faults[0].params == {"factor": 3, "steps": None}
    assert s.faults[1].target == {"random": "rank"} and s.faults[1].probability == 0.5
    assert s.targets.completes is False and s.targets.recovery_s == Bound(max=20, min=0)


def test_minimal_scenario_gets_the_defaults() -> None:
    s = parse_scenario({"name": "minimal"}, "minimal.yaml")
    assert s == Scenario(name="minimal", path="minimal.yaml", workload=Workload(harness={}))
    assert s.seed == 0 and s.repeat == 1 and s.timeout_s == 300.0 and s.baseline is False
    assert s.topology.world_size == 4 and s.faults == () and s.targets.completes is True


def test_ints_are_accepted_where_floats_are_expected() -> None:
    s = parse_scenario({
        "name": "ints", "timeout_s": 60,
        "faults": [{"type": "hang_rank", "target": {"rank": 0}, "trigger": {"at_time": 5},
                    "probability": 1, "params": {"duration_s": 3}}],
        "targets": {"final_state": {"loss_within": 1}}, "baseline": True,
    }, "ints.yaml")
    assert isinstance(s.timeout_s, float) and s.faults[0].trigger.at_time_s == 5.0
    assert s.targets.final_state == "loss_within" and s.targets.loss_tolerance == 1.0


def test_null_sections_mean_defaults() -> None:
    s = parse_scenario({"name": "nulls", "faults": None, "targets": None,
                        "workload": {"harness": None}}, "nulls.yaml")
    assert s.faults == () and s.workload.harness == {}


def test_docs_example_is_a_valid_scenario() -> None:
    """The annotated example in docs/scenario.md must stay in sync with the validator."""
    import yaml

    text = DOCS.read_text(encoding="utf-8")
    example = text.split("## Full example", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    s = parse_scenario(yaml.safe_load(example), "docs/scenario.md")
    assert s.name == "rank-kill-mid-step" and s.faults[0].params == {"signal": "SIGKILL"}


# ------------------------------------------------------------------ errors


def test_every_problem_of_a_file_is_reported_together(tmp_path: Path) -> None:
    path = write(tmp_path / "many.yaml", """
name: Many Problems
seed: -1
topology: {nodes: 2, ranks_per_node: 2}
faults:
  - type: kill_rank
    target: {rank: 9}
    trigger: {at_step: 0}
  - type: device_error
    target: {rank: 1}
    trigger: {poisson: {mtbf_s: 10}}
    params: {xid: "79"}
targets:
  recovery_s: {max: -1}
  attribution: right
repeat: 0
""")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    locations = [loc for loc, _ in issues_of(info)]
    assert locations == [  # in the order of the file
        "name", "seed",
        "faults[0].target.rank", "faults[0].trigger.at_step",
        "faults[1].trigger.poisson", "faults[1].params.xid",
        "targets.recovery_s.max", "targets.attribution",
        "repeat",
    ]
    assert all(i.file == path for i in info.value.issues)
    assert "expected int, got str '79'" in str(info.value)
    assert "unknown attribution target 'right'; allowed: correct" in str(info.value)


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="nope.yaml: no such file"):
        load_scenario(str(tmp_path / "nope.yaml"))
    with pytest.raises(ScenarioError, match="the file is empty"):
        load_scenario(write(tmp_path / "empty.yaml", "# nothing\n"))


def test_harness_errors_are_relocated_under_workload(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"name": "x", "workload": {"harness": {"model": "tiny-gpt"}}}, "x.yaml")
    ((location, message),) = issues_of(info)
    assert location == "workload.harness.model"
    assert message.startswith("expected a mapping with keys")


def test_progress_regex_only_with_command_and_must_compile() -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"name": "x", "workload": {"harness": {}, "progress_regex": "(?P<step>x)"}},
                       "x.yaml")
    assert issues_of(info)[0][0] == "workload.progress_regex"
    with pytest.raises(ScenarioError, match="not a valid regular expression"):
        parse_scenario({"name": "x", "workload": {"command": "t", "progress_regex": "(?P<step"}},
                       "x.yaml")


def test_unknown_fault_type_still_checks_the_rest_of_the_entry() -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"name": "x", "faults": [
            {"type": "nope", "target": {"rank": 99}, "trigger": {"at_tme": 1}}]}, "x.yaml")
    assert [loc for loc, _ in issues_of(info)] == [
        "faults[0].type", "faults[0].target.rank", "faults[0].trigger.at_tme"]


# ------------------------------------------------------------------ suites


def scenario_text(name: str) -> str:
    return f"name: {name}\nfaults:\n  - {{type: kill_rank, target: {{rank: 0}}, trigger: {{at_step: 5}}}}\n"


def test_directory_suite_is_sorted_non_recursive_and_skips_underscore(tmp_path: Path) -> None:
    write(tmp_path / "b.yaml", scenario_text("b"))
    write(tmp_path / "a.yml", scenario_text("a"))
    write(tmp_path / "_draft.yaml", "this: is not checked\n")
    write(tmp_path / "notes.txt", "ignored")
    write(tmp_path / "sub" / "c.yaml", scenario_text("c"))
    assert [s.name for s in load_suite([str(tmp_path)])] == ["a", "b"]


def test_suite_file_paths_are_relative_to_it(tmp_path: Path) -> None:
    write(tmp_path / "net" / "partition.yaml", scenario_text("partition"))
    write(tmp_path / "net" / "latency.yaml", scenario_text("latency"))
    write(tmp_path / "smoke" / "kill.yaml", scenario_text("kill"))
    suite = write(tmp_path / "smoke" / "suite.yaml",
                  "name: smoke\nsuite:\n  - kill.yaml\n  - ../net\n")
    assert [s.name for s in load_suite([suite])] == ["kill", "latency", "partition"]
    # a suite file inside a listed directory is expanded too, and each file is loaded once
    assert [s.name for s in load_suite([str(tmp_path / "smoke")])] == [
        "kill", "latency", "partition"]


def test_suite_collects_issues_of_all_files(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", "name: a\nseed: x\n")
    write(tmp_path / "b.yaml", "name: b\nrepeat: 0\n")
    write(tmp_path / "c.yaml", "name: c\n")
    write(tmp_path / "d.yaml", "name: [\n")
    with pytest.raises(ScenarioError) as info:
        load_suite([str(tmp_path), str(tmp_path / "missing.yaml")])
    where = [(Path(i.file).name, i.location) for i in info.value.issues]
    assert where == [("d.yaml", "line 2, column 1"), ("missing.yaml", ""),
                     ("a.yaml", "seed"), ("b.yaml", "repeat")]


def test_duplicate_names_in_a_suite_are_an_error(tmp_path: Path) -> None:
    first = write(tmp_path / "one.yaml", scenario_text("same"))
    write(tmp_path / "two.yaml", scenario_text("same"))
    with pytest.raises(ScenarioError) as info:
        load_suite([str(tmp_path)])
    ((issue),) = info.value.issues
    assert issue.file.endswith("two.yaml") and issue.location == "name"
    assert f"also used by {first}" in issue.message


def test_bad_suite_entries(tmp_path: Path) -> None:
    write(tmp_path / "ok.yaml", scenario_text("ok"))
    suite = write(tmp_path / "s.yaml", "suite: [ok.yaml, gone.yaml, 3, s.yaml]\nsuit_name: x\n")
    with pytest.raises(ScenarioError) as info:
        load_suite([suite])
    assert issues_of(info) == [  # in the order of the file
        ("suite[1]", f"'gone.yaml' does not exist (looked for {tmp_path / 'gone.yaml'})"),
        ("suite[2]", "expected a path, got int 3"),
        ("suite[3]", "'s.yaml' is a suite that includes this one (a cycle)"),
        ("suit_name", "unknown suite key 'suit_name'; did you mean 'suite'? allowed: suite, name, description"),
    ]
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    with pytest.raises(ScenarioError, match="directory holds no scenario files"):
        load_suite([str(empty_dir)])
    with pytest.raises(ScenarioError, match="this is a suite file"):
        load_scenario(suite)


def test_good_examples_form_a_suite() -> None:
    assert [s.name for s in load_suite([str(GOOD)])] == [
        "own-command-stragglers", "rank-kill-mid-step"]


@pytest.mark.parametrize(("harness", "location"), [
    ({"steps": 0}, "workload.harness.steps"),
    ({"model": {"d_model": 10, "n_heads": 3}}, "workload.harness.model.d_model"),
    ({"checkpoint": {"keep": 1}}, "workload.harness.checkpoint.keep"),
    ({"checkpoint": {"every_steps": -1}}, "workload.harness.checkpoint"),  # names two fields
    ({"failure": {"heartbeat_s": "1"}}, "workload.harness.failure.heartbeat_s"),
    ({"stepz": 3}, "workload.harness.stepz"),
])
def test_harness_cross_field_errors_point_at_the_field(harness: dict, location: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"name": "x", "workload": {"harness": harness}}, "x.yaml")
    assert [loc for loc, _ in issues_of(info)] == [location]


def test_a_command_states_its_steps_and_at_step_is_checked_against_them():
    doc = {"name": "own", "workload": {"command": "python train.py", "steps": 300},
           "faults": [{"type": "kill_rank", "target": {"rank": 1}, "trigger": {"at_step": 120}}]}
    assert parse_scenario(doc, "own.yaml").workload.steps == 300
    doc["faults"][0]["trigger"]["at_step"] = 300
    with pytest.raises(ScenarioError, match=r"own.yaml: faults\[0\].trigger.at_step: step 300 is never "
                                            r"reached: the command trains 300 steps \(workload.steps\)"):
        parse_scenario(doc, "own.yaml")
    harness = {"name": "h", "workload": {"harness": {"steps": 50}, "steps": 50}}
    with pytest.raises(ScenarioError, match=r"h.yaml: workload.steps: only for 'command'"):
        parse_scenario(harness, "h.yaml")
