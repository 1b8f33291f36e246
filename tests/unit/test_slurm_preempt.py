"""The ``preempt_job`` fault and the job target, the Slurm step signaller, without a cluster
(the real thing runs in tests/integration/test_slurm.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.cluster import lookup_backend
from chaos.cluster.base import RunSpec
from chaos.cluster.slurm import SlurmCluster
from chaos.cluster.slurm_signal import select_pids
from chaos.errors import ScenarioError
from chaos.faults.base import lookup
from chaos.runfiles.resources import RunResources
from chaos.runner.plan import resolve_target
from chaos.runner.suite import preflight
from chaos.scenario.load import parse_scenario


def _fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Slurm client commands on PATH; ``scontrol`` answers ping and show partition."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sbatch", "srun", "squeue", "scancel", "sinfo"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "scontrol").write_text(
        '#!/bin/sh\ncase "$1" in\n  ping) echo "Slurmctld(primary) at localhost is UP" ;;\n'
        '  show) echo "PartitionName=gpu Default=YES TotalNodes=4 State=UP" ;;\nesac\n')
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))

PREEMPT = {"type": "preempt_job", "target": {"job": True}, "trigger": {"at_step": 5}}


def _scenario(**changes: object):  # noqa: ANN202
    return parse_scenario({"name": "s", "workload": {"harness": {"steps": 20, "model": {"name": "mlp"}}},
                           "topology": {"nodes": 2, "ranks_per_node": 2}, "faults": [PREEMPT],
                           "backend": {"slurm": {"requeue": True}}, **changes}, "s.yaml")


def _messages(exc: ScenarioError) -> str:
    return "\n".join(str(i) for i in exc.issues)


def test_preempt_job_targets_the_whole_job() -> None:
    scenario = _scenario()
    assert scenario.faults[0].target == {"job": True}
    resolved = resolve_target(scenario.faults[0].target, scenario.topology)
    assert resolved.srcs() == ["rank-0", "rank-1", "rank-2", "rank-3", "node-0", "node-1"]
    cls = lookup("preempt_job")
    assert cls.family == "scheduler" and cls.supported_backends() == ("slurm",) and "Stands for" in cls.fidelity


@pytest.mark.parametrize(("fault", "needle"), [
    ({**PREEMPT, "target": {"node": 1}}, "faults[0].target.node: preempt_job targets a job, not a node; use {job: true}"),
    ({"type": "kill_rank", "target": {"job": True}, "trigger": {"at_step": 5}},
     "faults[0].target.job: kill_rank targets a rank, not a job"),
    ({**PREEMPT, "target": {"job": False}}, "faults[0].target.job: a job target is {job: true}: the whole job"),
])
def test_job_targets_are_checked_with_a_location(fault: dict, needle: str) -> None:
    with pytest.raises(ScenarioError) as exc:
        _scenario(faults=[fault])
    assert needle in _messages(exc.value)


def test_preempt_job_is_refused_on_local() -> None:
    with pytest.raises(ScenarioError) as exc:
        _scenario(backend="local")
    assert "faults[0].type: preempt_job acts through the slurm backend" in _messages(exc.value)


@pytest.mark.parametrize(("options", "needle"), [
    ({}, "faults[0]: preempt_job requeues the job: submit it requeueable"),
    ({"requeue": True, "jobid": 12}, "faults[0]: preempt_job requeues the job, and a run inside an existing allocation"),
])
def test_preflight_refuses_a_preemption_slurm_cannot_requeue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            options: dict, needle: str) -> None:
    """The fault asks the backend's Scheduler capability (``requeue_refusal``); the run's
    preflight (``chaos.runner.suite.preflight``) says it beside the backend's own problems."""
    _fake_slurm(tmp_path, monkeypatch)
    with pytest.raises(ScenarioError) as exc:
        preflight([_scenario(backend={"slurm": options})])
    assert needle in _messages(exc.value)
    assert SlurmCluster.preflight(_scenario()) == []
    preflight([_scenario()])  # requeueable, a job of its own: nothing to refuse


def _cluster(tmp_path: Path, options: dict) -> SlurmCluster:
    scenario = _scenario(backend={"slurm": options})
    run_dir = tmp_path / "run"
    (run_dir / "slurm").mkdir(parents=True)
    spec = RunSpec(run_id="trainchaos-abc", run_dir=str(run_dir), topology=scenario.topology,
                   worker_argv=["-m", "harness"], options=dict(scenario.backend.options))
    return lookup_backend("slurm")(spec, RunResources(spec.run_id, str(run_dir)))


def test_signals_go_through_srun_on_the_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``signal_via: srun``: a one-task step in the job on the node's Slurm node runs the
    signaller there; the pids it reports are what the fault records."""
    log = tmp_path / "srun.args"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(f'#!/bin/sh\necho "$@" > {log}\necho \'{{"pids": [41, 42]}}\'\n')
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ["PATH"])
    cluster = _cluster(tmp_path, {"requeue": True, "signal_via": "srun"})
    cluster.job_id = "77"
    cluster._node_names[1] = "n3"
    assert cluster.signal_node(1, signal.SIGTERM) == [41, 42]
    args = log.read_text().split()
    assert args[:6] == ["--jobid=77", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=n3",
                        "--job-name=trainchaos-signal"]
    tail = args[args.index("chaos.cluster.slurm_signal"):]
    assert tail == ["chaos.cluster.slurm_signal", "--run", "trainchaos-abc", "--signal", "SIGTERM", "--node", "1"]
    assert 1 in cluster.lost, "a fatal signal marks the node lost, as on local"

    from chaos.cluster.base import LiveRank

    cluster._live[3] = LiveRank(3, 1, 4242)  # rank 3 announced itself on node 1, pid 4242 there
    assert cluster.signal_pid(4242, signal.SIGKILL) is False, "srun reported other pids: not this one"
    tail = log.read_text().split()
    assert tail[tail.index("--signal"):] == ["--signal", "SIGKILL", "--pid", "4242"]
    assert cluster.signal_rank(3, signal.SIGSTOP) == [41, 42]
    tail = log.read_text().split()
    assert tail[tail.index("--signal"):] == ["--signal", "SIGSTOP", "--rank", "3"]

def test_an_srun_that_fails_is_a_tool_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\necho 'srun: error: Unable to create step' >&2\nexit 1\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ["PATH"])
    cluster = _cluster(tmp_path, {"requeue": True, "signal_via": "srun"})
    cluster.job_id = "77"
    cluster._node_names[0] = "n1"
    from chaos.errors import ToolError

    with pytest.raises(ToolError, match="signalling node 0 \\(n1\\) through srun failed .*Unable to create step"):
        cluster.signal_node(0, signal.SIGTERM)


def test_the_signaller_touches_only_the_run_s_processes(tmp_path: Path) -> None:
    """Real processes: one of the run (by its environment), one not; a pid that is not the
    run's is never selected, whatever the controller asked."""
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                            env={**os.environ, "TRAINCHAOS_RUN_ID": "trainchaos-sig", "TRAINCHAOS_NODE": "1",
                                 "RANK": "3"})
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             env={**os.environ, "TRAINCHAOS_NODE": "1", "RANK": "3"})
    try:
        assert select_pids("trainchaos-sig", 1, None, [other.pid]) == [ours.pid]
        assert select_pids("trainchaos-sig", None, 3, []) == [ours.pid]
        assert select_pids("trainchaos-sig", 0, None, []) == []
        out = subprocess.run([sys.executable, "-m", "chaos.cluster.slurm_signal", "--run", "trainchaos-sig",
                              "--signal", "SIGTERM", "--rank", "3", "--pid", str(other.pid)],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        assert f'"pids": [{ours.pid}]' in out
        assert ours.wait(timeout=10) == -signal.SIGTERM and other.poll() is None
    finally:
        for proc in (ours, other):
            proc.kill()
            proc.wait()
