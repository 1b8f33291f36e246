"""Hostile YAML is a located input error (exit 2), never a crash, a hang or a flood."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.errors import EXIT_BAD_INPUT, ScenarioError
from chaos.scenario.load import load_scenario

_BOMB = "name: x\nworkload:\n  harness:\n    note: &l0 [a, a, a, a, a, a, a, a, a, a]\n" + "".join(
    f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 9))

CASES = {
    "alias_bomb": (_BOMB, "once its YAML aliases are expanded"),
    "deep_flow": ("name: x\nseed: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    "huge_int": ("name: x\nseed: " + "9" * 5000 + "\n", "Exceeds the limit (4300 digits)"),
    "too_large": ("name: x\ndescription: '" + "x" * 300_000 + "'\n", "too large for a scenario file"),
    "nan_option": ("name: x\nworkload: {harness: {lr: .nan}}\n", "workload.harness.lr: expected a finite number, got nan"),
    "unsplittable": ("name: x\nworkload: {command: \"python 'train.py\"}\n", "workload.command: cannot be split"),
    "many_faults": ("name: x\nfaults: [{type: kill_rank, target: {rank: 0}, trigger: {poisson: {mtbf_s: 1, max_faults: 1000000000}}}]\n",
                    "max_faults: 1000000000 is out of range: must be between 1 and 1000"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_yaml_is_one_located_bounded_error(case: str, tmp_path: Path) -> None:
    text, fragment = CASES[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(str(path))
    assert info.value.exit_code == EXIT_BAD_INPUT
    assert len(info.value.issues) == 1, info.value.issues
    assert fragment in str(info.value)
    assert len(str(info.value)) < 800


def test_an_oversized_key_is_quoted_back_clipped(tmp_path: Path) -> None:
    path = tmp_path / "key.yaml"
    path.write_text("name: x\n? " + "k" * 100_000 + "\n: 1\n")  # an explicit key: no 1024-char limit
    with pytest.raises(ScenarioError) as info:
        load_scenario(str(path))
    assert "unknown key" in str(info.value) and "(100,000 characters)" in str(info.value)
    assert len(str(info.value)) < 1000


def test_yaml_1_2_numbers_are_numbers(tmp_path: Path) -> None:
    path = tmp_path / "num.yaml"
    path.write_text("name: x\nfaults: [{type: kill_rank, target: {rank: 0}, trigger: {poisson: {mtbf_s: 1e3}}}]\n")
    assert load_scenario(str(path)).faults[0].trigger.mtbf_s == 1000.0
