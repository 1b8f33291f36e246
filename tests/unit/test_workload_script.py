"""The kinds that run a training stack's own script per rank (``chaos.workload.script``):
their options, located errors, and the launch they produce."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from chaos import contract
from chaos.errors import EXIT_BAD_INPUT, ScenarioError
from chaos.model.scenario import Workload as WorkloadRecord
from chaos.scenario.load import parse_scenario
from chaos.schema.jsonschema import scenario_json_schema
from chaos.workload import kind_of, known_workloads, workload_for
from chaos.workload.accelerate import AccelerateWorkload
from chaos.workload.dcp import DcpWorkload
from chaos.workload.deepspeed import DeepSpeedWorkload
from chaos.workload.lightning import LightningWorkload
from chaos.workload.nvrx_inprocess import NvrxInprocessWorkload
from chaos.workload.script import ScriptWorkload

STACK_KINDS = [LightningWorkload, AccelerateWorkload, DcpWorkload, NvrxInprocessWorkload, DeepSpeedWorkload]


def _scenario(workload: dict[str, Any], **extra: Any) -> Any:
    doc = {"name": "wl", "topology": {"nodes": 2, "ranks_per_node": 1}, "workload": workload, **extra}
    return parse_scenario(doc, "wl.yaml")


def _problems(workload: dict[str, Any], **extra: Any) -> str:
    with pytest.raises(ScenarioError) as info:
        _scenario(workload, **extra)
    assert info.value.exit_code == EXIT_BAD_INPUT
    return str(info.value)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('step 1')\n")
    return path


def test_stack_kinds_are_registered_after_the_first_two() -> None:
    known = known_workloads()
    assert list(known)[:6] == ["harness", "command", "lightning", "accelerate", "dcp", "nvrx_inprocess"]
    assert all(issubclass(known[k.kind], ScriptWorkload) for k in STACK_KINDS)


@pytest.mark.parametrize("kind", STACK_KINDS, ids=lambda k: k.kind)
def test_a_users_script_gets_its_args_with_the_runs_values_filled_in(kind: type[ScriptWorkload],
                                                                   script: Path) -> None:
    scenario = _scenario({kind.kind: {"script": str(script), "steps": 30,
                                      "args": ["--out", "{ckpt_dir}", "--lr", 0.5, "{seed}-{steps}"]}})
    assert kind_of(scenario.workload) == kind.kind
    workload = workload_for(scenario.workload)
    assert isinstance(workload, kind) and not workload.bundled
    launch = workload.launch("/tmp/run", seed=7)
    assert launch.worker_argv == [str(script), "--out", f"/tmp/run/{contract.SHARED_CHECKPOINTS_SUBDIR}",
                                  "--lr", "0.5", "7-30"]
    assert launch.steps_target == 30 and launch.env == {
        "PYTHONUNBUFFERED": "1", **kind.env, contract.CKPT_DIR_ENV: f"/tmp/run/{contract.SHARED_CHECKPOINTS_SUBDIR}"}
    # no regex: the script reports through its adapter, its lines are not read
    assert not launch.launcher.tee_output and workload.progress("/tmp/ev").regex is None
    # Undeclared, a user's script checkpoints where {ckpt_dir} says: the run's own directory.
    layout = workload.storage()
    assert layout is not None and layout.shared_checkpoint_dir("/tmp/run") == "/tmp/run/checkpoints"
    assert workload.steps_text() == f"the {kind.kind} script trains 30 steps (workload.{kind.kind}.steps)"


def test_a_relative_script_is_taken_from_the_current_directory(script: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(script.parent)
    workload = workload_for(_scenario({"lightning": {"script": "train.py",
                                                     "progress_regex": r"step (?P<step>\d+)"}}).workload)
    launch = workload.launch("/tmp/run", seed=0)
    # the agents run in the run directory: the script must reach them as an absolute path
    assert launch.worker_argv == [str(script)] and launch.steps_target == 0
    assert launch.launcher.tee_output and workload.progress("/tmp/ev").regex is not None
    assert workload.steps is None


@pytest.mark.parametrize("kind", STACK_KINDS, ids=lambda k: k.kind)
def test_the_bundled_example_is_the_default_and_gets_steps_seed_and_checkpoint_dir(
        kind: type[ScriptWorkload]) -> None:
    assert kind.example().is_file(), f"{kind.example()} is missing"
    workload = workload_for(_scenario({kind.kind: {"args": ["--every", "3"]}}).workload)
    assert workload.bundled and workload.steps == kind.example_steps
    launch = workload.launch("/tmp/run", seed=3)
    assert launch.worker_argv == [str(kind.example()), "--steps", str(kind.example_steps), "--seed", "3",
                                  "--ckpt-dir", "/tmp/run/checkpoints", "--every", "3"]
    layout = workload.storage()
    assert layout is not None and layout.shared_checkpoint_dir("/tmp/run") == "/tmp/run/checkpoints"
    # null and {} are the same: every default
    assert workload_for(_scenario({kind.kind: None}).workload).launch("/r", 0).worker_argv[0] == str(kind.example())


def test_the_in_process_restart_kind_quiets_the_wrappers_store_polling() -> None:
    # inprocess.Wrapper polls its store with Store.wait; torch logs each expected timeout
    launch = workload_for(_scenario({"nvrx_inprocess": {}}).workload).launch("/tmp/run", seed=0)
    assert launch.env["TORCH_CPP_LOG_LEVEL"] == "error"


def test_a_record_of_a_stack_kind_names_its_kind() -> None:
    assert kind_of(WorkloadRecord(kind="accelerate", options={})) == "accelerate"


@pytest.mark.parametrize(("options", "location", "fragment"), [
    ({"script": "no/such/train.py"}, "workload.lightning.script", "no such file 'no/such/train.py'"),
    ({"scirpt": "x.py"}, "workload.lightning.scirpt",
     "unknown lightning option 'scirpt'; did you mean 'script'? allowed: script, steps, args, progress_regex"),
    ({"steps": 0}, "workload.lightning.steps", "expected an int between 1 and 10000000, got int 0"),
    ({"steps": "ten"}, "workload.lightning.steps", "got str 'ten'"),
    ({"args": "--lr 1"}, "workload.lightning.args", "expected a list of arguments"),
    ({"args": ["--x", {"a": 1}]}, "workload.lightning.args[1]", "expected a string or a number"),
    ({"progress_regex": "step (\\d+)"}, "workload.lightning.progress_regex", "needs a named group 'step'"),
    ({"progress_regex": "("}, "workload.lightning.progress_regex", "not a valid regular expression"),
])
def test_bad_options_are_located(options: dict[str, Any], location: str, fragment: str) -> None:
    text = _problems({"lightning": options})
    assert f"wl.yaml: {location}: " in text and fragment in text, text


def test_options_not_a_mapping_and_command_keys_beside_a_stack_kind_are_located() -> None:
    text = _problems({"accelerate": ["x"]})
    assert "wl.yaml: workload.accelerate: expected a mapping" in text, text
    text = _problems({"accelerate": {}, "steps": 5})
    assert "workload.steps" in text and "workload.accelerate.steps" in text, text


def test_at_step_is_checked_against_the_stack_scripts_steps(script: Path) -> None:
    text = _problems({"lightning": {"script": str(script), "steps": 10}},
                     faults=[{"type": "kill_rank", "target": {"rank": 0}, "trigger": {"at_step": 10}}])
    assert "faults[0].trigger.at_step" in text and "workload.lightning.steps" in text, text


def test_a_missing_stack_package_is_a_located_error(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "lightning" else real(name, *a))
    text = _problems({"lightning": {"script": str(script)}})
    assert "wl.yaml: workload.lightning: the lightning package is not installed" in text
    assert "trainchaos[lightning]" in text


def test_json_schema_describes_the_options_and_one_kind_only() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = scenario_json_schema()
    validator = jsonschema.Draft202012Validator(schema)
    base = {"name": "x"}
    assert not list(validator.iter_errors({**base, "workload": {"lightning": {"steps": 5, "args": ["a"]}}}))
    assert list(validator.iter_errors({**base, "workload": {"lightning": {"stpes": 5}}}))
    assert list(validator.iter_errors({**base, "workload": {"lightning": {}, "harness": {}}}))
    assert list(validator.iter_errors({**base, "workload": {"accelerate": {}, "steps": 3}}))
    assert os.path.basename(str(LightningWorkload.example())) == "train.py"


def test_lightning_kind_reads_a_ckpt_as_the_twin_hashes_the_module_and_refuses_a_torn_one(tmp_path) -> None:
    """The freshness checker's reading of a Lightning .ckpt: its global_step and the digest
    of its state_dict, which the adapter's twin publishes from the LightningModule."""
    import torch

    from chaos import probe
    from chaos.workload.base import CheckpointImage

    module = torch.nn.Sequential(torch.nn.Linear(3, 2))
    path = tmp_path / "epoch=0-step=6.ckpt"
    torch.save({"state_dict": module.state_dict(), "global_step": 6, "loops": {"fit": object.__name__}}, path)
    kind = LightningWorkload(WorkloadRecord(kind="lightning", options={}))
    assert kind.read_checkpoint(str(path)) == CheckpointImage(6, probe.state_dict_digest(module.state_dict()))
    assert kind.read_checkpoint(str(tmp_path / "step-00000006")) is None  # not a .ckpt: not its format
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(ValueError, match="not a complete Lightning checkpoint"):
        kind.read_checkpoint(str(path))


@pytest.mark.parametrize("kind", STACK_KINDS, ids=lambda k: k.kind)
def test_a_script_declares_where_and_how_often_it_checkpoints(kind: type[ScriptWorkload], script: Path) -> None:
    workload = workload_for(_scenario({kind.kind: {"script": str(script), "steps": 30, "args": ["--out", "{ckpt_dir}"],
                                                   "checkpoint_dir": "ck", "checkpoint_every_steps": 10}}).workload)
    layout = workload.storage()
    assert layout is not None and layout.shared_checkpoint_dir("/r") == "/r/ck"
    assert layout.every_steps == 10 and layout.every_steps_key == f"workload.{kind.kind}.checkpoint_every_steps"
    launch = workload.launch("/r", seed=0)
    assert launch.worker_argv == [str(script), "--out", "/r/ck"] and launch.env[contract.CKPT_DIR_ENV] == "/r/ck"
    # the bundled example is given the declared directory
    bundled = workload_for(_scenario({kind.kind: {"checkpoint_dir": "ck"}}).workload).launch("/r", seed=0)
    assert bundled.worker_argv[bundled.worker_argv.index("--ckpt-dir") + 1] == "/r/ck"


@pytest.mark.parametrize(("options", "where", "fragment"), [
    ({"checkpoint_dir": "/abs"}, "checkpoint_dir", "not inside the run directory"),
    ({"checkpoint_dir": "a/../../b"}, "checkpoint_dir", "relative to it"),
    ({"checkpoint_dir": 3}, "checkpoint_dir", "expected a path relative to the run directory"),
    ({"checkpoint_every_steps": 0}, "checkpoint_every_steps", "expected an int between 1"),
    ({"checkpoint_every_steps": True}, "checkpoint_every_steps", "expected an int between 1"),
])
def test_a_bad_checkpoint_declaration_is_located(options: dict[str, Any], where: str, fragment: str) -> None:
    text = _problems({"lightning": options})
    assert f"workload.lightning.{where}" in text and fragment in text, text


def test_a_command_key_beside_a_stack_kind_says_where_the_kind_takes_it() -> None:
    text = _problems({"lightning": {}, "checkpoint_dir": "ck"})
    assert "workload.checkpoint_dir" in text and "lightning's is workload.lightning.checkpoint_dir" in text, text


@pytest.mark.parametrize("kind", STACK_KINDS, ids=lambda k: k.kind)
def test_a_warm_stack_script_is_forked_by_a_zygote_that_imported_torch_and_the_stack(
        kind: type[ScriptWorkload], monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos.workload.torchrun import SCRIPT_PREIMPORTS

    monkeypatch.delenv(contract.WARM_START_ENV, raising=False)
    cold = workload_for(_scenario({kind.kind: {}}).workload).launch("/r", seed=1)
    assert not cold.launcher.warm_start and cold.worker_argv[0] == str(kind.example())
    warm = workload_for(_scenario({kind.kind: {"warm_start": True, "args": ["--x"]}}).workload).launch("/r", seed=1)
    assert warm.launcher.warm_start
    assert warm.worker_argv == ["-m", "harness.zygote", "script", *cold.worker_argv, "--x"]
    assert warm.launcher.zygote_modules == (*SCRIPT_PREIMPORTS, *kind.preimports)
    assert warm.env == cold.env  # the same environment: PYTHONUNBUFFERED, the checkpoint directory
    # each preimport is a module this Python can import, so the zygote's import cannot fail on a name
    import importlib.util

    assert all(importlib.util.find_spec(module) is not None for module in kind.preimports)


def test_warm_start_comes_from_the_environment_where_the_scenario_does_not_say(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.WARM_START_ENV, "1")
    assert workload_for(_scenario({"dcp": {}}).workload).launch("/r", seed=0).launcher.warm_start
    assert not workload_for(_scenario({"dcp": {"warm_start": False}}).workload).launch("/r", 0).launcher.warm_start
    monkeypatch.setenv(contract.WARM_START_ENV, "yes")
    text = _problems({"dcp": {}})
    assert "wl.yaml: workload.dcp.warm_start: not set, and TRAINCHAOS_WARM_START='yes'" in text, text
    _scenario({"dcp": {"warm_start": True}})  # said in the scenario: the environment is not read


def test_warm_start_is_refused_where_the_kind_has_its_own_launcher_and_must_be_a_bool(
        monkeypatch: pytest.MonkeyPatch) -> None:
    text = _problems({"torchft": {"warm_start": True}})
    assert "workload.torchft.warm_start: torchft runs its ranks by its own launcher" in text, text
    monkeypatch.setenv(contract.WARM_START_ENV, "1")
    torchft = workload_for(_scenario({"torchft": {}}).workload)
    assert not torchft.launch("/r", seed=0).launcher.warm_start  # the environment's default: cold
    text = _problems({"lightning": {"warm_start": "yes"}})
    assert "workload.lightning.warm_start: expected true or false, got str 'yes'" in text, text
