"""examples/own_script: its scenario suite validates and covers every family that applies to
a plain DDP script, the README's commands name files that exist, and the script's own
sampler resumes in the middle of an epoch on exactly the samples an uninterrupted run takes
(the property its data exactly-once target claims)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from chaos.cli import cli
from chaos.scenario.load import load_scenario

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own_script"
SCENARIOS = sorted((EXAMPLE / "scenarios").glob("*.yaml"))
README = (EXAMPLE / "README.md").read_text()


def _train_module():
    spec = importlib.util.spec_from_file_location("own_script_train", EXAMPLE / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_each_scenario_of_the_suite_validates_and_runs_the_example(path: Path) -> None:
    scenario = load_scenario(str(path))
    assert scenario.workload.command is not None
    assert scenario.workload.command.startswith("python examples/own_script/train.py --ckpt-dir {ckpt_dir}")
    assert scenario.workload.checkpoint_every_steps == 10


def test_the_suite_has_one_scenario_per_family_that_applies() -> None:
    types = {load_scenario(str(p)).faults[0].type for p in SCENARIOS}
    assert types == {"kill_rank", "kill_node", "hang_rank", "partition", "latency", "io_stall", "io_error",
                     "bitflip"}


def test_the_kill_claims_data_exactly_once_and_fresh_checkpoints() -> None:
    targets = load_scenario(str(EXAMPLE / "scenarios" / "kill-rank.yaml")).targets
    assert targets.data == "exactly_once" and targets.final_state == "matches_baseline"
    stale = targets.bound("stale_checkpoints")
    assert stale is not None and stale.max == 0


def test_every_path_the_readme_gives_trainchaos_exists() -> None:
    paths = re.findall(r"trainchaos [a-z-]+(?: --[a-z-]+)* (examples/own_script/\S+)", README)
    assert len(paths) >= 4, paths
    for path in paths:
        assert (EXAMPLE.parents[1] / path).exists(), f"the README names {path}, which is not there"


def test_the_readmes_validate_and_crash_point_dry_run_succeed() -> None:
    runner = CliRunner()
    validated = runner.invoke(cli, ["validate", str(EXAMPLE / "scenarios")])
    assert validated.exit_code == 0, validated.output
    assert f"{len(SCENARIOS)} scenario(s) valid" in validated.output
    sweep = runner.invoke(cli, ["run", "--crash-points", str(EXAMPLE / "scenarios" / "kill-rank.yaml"), "--dry-run"])
    assert sweep.exit_code == 0, sweep.output
    assert "a trace of the save of step 20" in sweep.output


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_the_sampler_resumed_mid_epoch_continues_with_the_uninterrupted_runs_samples(world_size: int) -> None:
    sampler_class = _train_module().ResumableSampler
    straight = sampler_class(96, 16, seed=7)
    expected = [straight.next_batch(0, 1) for _ in range(20)]
    resumed = sampler_class(96, 16, seed=7)
    for _ in range(10):  # a checkpoint at step 10: epoch 1, 4 batches in
        resumed.next_batch(0, 1)
    state = resumed.state_dict()
    assert state == {"epoch": 1, "offset": 64}
    fresh = sampler_class(96, 16, seed=7)
    fresh.load_state_dict(state)
    for epoch, batch in expected[10:]:
        position = fresh.state_dict()
        shares = []
        for rank in range(world_size):
            fresh.load_state_dict(position)
            shares.append(fresh.next_batch(rank, world_size))
        assert {e for e, _ in shares} == {epoch}
        assert [i for _, share in shares for i in share] == batch  # the ranks' shares are the batch
    epochs = [epoch for epoch, _ in expected]
    assert epochs[:6] == [0] * 6 and epochs[6:12] == [1] * 6  # 96 / 16: six steps an epoch
    assert sorted(i for _, batch in expected[:6] for i in batch) == list(range(96))  # each once an epoch


def test_the_sampler_refuses_a_batch_that_does_not_divide_the_dataset() -> None:
    with pytest.raises(ValueError, match="multiple of the global batch"):
        _train_module().ResumableSampler(100, 16, seed=0)
