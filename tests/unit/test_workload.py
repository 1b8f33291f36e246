"""The Workload seam: kinds by name, and the launch each kind produces for a scenario."""

from __future__ import annotations

import os
import sys
from typing import Any, ClassVar

import pytest

import chaos.workload as workloads
from chaos import contract
from chaos.cluster.base import RunSpec
from chaos.cluster.local import LocalCluster
from chaos.errors import EXIT_BAD_INPUT, ScenarioError, ToolError
from chaos.model.scenario import Topology
from chaos.model.scenario import Workload as WorkloadRecord
from chaos.scenario.load import parse_scenario
from chaos.workload import (
    Launch,
    UnknownWorkload,
    Workload,
    kind_of,
    known_workloads,
    lookup_workload,
    register_workload,
    workload_for,
)
from chaos.workload.command import CommandWorkload
from chaos.workload.harness import HarnessWorkload
from chaos.workload.torchrun import AGENT_MAIN, TorchrunPerNode
from harness.config_load import config_from_args

RDZV = "127.0.0.1:29555"
TORCHRUN_CONF = ("is_host=false,join_timeout=60,last_call_timeout=2,read_timeout=30,"
                 "keep_alive_interval=1,keep_alive_max_attempt=5")


def _scenario(workload: dict[str, Any] | None, **extra: Any) -> Any:
    doc: dict[str, Any] = {"name": "wl", "topology": {"nodes": 2, "ranks_per_node": 2}, **extra}
    if workload is not None:
        doc["workload"] = workload
    return parse_scenario(doc, "wl.yaml")


# -- the registry ---------------------------------------------------------------------------


def test_builtin_kinds_are_known_in_reference_order() -> None:
    known = known_workloads()
    assert list(known)[:2] == ["harness", "command"]
    assert known["harness"] is HarnessWorkload and known["command"] is CommandWorkload
    assert lookup_workload("command") is CommandWorkload


def test_an_unknown_kind_is_a_located_error_listing_the_known_ones() -> None:
    with pytest.raises(UnknownWorkload) as info:
        lookup_workload("pytorch-lightnin", file="s.yaml", location="workload")
    err = info.value
    assert isinstance(err, ScenarioError) and err.exit_code == EXIT_BAD_INPUT
    assert str(err) == ("s.yaml: workload: unknown workload kind 'pytorch-lightnin'; known: harness, "
                        "command, lightning, accelerate, dcp, nvrx_inprocess, torchft, deepspeed, megatron")


class _Toy(Workload):
    kind: ClassVar[str] = "toy"

    @classmethod
    def validate(cls, doc, world_size):  # noqa: ANN001, ANN206
        return None, []

    @property
    def steps(self) -> int:
        return 5

    def steps_text(self) -> str:
        return "the toy trains 5 steps"

    def launch(self, run_dir: str, seed: int) -> Launch:
        raise NotImplementedError


def test_a_registered_kind_is_looked_up_and_a_second_class_under_its_name_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workloads.WORKLOADS, "items", dict(workloads.WORKLOADS.items))
    register_workload(_Toy)
    assert lookup_workload("toy") is _Toy
    assert list(known_workloads())[-1] == "toy" and list(known_workloads())[:2] == ["harness", "command"]
    assert register_workload(_Toy) is _Toy  # the same class again is harmless
    other = type("_Toy2", (_Toy,), {})
    with pytest.raises(ValueError, match="'toy' registered twice"):
        register_workload(other)
    with pytest.raises(TypeError, match="is not a chaos.workload.Workload"):
        register_workload(_agent)  # type: ignore[arg-type]


def test_a_kind_from_another_package_comes_through_the_entry_point_group(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import EntryPoint

    import chaos.util.registry

    monkeypatch.setattr(workloads.WORKLOADS, "items", dict(workloads.WORKLOADS.items))
    monkeypatch.setattr(workloads.WORKLOADS, "_entry_points_read", False)
    entry = EntryPoint("toy", f"{__name__}:_Toy", workloads.ENTRY_POINT_GROUP)
    monkeypatch.setattr(chaos.util.registry, "entry_points",
                        lambda group: [entry] if group == workloads.ENTRY_POINT_GROUP else [])
    assert lookup_workload("toy") is _Toy


def test_kind_of_a_record_and_of_a_document() -> None:
    assert kind_of(None) == "harness"
    assert kind_of(WorkloadRecord(harness={})) == "harness"
    assert kind_of(WorkloadRecord(command="python train.py")) == "command"
    assert isinstance(workload_for(_scenario(None).workload), HarnessWorkload)
    assert isinstance(workload_for(_scenario({"command": "python t.py"}).workload), CommandWorkload)


# -- the launch of each kind (what chaos/runner/run.py and the local backend produced before) ---------


def _agent(launch: Launch, topology: Topology, node: int = 0) -> list[str]:
    """The node's torchrun agent as the local backend starts it for this launch."""
    spec = RunSpec("trainchaos-abc", "/tmp/run", topology, launch.worker_argv,
                   tee_worker_output=launch.launcher.tee_output, extra_env=launch.env,
                   launcher=launch.launcher)
    cluster = LocalCluster(spec, None)  # type: ignore[arg-type]
    cluster.rdzv_port = 29555
    return cluster.agent_command(node)


def test_command_launch_is_the_script_under_torchrun_with_tee_for_a_progress_regex() -> None:
    scenario = _scenario({"command": "python3 -u train.py --lr 0.1 'a b'", "steps": 30,
                          "progress_regex": r"step (?P<step>\d+)"},
                         topology={"nodes": 3, "ranks_per_node": 2, "min_nodes": 2, "max_restarts": 4})
    launch = workload_for(scenario.workload).launch("/tmp/run", seed=7)
    assert launch.worker_argv == ["-u", "train.py", "--lr", "0.1", "a b"]
    assert launch.steps_target == 30 and launch.env == {contract.CKPT_DIR_ENV: "/tmp/run/checkpoints"}
    assert _agent(launch, scenario.topology, node=1) == [
        sys.executable, "-c", AGENT_MAIN, "--nnodes", "2:3", "--nproc-per-node", "2",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", RDZV, "--rdzv-id", "trainchaos-abc",
        "--rdzv-conf", TORCHRUN_CONF, "--max-restarts", "4", "--monitor-interval", "0.1",
        "--local-addr", "127.0.0.1", "--tee", "3", "-u", "train.py", "--lr", "0.1", "a b"]


def test_the_agent_is_torchrun_s_main_with_its_exit_status_and_output() -> None:
    """The agent's quick exit keeps torchrun's own: a usage error is argparse's, exit 2."""
    import subprocess

    res = subprocess.run([sys.executable, "-c", AGENT_MAIN, "--nproc-per-node"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert res.returncode == 2, res.stderr
    assert "usage:" in res.stderr and "--nproc-per-node" in res.stderr and "expected one argument" in res.stderr


def test_command_without_regex_or_steps_is_not_teed_and_ends_by_exit_code() -> None:
    workload = workload_for(_scenario({"command": "./train.sh"}).workload)
    launch = workload.launch("/tmp/run", seed=0)
    assert launch.worker_argv == ["./train.sh"] and launch.steps_target == 0
    assert not launch.launcher.tee_output
    assert workload.finished(reported_end=False) is True
    progress = workload.progress("/tmp/events")
    assert progress.regex is None and progress.report_exit_codes


def test_harness_launch_is_python_m_harness_with_every_option_plus_seed_and_run_dir() -> None:
    scenario = _scenario({"harness": {"steps": 12, "global_batch": 8, "checkpoint": {"every_steps": 4}}})
    workload = workload_for(scenario.workload)
    launch = workload.launch("/abs/run", seed=42)
    argv = launch.worker_argv
    assert argv[:2] == ["-m", "harness"] and launch.steps_target == 12 and launch.env == {}
    # The ranks parse exactly the scenario's options back, with the run's seed and directory.
    cfg = config_from_args(argv[2:])
    assert (cfg.steps, cfg.global_batch, cfg.checkpoint.every_steps) == (12, 8, 4)
    assert (cfg.seed, cfg.run_dir) == (42, "/abs/run")
    assert not launch.launcher.tee_output
    assert _agent(launch, scenario.topology)[-len(argv) - 2:] == ["--local-addr", "127.0.0.1", *argv]
    assert workload.finished(reported_end=False) is False and workload.finished(reported_end=True)
    progress = workload.progress("/tmp/events")
    assert progress.regex is None and not progress.report_exit_codes


class _OwnWayLauncher(TorchrunPerNode):
    """A launcher that starts the agent its own way (as a warm one forks it), or declines."""

    declines: ClassVar[bool] = False
    asked: ClassVar[list[tuple[str, str | None]]] = []

    def agent_command(self, topology: Topology, **where: Any) -> list[str]:
        return [sys.executable, "-c", "pass"]

    def start_agent(self, command: list[str], env: dict[str, str], *, cwd: str, log: Any,
                    cgroup: str | None = None) -> Any:
        self.asked.append((cwd, cgroup))
        return None if self.declines else _StandInAgent()


class _StandInAgent:
    pid = 0
    returncode = None

    def poll(self) -> int | None:
        return None

    def wait(self, timeout: float | None = None) -> int:
        return 0


def test_the_local_backend_lets_the_launcher_start_each_agent_or_starts_it_itself(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "logs").mkdir()
    spec = RunSpec("trainchaos-abc", str(tmp_path), Topology(nodes=1, ranks_per_node=1), [],
                   launcher=_OwnWayLauncher(()))
    cluster = LocalCluster(spec, None)  # type: ignore[arg-type]
    _OwnWayLauncher.asked.clear()
    cluster.start_node(0)
    assert isinstance(cluster.nodes[0].proc, _StandInAgent) and _OwnWayLauncher.asked == [(str(tmp_path), None)]
    monkeypatch.setattr(_OwnWayLauncher, "declines", True)
    cluster.start_node(0)  # declined: a new process of the command
    assert cluster.nodes[0].proc.wait(timeout=30) == 0 and cluster.nodes[0].proc.args[1:] == ["-c", "pass"]
    monkeypatch.setattr(LocalCluster, "forks_agents", False)  # netns: never asks
    cluster.start_node(0)
    assert len(_OwnWayLauncher.asked) == 2 and cluster.nodes[0].proc.wait(timeout=30) == 0
    # The launcher of today's kinds: cold, it declines; no launcher at all is a tool error.
    assert TorchrunPerNode(("x",)).start_agent(["x"], {}, cwd=str(tmp_path), log=None) is None
    with pytest.raises(ToolError, match="its RunSpec carries no launcher"):
        LocalCluster(RunSpec("trainchaos-abc", str(tmp_path), Topology(), []), None).launcher()  # type: ignore[arg-type]


def test_node_environment_uses_the_contract_names() -> None:
    spec = RunSpec("trainchaos-abc", "/tmp/run", Topology(nodes=2, ranks_per_node=1), ["x"],
                   probe_faults_file="/tmp/run/probe_faults.json", extra_env={"EXTRA": "1"},
                   launcher=TorchrunPerNode(("x",)))
    env = LocalCluster(spec, None).node_env(1)  # type: ignore[arg-type]
    assert env["TRAINCHAOS_RUN_ID"] == "trainchaos-abc" == env[contract.RUN_ID_ENV]
    assert env["TRAINCHAOS_EVENTS_DIR"] == "/tmp/run/events"
    assert env["TRAINCHAOS_NODE"] == "1" and env["TRAINCHAOS_NODE_ADDR"] == "127.0.0.1"
    assert env["TRAINCHAOS_PROBE_FAULTS"] == "/tmp/run/probe_faults.json" and env["EXTRA"] == "1"


# -- what the engine reads from a workload before the run ------------------------------------


def test_harness_storage_layout_follows_its_checkpoint_and_data_options(tmp_path: Any) -> None:
    plain = workload_for(_scenario(None).workload).storage()
    assert plain is not None
    assert plain.shared_checkpoint_dir("/run") == "/run/checkpoints"
    assert not plain.node_local_checkpoints and plain.data_file is None
    assert plain.data_source and os.path.isfile(plain.data_source)
    tiered = workload_for(_scenario({"harness": {
        "data": "data/corpus.txt", "data_stream": True,
        "checkpoint": {"dir": str(tmp_path), "local_every_steps": 5}}}).workload).storage()
    assert tiered.shared_checkpoint_dir("/run") == str(tmp_path)
    assert tiered.node_local_checkpoints and tiered.data_file == "data/corpus.txt"
    # An absolute data file is the original: never a data tier.
    assert workload_for(_scenario({"harness": {"data": plain.data_source, "data_stream": True}})
                        .workload).storage().data_file is None


def test_a_command_keeps_its_tensors_to_itself_and_checkpoints_in_the_runs_directory() -> None:
    workload = workload_for(_scenario({"command": "python t.py --out {ckpt_dir}", "steps": 9}).workload)
    assert workload.tensor_catalog() is None
    assert workload.steps == 9 and workload.steps_text() == "the command trains 9 steps (workload.steps)"
    layout = workload.storage()
    assert layout is not None and layout.shared_checkpoint_dir("/run") == "/run/checkpoints"
    assert not layout.node_local_checkpoints and layout.data_file is None and layout.every_steps is None
    launch = workload.launch("/run", seed=1)
    assert launch.worker_argv == ["t.py", "--out", "/run/checkpoints"]
    assert launch.env == {contract.CKPT_DIR_ENV: "/run/checkpoints"}


def test_a_command_declares_where_and_how_often_it_checkpoints() -> None:
    workload = workload_for(_scenario({
        "command": "python t.py --ckpt {ckpt_dir} --seed {seed} --steps {steps} --log {run_dir}/x",
        "steps": 30, "checkpoint_dir": "ckpt/shared", "checkpoint_every_steps": 10}).workload)
    layout = workload.storage()
    assert layout.shared_checkpoint_dir("/run") == "/run/ckpt/shared"
    assert layout.every_steps == 10 and layout.every_steps_key == "workload.checkpoint_every_steps"
    launch = workload.launch("/run", seed=4)
    assert launch.worker_argv == ["t.py", "--ckpt", "/run/ckpt/shared", "--seed", "4", "--steps", "30",
                                  "--log", "/run/x"]
    assert launch.env == {contract.CKPT_DIR_ENV: "/run/ckpt/shared"}


@pytest.mark.parametrize("value", ["/abs/ckpt", "../elsewhere", "ckpt/../../x", " "])
def test_a_checkpoint_dir_outside_the_run_is_refused_located(value: str) -> None:
    with pytest.raises(ScenarioError) as info:
        _scenario({"command": "python t.py", "checkpoint_dir": value})
    text = str(info.value)
    assert "workload.checkpoint_dir" in text and "relative to it" in text and "{ckpt_dir}" in text, text
    assert info.value.exit_code == EXIT_BAD_INPUT


def test_harness_tensor_catalog_names_the_model_and_optimizer_state() -> None:
    workload = workload_for(_scenario({"harness": {"model": {"d_model": 32, "n_layers": 1,
                                                             "n_heads": 2}}}).workload)
    catalog = workload.tensor_catalog()
    assert catalog is not None and "head.weight" in catalog
    assert any(name.startswith("optim:") for name in catalog)
    assert workload.steps_text() == "the harness trains 200 steps (workload.harness.steps)"


def test_a_commands_relative_script_is_taken_from_where_trainchaos_runs(tmp_path, monkeypatch) -> None:
    """torchrun starts the workers in the run directory: ``python train.py`` written beside
    train.py would name nothing there, so the script is made absolute; a name that is no file
    here (a module after -m, a file the job creates) stays as written."""
    (tmp_path / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    launch = workload_for(_scenario({"command": "python -u train.py --out {ckpt_dir}"}).workload).launch("/run", seed=0)
    assert launch.worker_argv == ["-u", str(tmp_path / "train.py"), "--out", "/run/checkpoints"]
    for command, argv in [("python -m train.py", ["-m", "train.py"]), ("python elsewhere.py", ["elsewhere.py"])]:
        assert workload_for(_scenario({"command": command}).workload).launch("/run", seed=0).worker_argv == argv


def test_a_warm_command_forks_its_python_script_or_module_from_the_nodes_zygote(tmp_path, monkeypatch) -> None:
    from chaos.workload.torchrun import SCRIPT_PREIMPORTS

    monkeypatch.delenv(contract.WARM_START_ENV, raising=False)
    (tmp_path / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)

    def launch(workload: dict[str, Any]) -> Launch:
        return workload_for(_scenario(workload).workload).launch("/run", seed=0)

    warm = launch({"command": "python -u train.py --out {ckpt_dir}", "warm_start": True})
    assert warm.worker_argv == ["-m", "harness.zygote", "script", str(tmp_path / "train.py"), "--out",
                                "/run/checkpoints"]
    assert warm.launcher.zygote_modules == SCRIPT_PREIMPORTS and warm.env["PYTHONUNBUFFERED"] == "1"
    assert launch({"command": "python -m pkg.train a", "warm_start": True}).worker_argv == [
        "-m", "harness.zygote", "run", "pkg.train", "a"]
    # not a Python script: said at validation when asked for, cold when only the environment asks
    with pytest.raises(ScenarioError) as info:
        _scenario({"command": "./train.sh", "warm_start": True})
    assert "workload.warm_start: a warm start forks Python ranks" in str(info.value)
    monkeypatch.setenv(contract.WARM_START_ENV, "1")
    assert launch({"command": "./train.sh"}).worker_argv == ["./train.sh"]
    assert launch({"command": "python train.py"}).launcher.warm_start
    assert not launch({"command": "python train.py", "warm_start": False}).launcher.warm_start
