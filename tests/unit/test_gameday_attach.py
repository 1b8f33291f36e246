"""A game day attaches to a live run through a capability (``Attachable``), asked of the
backend the run's record names: the docker and slurm backends declare it, any backend that
declares it can be attached to, and a run on one without it is refused naming those that
have it. Nothing in chaos/gameday names a concrete backend. The slurm backend's side: the
job found from its tasks' node files, each node's state in Slurm's words (exited, down,
suspended, running), with fake Slurm answers (the real one: tests/integration/test_gameday_slurm.py)."""

from __future__ import annotations

import ast
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import yaml

import chaos.cluster as clusters
import chaos.gameday.attach as attach
from chaos.cluster import lookup_backend
from chaos.cluster import slurm as slurm_backend
from chaos.cluster.base import ClusterBackend, RunSpec
from chaos.cluster.capabilities import Attachable, NodeHandle, has
from chaos.errors import ScenarioError, ToolError
from chaos.gameday.plan import Plan
from chaos.gameday.session import GameDay
from chaos.model.scenario import Topology
from chaos.util.procs import process_state


class _Stand(ClusterBackend):
    """A stand-in backend that can be attached to (as a plugin's could)."""

    name: ClassVar[str] = "stand"
    capabilities: ClassVar[tuple[type, ...]] = (Attachable,)
    attached: ClassVar[list[Any]] = []

    @classmethod
    def attach(cls, spec: Any) -> _Stand:
        cls.attached.append(spec)
        return cls(spec, None)  # type: ignore[arg-type]

    def rescan(self) -> dict[int, str]:
        return {0: "running", 1: "paused"}

    def node_handle(self, node: int) -> NodeHandle:
        return NodeHandle("stand node", str(node), "it has no stand node")

    def start(self) -> None: ...
    def poll(self) -> dict: return {}
    def stop(self, grace_s: float = 3.0) -> list[int]: return []
    def node_address(self, node: int) -> str: return "127.0.0.1"
    def node_logs(self) -> dict[int, str]: return {}
    def process_alive(self, pid: int) -> bool: return False
    def find_rank(self, rank: int) -> None: return None
    def signal_pid(self, pid: int, sig: int) -> bool: return False
    def signal_node(self, node: int, sig: int) -> list[int]: return []


@pytest.fixture
def stand(monkeypatch: pytest.MonkeyPatch) -> type[_Stand]:
    clusters.BACKENDS.load()
    monkeypatch.setattr(clusters.BACKENDS, "items", dict(clusters.BACKENDS.items))
    clusters.register_backend(_Stand)
    _Stand.attached.clear()
    return _Stand


def _entry(tmp_path: Path, backend: str) -> dict[str, Any]:
    (tmp_path / "run" / "events").mkdir(parents=True)
    record = {"run_id": "trainchaos-att", "backend": {"name": backend, "options": {}},
              "scenario": {"topology": {"nodes": 2, "ranks_per_node": 1}}}
    return {"run_id": "trainchaos-att", "run_dir": str(tmp_path / "run"), "record": record}


def test_docker_and_slurm_are_the_builtins_that_declare_attachable() -> None:
    assert has(lookup_backend("docker"), Attachable) and has(lookup_backend("slurm"), Attachable)
    assert attach.attachable_backends() == ["docker", "slurm"]


def test_the_game_day_names_no_concrete_backend() -> None:
    """No cast to, import of, or name of one backend anywhere in chaos/gameday: what a run
    can do is asked of its backend as capabilities (issue 45)."""
    names = set(clusters.known_backends())
    modules = {cls.__module__ for cls in clusters.known_backends().values()}
    for path in sorted((Path(attach.__file__).parent).glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.module not in modules, f"{path.name}:{node.lineno} imports {node.module}"
            elif isinstance(node, ast.Import):
                assert not {a.name for a in node.names} & modules, f"{path.name}:{node.lineno}"
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id != "cast", f"{path.name}:{node.lineno} casts"
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert node.value not in names, f"{path.name}:{node.lineno} names backend {node.value!r}"


def test_the_run_is_attached_through_the_backend_its_record_names(tmp_path: Path, stand: type[_Stand]) -> None:
    run = attach.AttachedRun(_entry(tmp_path, "stand"), hosts=[])
    assert isinstance(run.backend, _Stand) and stand.attached[0].run_id == "trainchaos-att"
    assert run.states == {0: "running", 1: "paused"} and run.nodes_running() == 1
    assert "stand" in attach.attachable_backends()


def test_a_run_on_a_backend_without_it_is_refused_naming_those_with_it(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"run trainchaos-att runs on the local backend, which a game day "
                                        r"cannot attach to: local has no Attachable \(.*\); backends "
                                        r"that have it: docker, slurm"):
        attach.AttachedRun(_entry(tmp_path, "local"), hosts=[])


def test_find_run_refuses_a_live_run_it_cannot_attach_to_and_skips_it_for_latest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = {"run_id": "trainchaos-loc", "run_dir": str(tmp_path), "started": 1}
    start = SimpleNamespace(backend=SimpleNamespace(name="local"), model_dump=lambda **_: {})
    monkeypatch.setattr(attach, "active_runs", lambda: [entry])
    monkeypatch.setattr(attach, "run_is_live", lambda e: True)
    monkeypatch.setattr(attach, "load_run_start", lambda run_dir: start)
    with pytest.raises(ScenarioError) as info:
        attach.find_run("trainchaos-loc", "plan.yaml")
    assert str(info.value).startswith("plan.yaml: run: run trainchaos-loc runs on the local backend, "
                                      "which a game day cannot attach to")
    with pytest.raises(ScenarioError, match=r"plan.yaml: run: no live docker or slurm run 'latest' \(live runs: "
                                            r"trainchaos-loc\)"):
        attach.find_run("latest", "plan.yaml")


def test_a_container_target_on_a_run_whose_nodes_are_not_containers_is_refused(
        tmp_path: Path, stand: type[_Stand]) -> None:
    run = attach.AttachedRun(_entry(tmp_path, "stand"), hosts=[])
    with pytest.raises(attach.TargetRefused, match=r"refusing to touch container 'x': run trainchaos-att's "
                                                   r"nodes are stand nodes, not containers"):
        run.resolve_step({"container": "x"})
    assert run.resolve_step({"node": 1}, live=False).unmet == [
        "node 1 is paused: its stand node 1 is paused, not running"]


def test_plan_hosts_for_a_run_whose_backend_takes_none_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"the plan's hosts \(ssh://gpu1\) name engines of a run's containers; "
                                        r"run trainchaos-att runs on the slurm backend, which takes no hosts"):
        attach.AttachedRun(_entry(tmp_path, "slurm"), hosts=["ssh://gpu1"])


@pytest.mark.parametrize(("fault", "backend", "works_on"), [
    ("node_down", "docker", "slurm"), ("container_pause", "slurm", "docker")])
def test_a_fault_type_the_runs_backend_lacks_is_a_located_error(tmp_path: Path, fault: str, backend: str,
                                                                works_on: str) -> None:
    plan = Plan.model_validate(yaml.safe_load(f"""\
name: p
steps:
  - observe: {{seconds: 1}}
  - inject: {{type: {fault}, target: {{node: 1}}}}
"""))
    gd = GameDay(plan, "plan.yaml", str(tmp_path / "out"))
    gd.run = SimpleNamespace(spec=SimpleNamespace(run_id="trainchaos-att"))
    with pytest.raises(ScenarioError) as info:
        gd._check_types(backend)
    assert str(info.value) == (f"plan.yaml: steps[1].inject.type: {fault} does not work on run trainchaos-att's "
                               f"backend {backend} (it works on: {works_on})")


# -- the slurm backend, attached, with Slurm's answers faked ---------------------------------

def _slurm_run(tmp_path: Path, nodes: int) -> RunSpec:
    (tmp_path / "slurm").mkdir()
    return RunSpec(run_id="trainchaos-sl", run_dir=str(tmp_path), topology=Topology(nodes=nodes, ranks_per_node=1),
                   worker_argv=[], options={"no_kill": True})


def _task(tmp_path: Path, node: int, agent: int, slurm_node: str) -> None:
    (tmp_path / "slurm" / f"node-{node}.json").write_text(json.dumps({
        "node": node, "wrapper_pid": os.getpid(), "agent_pid": agent, "host": socket.gethostname(),
        "slurm_node": slurm_node, "job_id": "17", "restart_count": 0}))


def _wait_stopped(pid: int, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if process_state(pid) == "T":
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} not stopped {within_s:g} s after SIGSTOP")


def test_an_attached_slurm_run_reads_its_job_and_each_node_in_slurms_words(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = {"state": "RUNNING"}
    asked: list[list[str]] = []

    def fake_slurm(argv: list[str], conf: str | None = None, **_: object) -> subprocess.CompletedProcess[str]:
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 0, f"JobId=17 JobState={job['state']} Restarts=0\n", "")

    monkeypatch.setattr(slurm_backend, "slurm", fake_slurm)
    monkeypatch.setattr(slurm_backend, "node_states", lambda names, conf=None: {
        "n1": ("MIXED", ""), "n2": ("DOWN+NOT_RESPONDING", "trainchaos:x"), "n3": ("IDLE+DRAIN", "maint"),
        "n4": ("MIXED", "")})
    frozen = subprocess.Popen(["sleep", "60"])
    running = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(frozen.pid, signal.SIGSTOP)
        _wait_stopped(frozen.pid)  # the kernel marks it stopped a moment after the signal
        spec = _slurm_run(tmp_path, nodes=6)
        _task(tmp_path, 0, frozen.pid, "n1")
        _task(tmp_path, 1, running.pid, "n2")
        _task(tmp_path, 2, running.pid, "n3")
        _task(tmp_path, 3, running.pid, "n4")
        _task(tmp_path, 4, running.pid, "n4")
        (tmp_path / "slurm" / "node-4.rc").write_text("0 0")  # node 5: no task at all
        cluster = slurm_backend.SlurmCluster.attach(spec)
        assert cluster.job_id == "17" and ["scontrol", "show", "job", "17", "-o"] in asked
        assert cluster.rescan() == {0: "suspended", 1: "down", 2: "drained", 3: "running", 4: "exited"}
        assert str(cluster.node_handle(1)) == "Slurm task of job 17 on n2"
        assert cluster.node_handle(5).absent == ("it has no Slurm task (job 17 runs none for node 5 now: "
                                                 "not started yet, or ended)")
        job["state"] = "SUSPENDED"  # scontrol suspend: every task of the job stopped
        assert cluster.rescan()[3] == "suspended"
        job["state"] = "COMPLETED"
        assert cluster.rescan() == {}
        assert not (tmp_path / "slurm" / "spares.go").exists()
    finally:
        for proc in (frozen, running):
            proc.kill()
            proc.wait()


# -- power faults on Slurm: the tasks of a domain killed; power does not return -------------

def _power_plan(fault: str, target: str, params: str = "") -> Plan:
    return Plan.model_validate(yaml.safe_load(f"""\
name: p
steps:
  - observe: {{seconds: 1}}
  - inject: {{type: {fault}, target: {target}{', params: ' + params if params else ''}}}
"""))


def test_a_power_cut_on_slurm_kills_every_task_process_of_its_nodes_and_no_other(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _slurm_run(tmp_path, nodes=3)
    procs = {(node, role): subprocess.Popen(["sleep", "60"]) for node in range(3) for role in ("agent", "worker", "wrapper")}
    try:
        for node in range(3):
            (tmp_path / "slurm" / f"node-{node}.json").write_text(json.dumps({
                "node": node, "wrapper_pid": procs[node, "wrapper"].pid, "agent_pid": procs[node, "agent"].pid,
                "host": socket.gethostname() if node < 2 else "elsewhere", "slurm_node": f"n{node + 1}",
                "job_id": "17"}))
        # The run's processes as /proc shows them: the task's wrapper is the run's, of no node.
        monkeypatch.setattr(slurm_backend, "find_run_processes", lambda run_id: [
            SimpleNamespace(pid=p.pid, node=None if role == "wrapper" else node) for (node, role), p in procs.items()])
        through_srun: list[tuple[int, int, list[int]]] = []
        cluster = slurm_backend.SlurmCluster(spec, None)  # type: ignore[arg-type]
        monkeypatch.setattr(cluster, "_srun_signal", lambda node, sig, pids=None, whole_node=False:
                            through_srun.append((node, sig, list(pids or []))) or list(pids or []))
        cut = cluster.power_off((0, 1))
        assert sorted(cut.pids) == sorted(p.pid for (node, _), p in procs.items() if node < 2)
        assert all(procs[node, role].wait(timeout=5) == -signal.SIGKILL
                   for node in (0, 1) for role in ("agent", "worker", "wrapper"))
        assert procs[2, "agent"].poll() is None and through_srun == [] and cluster.lost == {0, 1}
        # A node on another host: one one-task step there, naming its agent and wrapper.
        assert cluster.power_off((2,)).pids == [procs[2, "agent"].pid, procs[2, "wrapper"].pid]
        assert through_srun == [(2, signal.SIGKILL, [procs[2, "agent"].pid, procs[2, "wrapper"].pid])]
        with pytest.raises(ToolError, match="local_data: all cannot wipe node 2's disk: its Slurm task runs on "
                                            "elsewhere"):
            cluster.wipe_local_data(2)
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


@pytest.mark.parametrize(("fault", "target"), [("power_outage", "{power_domain: pd-a}"), ("rack_loss", "{rack: r1}")])
def test_power_that_returns_is_refused_on_an_attached_slurm_run_and_a_cut_for_good_is_not(
        tmp_path: Path, fault: str, target: str) -> None:
    gd = GameDay(_power_plan(fault, target, "{duration_s: 30}"), "plan.yaml", str(tmp_path / "out"))
    gd.run = SimpleNamespace(spec=SimpleNamespace(run_id="trainchaos-att"))
    with pytest.raises(ScenarioError) as info:
        gd._check_types("slurm")
    assert str(info.value) == (
        f"plan.yaml: steps[1].inject.params.duration_s: {fault} with duration_s needs PowerReturn (power back on "
        "a node after an outage: a fresh agent that rejoins the job), which the slurm backend has not; leave "
        "duration_s out (the nodes stay off until the run ends), or run the job on a backend whose nodes it "
        "starts itself (docker or local or netns); run trainchaos-att runs on slurm: nothing was started")
    gd.plan = _power_plan(fault, target)
    gd._check_types("slurm")  # the cut alone works there
    gd.plan = _power_plan(fault, target, "{duration_s: 30}")
    gd._check_types("docker")
