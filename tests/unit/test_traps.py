"""Traps that used to validate: each is now a located error that says what was meant."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.errors import ScenarioError
from chaos.scenario.load import parse_scenario


def _problems(doc: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(doc, "s.yaml")
    return {issue.location: issue.message for issue in info.value.issues}


def _fault(fault_type: str, target: dict[str, Any], **params: Any) -> dict[str, Any]:
    return {"type": fault_type, "target": target, "trigger": {"at_step": 5}, "params": params}


def test_a_detection_target_on_a_straggler_only_scenario_is_refused() -> None:
    problems = _problems({"name": "x", "faults": [_fault("straggler", {"rank": 0}, factor=3)],
                          "targets": {"detection_s": {"max": 10}}})
    assert "straggler only stretches steps" in problems["targets.detection_s"]


def test_an_sdc_target_without_a_corruption_fault_is_refused() -> None:
    problems = _problems({"name": "x", "faults": [_fault("kill_rank", {"rank": 0})],
                          "targets": {"sdc_detection_steps": {"max": 10}}})
    message = problems["targets.sdc_detection_steps"]
    assert "measured on bitflip, checkpoint_bitrot" in message and "kill_rank" in message


def test_a_per_fault_target_without_faults_is_refused() -> None:
    problems = _problems({"name": "x", "targets": {"recovery_s": {"max": 10}}})
    assert "no faults" in problems["targets.recovery_s"]


def test_producible_targets_still_validate() -> None:
    parse_scenario({"name": "x", "faults": [_fault("kill_rank", {"rank": 0})],
                    "targets": {"detection_s": {"max": 10}, "recovery_s": {"max": 60}}}, "s.yaml")
    parse_scenario({"name": "x", "faults": [_fault("bitflip", {"rank": 0}, tensor="head.weight")],
                    "targets": {"sdc_detection_steps": {"max": 10}}}, "s.yaml")


@pytest.mark.parametrize("path", ["step-40/state.pt", "ckpt/step-40/*", "*step-123456789/state.pt"])
def test_a_storage_path_that_never_matches_the_layout_is_refused_with_it(path: str) -> None:
    problems = _problems({"name": "x", "faults": [_fault("io_error", {"rank": 0}, path=path)]})
    message = problems["faults[0].params.path"]
    assert "never matches: checkpoint folders are named step-NNNNNNNN, 8 digits" in message
    assert "step-*/state.pt" in message


@pytest.mark.parametrize("path", ["step-00000040/state.pt", "step-*/state.pt", "*"])
def test_a_storage_path_in_the_layout_validates(path: str) -> None:
    parse_scenario({"name": "x", "faults": [_fault("io_error", {"rank": 0}, path=path)]}, "s.yaml")


def test_every_problem_of_a_file_in_one_pass() -> None:
    """Unknown type, misplaced key, bad range, bad target: all told at once, in file order."""
    problems = _problems({"name": "x", "faults": [
        {"type": "corrupt_checkpoint", "target": {"rank": 0}, "trigger": {"at_step": 5}},
        {"type": "bitflip", "target": {"rank": 9}, "trigger": {"at_step": 5}, "params": {"bitz": 8}},
        {"type": "io_error", "target": {"path": "x"}, "trigger": {"at_step": 5}},
        {"type": "device_error", "target": {"rank": 0}, "trigger": {"at_step": 5},
         "params": {"xid": 10**12}},
    ], "targets": {"sdc_detection_steps": {"max": 3}}})
    assert list(problems) == ["faults[0].type", "faults[1].target.rank", "faults[1].params.bitz",
                              "faults[2].target.path", "faults[3].params.xid"], problems


def test_faults_listing_shows_factory_defaults() -> None:
    """``ops`` of the storage faults has a default factory: its value is shown, not
    pydantic's PydanticUndefined."""
    from chaos.faults.base import known_types

    lines = [line for t in known_types().values() for line in t.describe_params()]
    assert not [line for line in lines if "PydanticUndefined" in line]
    io_error = known_types()["io_error"].describe_params()
    assert any(line.startswith("ops (list of string, default ['write']") for line in io_error), io_error
