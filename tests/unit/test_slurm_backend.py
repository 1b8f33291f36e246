"""The ``slurm`` backend without a cluster: option validation, preflight messages (with fake
Slurm commands on PATH), the submitted ``sbatch`` command, scheduler faults refused on other
backends."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from chaos.cluster import known_backends, lookup_backend
from chaos.cluster.base import RunSpec
from chaos.cluster.slurm import SlurmCluster
from chaos.cluster.slurm_resources import SlurmJob, SlurmNodeState
from chaos.errors import ScenarioError
from chaos.faults.base import lookup
from chaos.runfiles.resources import RunResources
from chaos.scenario.load import parse_scenario

BASE = {
    "name": "s",
    "workload": {"harness": {"steps": 20, "model": {"name": "mlp"}}},
    "topology": {"nodes": 2, "ranks_per_node": 1},
    "faults": [{"type": "kill_rank", "target": {"rank": 1}, "trigger": {"at_step": 5}}],
}

PARTITIONS = ("PartitionName=gpu AllowGroups=ALL Default=YES TotalNodes=4 State=UP\n"
              "PartitionName=debug Default=NO TotalNodes=1 State=UP\n")


def _scenario(**changes: object):  # noqa: ANN202
    return parse_scenario({**BASE, **changes}, "s.yaml")


def _messages(exc: ScenarioError) -> str:
    return "\n".join(str(i) for i in exc.issues)


def _fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ping: str = "UP") -> None:
    """``scontrol`` answering ping and show partition; the other commands exist."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "partitions").write_text(PARTITIONS)
    scripts = {
        "scontrol": f"""#!/bin/sh
case "$1" in
  ping) echo "Slurmctld(primary) at localhost is {ping}"; [ "{ping}" = UP ] ;;
  show) /bin/cat {tmp_path / "partitions"} ;;
esac
""",
    }
    for name in ("sbatch", "srun", "squeue", "scancel", "sinfo", "scontrol"):
        path = bin_dir / name
        path.write_text(scripts.get(name, "#!/bin/sh\nexit 0\n"))
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_slurm_is_a_known_backend_with_its_options() -> None:
    assert known_backends()["slurm"] is SlurmCluster
    scenario = _scenario(backend={"slurm": {"partition": "gpu", "no_kill": True, "sbatch_args": ["--qos=x"]}})
    assert scenario.backend.name == "slurm"
    assert scenario.backend.options["no_kill"] is True and scenario.backend.options["partition"] == "gpu"


@pytest.mark.parametrize(("options", "needle"), [
    ({"partion": "gpu"}, "backend.slurm.partion"),
    ({"no_kill": "yes"}, "backend.slurm.no_kill"),
    ({"sbatch_args": "--qos=x"}, "backend.slurm.sbatch_args"),
])
def test_bad_options_are_located_errors(options: dict, needle: str) -> None:
    with pytest.raises(ScenarioError) as exc:
        _scenario(backend={"slurm": options})
    assert needle in _messages(exc.value)


def test_a_scheduler_fault_is_refused_on_another_backend() -> None:
    fault = {"type": "node_down", "target": {"node": 1}, "trigger": {"at_step": 5}}
    with pytest.raises(ScenarioError) as exc:
        _scenario(faults=[fault])
    assert "faults[0].type: node_down acts through the slurm backend; this scenario runs on local" in _messages(exc.value)
    assert _scenario(faults=[fault], backend="slurm").faults[0].type == "node_down"


def test_a_scheduler_fault_on_a_node_outside_the_job_is_refused() -> None:
    fault = {"type": "drain_node", "target": {"node": 2}, "trigger": {"at_step": 5}}
    with pytest.raises(ScenarioError) as exc:
        _scenario(faults=[fault], backend="slurm")
    assert "faults[0].target.node: node 2 does not exist" in _messages(exc.value)


def test_scheduler_faults_document_their_fidelity() -> None:
    for name in ("node_down", "drain_node"):
        cls = lookup(name)
        assert cls.family == "scheduler" and cls.supported_backends() == ("slurm",) and "Stands for" in cls.fidelity


def test_preflight_without_sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    problems = SlurmCluster.preflight(_scenario(backend="slurm"))
    assert problems == ["slurm: sbatch is not on PATH (install the Slurm client commands, slurm-client or "
                        "slurm-wlm)"]


def test_preflight_when_slurmctld_does_not_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_slurm(tmp_path, monkeypatch, ping="DOWN")
    (problem,) = SlurmCluster.preflight(_scenario(backend="slurm"))
    assert "slurmctld does not answer `scontrol ping`" in problem


@pytest.mark.parametrize(("options", "nodes", "expected"), [
    ({}, 2, []),
    ({"partition": "debug"}, 2, ["slurm: the job needs 2 nodes (topology.nodes) but partition 'debug' has 1"]),
    ({"partition": "gpux"}, 2, ["slurm.partition: unknown partition 'gpux'; known: debug, gpu"]),
    ({}, 8, ["slurm: the job needs 8 nodes (topology.nodes) but partition 'gpu' has 4"]),
])
def test_preflight_checks_the_partition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict,
                                        nodes: int, expected: list[str]) -> None:
    _fake_slurm(tmp_path, monkeypatch)
    scenario = _scenario(backend={"slurm": options}, topology={"nodes": nodes, "ranks_per_node": 1},
                         workload={"harness": {"steps": 20, "model": {"name": "mlp"}, "global_batch": 16}})
    assert SlurmCluster.preflight(scenario) == expected


def test_preflight_refuses_spares_slurm_would_kill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_slurm(tmp_path, monkeypatch)
    scenario = _scenario(backend="slurm", topology={"nodes": 2, "ranks_per_node": 1, "spares": 1})
    assert any("slurm: spares need no_kill: true" in p for p in SlurmCluster.preflight(scenario))
    scenario = _scenario(backend={"slurm": {"no_kill": True}}, topology={"nodes": 2, "ranks_per_node": 1, "spares": 1})
    assert SlurmCluster.preflight(scenario) == []


def test_the_sbatch_command_carries_the_options(tmp_path: Path) -> None:
    scenario = _scenario(backend={"slurm": {"partition": "gpu", "account": "ml", "time_limit": "10",
                                            "no_kill": True, "requeue": True, "sbatch_args": ["--qos=chaos"]}})
    run_dir = tmp_path / "run"
    (run_dir / "slurm").mkdir(parents=True)
    spec = RunSpec(run_id="trainchaos-abc", run_dir=str(run_dir), topology=scenario.topology,
                   worker_argv=["-m", "harness"], options=dict(scenario.backend.options))
    cluster = lookup_backend("slurm")(spec, RunResources(spec.run_id, str(run_dir)))
    job = cluster._job_spec()
    argv = job["argv"]
    assert argv[0] == "sbatch" and job["name"] == "trainchaos-abc"
    for flag in ("--job-name=trainchaos-abc", "--nodes=2", "--ntasks-per-node=1", "--partition=gpu",
                 "--account=ml", "--time=10", "--no-kill", "--requeue", "--qos=chaos"):
        assert flag in argv, (flag, argv)
    script = (run_dir / "slurm" / "job.sh").read_text()
    assert "srun --nodes=2 --ntasks-per-node=1" in script and "--no-kill" in script
    assert "chaos.cluster.slurm_node" in script
    assert job["env"]["TRAINCHAOS_RUN_ID"] == "trainchaos-abc"


def test_scans_find_nothing_without_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert SlurmJob.scan() == [] and SlurmNodeState.scan() == []


def test_a_job_not_named_by_trainchaos_is_never_cancelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("scancel", "squeue"):
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\necho {name} \"$@\" >> {log}\n")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ["PATH"])
    SlurmJob.destroy({"name": "someone-elses-job"}, {"job_id": "42"})
    assert not log.exists()
    SlurmJob.destroy({"name": "trainchaos-abc"}, {"job_id": "42"})
    assert "scancel --name=trainchaos-abc" in log.read_text()


def test_a_rack_outage_maps_onto_its_slurm_nodes() -> None:
    """A rack or power domain is a set of the job's nodes; node_down takes each one DOWN."""
    fault = {"type": "node_down", "target": {"rack": "r1"}, "trigger": {"at_step": 5}}
    scenario = _scenario(faults=[fault], backend="slurm",
                         topology={"nodes": 4, "ranks_per_node": 1, "racks": {"r1": [2, 3], "r0": [0, 1]}})
    from chaos.model.targets import parse_target

    assert parse_target(scenario.faults[0].target).nodes(scenario.topology) == (2, 3)


def test_inside_an_allocation_the_run_is_one_named_step(tmp_path: Path) -> None:
    scenario = _scenario(backend={"slurm": {"jobid": 1234}})
    run_dir = tmp_path / "run"
    (run_dir / "slurm").mkdir(parents=True)
    spec = RunSpec(run_id="trainchaos-abc", run_dir=str(run_dir), topology=scenario.topology,
                   worker_argv=["-m", "harness"], options=dict(scenario.backend.options))
    cluster = lookup_backend("slurm")(spec, RunResources(spec.run_id, str(run_dir)))
    step = cluster._step_spec()
    assert step["argv"][:4] == ["srun", "--jobid=1234", "--job-name=trainchaos-abc", "--overlap"]
    assert step["job_id"] == "1234" and step["name"] == "trainchaos-abc"


def test_jobid_must_be_positive() -> None:
    with pytest.raises(ScenarioError) as exc:
        _scenario(backend={"slurm": {"jobid": 0}})
    assert "backend.slurm.jobid" in _messages(exc.value)


def test_a_requeued_node_rendezvouses_under_a_new_id_in_any_spelling_of_the_option() -> None:
    from chaos.cluster.slurm_node import rdzv_id_for_restart

    tail = ["-m", "harness", "--rdzv-id", "mine"]  # the worker's own arguments are left alone
    assert rdzv_id_for_restart(["torchrun", "--rdzv-id", "run-1", *tail], 2) == ["torchrun", "--rdzv-id", "run-1-r2", *tail]
    assert rdzv_id_for_restart(["torchrun", "--rdzv-id=run-1", *tail], 1) == ["torchrun", "--rdzv-id=run-1-r1", *tail]
    assert rdzv_id_for_restart(["torchrun", "--rdzv_id", "run-1"], 3) == ["torchrun", "--rdzv_id", "run-1-r3"]
    assert rdzv_id_for_restart(["torchrun", "--nnodes", "2"], 1) == ["torchrun", "--nnodes", "2"]


def test_a_power_outage_whose_power_returns_is_refused_on_slurm_where_it_could_not_return() -> None:
    topology = {"nodes": 2, "ranks_per_node": 1, "min_nodes": 1, "power_domains": {"pd-a": [1], "pd-b": [0]}}
    fault = {"type": "power_outage", "target": {"power_domain": "pd-a"}, "trigger": {"at_step": 5},
             "params": {"duration_s": 5}}
    with pytest.raises(ScenarioError) as exc:
        _scenario(faults=[fault], backend="slurm", topology=topology)
    assert _messages(exc.value) == (
        "s.yaml: faults[0].params.duration_s: power_outage with duration_s needs PowerReturn (power back on a "
        "node after an outage: a fresh agent that rejoins the job), which the slurm backend has not; leave "
        "duration_s out (the nodes stay off until the run ends), or run the job on a backend whose nodes it "
        "starts itself (docker or local or netns)")
    _scenario(faults=[{**fault, "params": {}}], backend="slurm", topology=topology)  # the cut alone: accepted
    _scenario(faults=[fault], backend="local", topology=topology)
