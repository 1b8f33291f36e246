"""The ``slurm`` backend on a real Slurm: munge, slurmctld and 4 emulated slurmd on this
machine (``chaos.cluster.slurm_testbed``), started once for the module and stopped after.

Each scenario of ``scenarios/slurm/`` runs through the real ``trainchaos run`` and must meet
its targets with the same metrics as on ``local`` (detection, recovery, lost steps,
attribution), with Slurm's own job and node states in the timeline; afterwards no trainchaos
job is queued, every node is back in service and ``cleanup --check`` exits 0. A controller
SIGKILLed while a node is DOWN is cleaned up by ``trainchaos cleanup``. A drain with grace
and a preemption (requeue) lose no step (the emergency checkpoint, harness.preempt); a
spare task replaces a DOWN node; ``kill-node`` is signalled through ``srun`` into the job,
the way a real cluster must be.

The scenarios run with warm ranks (``harness.warm_start``): a restart inside the job step
forks its ranks from the node's zygote, which Slurm's signals (a drain's SIGTERM, a
preemption's) leave to the ranks; no test here asserts anything of a cold launch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from chaos.cluster.slurm_testbed import SlurmTestbed
from chaos.runfiles.rollback import FaultJournal
from chaos.util.procs import find_run_processes
from tests.integration._support import (
    REPO,
    TRAINCHAOS,
    cli_env,
    machine_cleanup_lock,
    run_trainchaos,
    slurm_cluster_fixture,
    slurm_cmd,
    slurm_node_states,
    warm_copy,
)

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

SCENARIOS = REPO / "scenarios" / "slurm"


slurm_cluster = slurm_cluster_fixture(nodes=4)


def _env(bed: SlurmTestbed, tmp_path: Path) -> dict[str, str]:
    return cli_env(tmp_path / "state", **bed.env())


def _cli(bed: SlurmTestbed, tmp_path: Path, *argv: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    return run_trainchaos(list(argv), env=_env(bed, tmp_path), cwd=tmp_path, timeout=timeout)


def _trainchaos_jobs(bed: SlurmTestbed) -> list[str]:
    return [line for line in slurm_cmd(bed, "squeue", "-h", "-o", "%i %j %T").splitlines() if "trainchaos-" in line]


def _events(run_dir: Path, src_glob: str = "*") -> list[dict]:
    out = []
    for path in (run_dir / "events").glob(f"{src_glob}.jsonl"):
        out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(out, key=lambda e: e["t"])


def _assert_clean(bed: SlurmTestbed, tmp_path: Path, run_id: str | None = None) -> None:
    assert not _trainchaos_jobs(bed), "no trainchaos job may be left in squeue"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and set(slurm_node_states(bed).values()) != {"idle"}:
        time.sleep(0.2)
    assert set(slurm_node_states(bed).values()) == {"idle"}, f"every node back in service: {slurm_node_states(bed)}"
    if run_id:
        assert not find_run_processes(run_id)
    with machine_cleanup_lock():  # a test beside it may have a SIGKILLed controller's leftovers
        check = _cli(bed, tmp_path, "cleanup", "--check", timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


CASES = {
    # scenario file: (slurm events that must be in the timeline, world size at the end)
    "rank-kill": ({"slurm_job", "slurm_step"}, 2),
    # Signalled the way a real cluster must (srun into the job on the node), not by local pid.
    "kill-node": ({"slurm_job", "slurm_signal"}, 1),
    "node-down-no-kill": ({"slurm_job", "slurm_node_update"}, 1),
    # SIGTERM first: the ranks agree on a step and checkpoint it within the grace.
    "drain-with-grace": ({"slurm_job", "slurm_node_update"}, 1),
    # Slurm ends the job (no --no-kill) and requeues it; the scheduler is the detector.
    "node-fail-requeue": ({"slurm_job", "slurm_node_update", "slurm_requeue", "detected"}, 2),
    # A spare task of the job, released once the first round formed, replaces the DOWN node.
    "node-down-spare": ({"slurm_job", "slurm_node_update", "slurm_spares_released"}, 2),
    # scontrol requeue: SIGTERM to every task, an emergency checkpoint, the job back in the queue.
    "preempt-requeue": ({"slurm_job", "slurm_job_update", "slurm_requeue", "slurm_step"}, 2),
}
# Scenarios whose SIGTERM warning lets the ranks checkpoint the step they agree on: no loss.
NO_LOSS = {"drain-with-grace", "preempt-requeue"}
BACKEND_OVERRIDE = {"kill-node": ("backend: {slurm: {no_kill: true}}",
                                  "backend: {slurm: {no_kill: true, signal_via: srun}}")}


@pytest.mark.timeout(200)
@pytest.mark.parametrize("name", list(CASES))
def test_scenario_on_slurm_meets_its_targets(slurm_cluster: SlurmTestbed, tmp_path: Path, name: str) -> None:
    kinds, final_world = CASES[name]
    scenario = SCENARIOS / f"{name}.yaml"
    if name in BACKEND_OVERRIDE:
        old, new = BACKEND_OVERRIDE[name]
        assert old in scenario.read_text()
        scenario = tmp_path / f"{name}.yaml"
        scenario.write_text((SCENARIOS / f"{name}.yaml").read_text().replace(old, new))
    scenario = warm_copy(scenario, tmp_path / "warm")
    result = _cli(slurm_cluster, tmp_path, "run", str(scenario), "--out", str(tmp_path / "out"))
    output = result.stdout + result.stderr
    run_dir = next((tmp_path / "out").glob("*/0"))
    journal = json.loads((run_dir / "journal.json").read_text())
    assert result.returncode == 0, output
    assert journal["status"] == "completed" and journal["verdict"]["passed"], journal["verdict"]
    metrics = journal["metrics"]
    assert metrics["detection_s"] is not None and metrics["recovery_s"] is not None, metrics
    assert metrics["lost_steps"] is not None and metrics["lost_steps"] <= 10
    if name in NO_LOSS:
        assert metrics["lost_steps"] == 0, metrics
        stops = [e for e in _events(run_dir, "rank-*") if e["kind"] == "emergency_checkpoint"]
        assert stops and all(e["ok"] for e in stops) and len({e["step"] for e in stops}) == 1, stops
    assert any(c["name"] == "attribution" and c["value"] == "correct" for c in journal["verdict"]["checks"])
    assert metrics["final_world_size"] == final_world

    slurm_events = _events(run_dir, "slurm.*")
    assert kinds <= {e["kind"] for e in slurm_events}, slurm_events
    assert any(e["kind"] == "slurm_job" and e["state"] == "RUNNING" for e in slurm_events)
    if "slurm_requeue" in kinds:
        requeued = [e for e in slurm_events if e["kind"] == "slurm_job" and e["restarts"] == 1]
        assert any(e["state"] == "RUNNING" for e in requeued), "the requeued job must run again"
        assert metrics["final_step"] == 40
    if "slurm_spares_released" in kinds:
        starts = [e for e in _events(run_dir, "rank-*") if e["kind"] == "rank_start"]
        assert {e["node"] for e in starts if e["incarnation"] == 0} == {0, 1}, "the spare waited"
        assert any(e["node"] == 2 and e["incarnation"] > 0 for e in starts), "the spare took the lost node's place"
    if "slurm_signal" in kinds:
        sent = [e for e in slurm_events if e["kind"] == "slurm_signal"]
        assert sent[0]["via"] == "srun" and sent[0]["signal"] == "SIGKILL" and sent[0]["pids"], sent
    if "slurm_step" in kinds:
        assert any(e["kind"] == "slurm_step" and e["state"] == "RUNNING" and e["step_id"].endswith(".0")
                   for e in slurm_events), "the agents' srun step in the timeline"
    if "slurm_node_update" in kinds:
        update = next(e for e in slurm_events if e["kind"] == "slurm_node_update")
        assert update["reason"].startswith(f"trainchaos:{journal['run_id']}:")
    resources = [json.loads(line) for line in (run_dir / "resources.jsonl").read_text().splitlines()]
    job = next(r for r in resources if r.get("kind") == "slurm_job")
    assert {"op": "destroyed", "id": job["id"]}.items() <= next(
        r for r in resources if r.get("op") == "destroyed" and r["id"] == job["id"]).items()
    _assert_clean(slurm_cluster, tmp_path, journal["run_id"])


@pytest.mark.machine_cleanup
@pytest.mark.timeout(200)
def test_sigkilled_controller_with_a_node_down_is_cleaned_up(slurm_cluster: SlurmTestbed, tmp_path: Path) -> None:
    """A node DOWN and a job running when the controller is SIGKILLed: ``trainchaos cleanup``
    resumes the node and cancels the job from the journals alone."""
    scenario = tmp_path / "down-then-killed.yaml"
    scenario.write_text((SCENARIOS / "node-down-no-kill.yaml").read_text()
                        .replace("name: slurm-node-down-no-kill", "name: down-then-killed")
                        .replace("steps: 40,", "steps: 400, step_delay_s: 0.05,"))
    log = open(tmp_path / "run.out", "wb")  # noqa: SIM115
    proc = subprocess.Popen([*TRAINCHAOS, "run", str(scenario), "--out", str(tmp_path / "out")],
                            env=_env(slurm_cluster, tmp_path), cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    run_dir = tmp_path / "out" / "down-then-killed" / "0"
    cleaned = False
    journal_path = run_dir / "fault_journal.jsonl"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and '"applied"' not in (journal_path.read_text() if journal_path.exists() else ""):
            assert proc.poll() is None, (tmp_path / "run.out").read_text()
            time.sleep(0.2)
        assert '"applied"' in journal_path.read_text(), (tmp_path / "run.out").read_text()
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        # The Slurm node the fault took down, as the fault journal names it: the job's node 1
        # is whichever host Slurm gave it, not always n2 (a fresh clone's run got n[1,3]).
        applied = next(r for r in FaultJournal(str(journal_path)).records() if r.get("op") == "applied")
        (downed,) = {s["slurm_node"] for s in applied["details"]["node_states"]}
        # Out of service: DOWN as the fault set it, shown as "drained" when Slurm added its
        # own DRAIN flag (a step it failed to end on a loaded host), which RESUME clears too
        states = slurm_node_states(slurm_cluster)
        assert any(word in states[downed] for word in ("down", "drain")), (downed, states)
        assert _trainchaos_jobs(slurm_cluster), "the job outlives its controller until cleanup"
        check = _cli(slurm_cluster, tmp_path, "cleanup", "--check", timeout=60)
        assert check.returncode == 1, check.stdout

        cleanup = _cli(slurm_cluster, tmp_path, "cleanup", timeout=120)
        assert cleanup.returncode == 0, cleanup.stdout + cleanup.stderr
        assert "reverted f0-node_down" in cleanup.stdout, cleanup.stdout
        _assert_clean(slurm_cluster, tmp_path)
        cleaned = True
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        if not cleaned:  # a failure here must not leave the node down for the module's next tests
            _cli(slurm_cluster, tmp_path, "cleanup", timeout=120)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("backend", "nodes", "fault", "needle"), [
    ("{slurm: {partition: nosuch}}", 2, "kill_rank", "backend: slurm.partition: unknown partition 'nosuch'; "
     "known: trainchaos"),
    ("slurm", 8, "kill_rank", "the job needs 8 nodes (topology.nodes) but partition 'trainchaos' has 4"),
    ("slurm", 2, "node_down", "faults[0].target.node: node 5 does not exist: the job has 2 nodes (0-1)"),
    ("local", 2, "node_down", "faults[0].type: node_down acts through the slurm backend; this scenario "
     "runs on local"),
])
def test_bad_slurm_input_exits_2_and_submits_nothing(slurm_cluster: SlurmTestbed, tmp_path: Path, backend: str,
                                                     nodes: int, fault: str, needle: str) -> None:
    target = "{node: 5}" if "node 5" in needle else "{node: 1}" if fault == "node_down" else "{rank: 1}"
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(f"""\
name: bad
backend: {backend}
workload:
  harness: {{steps: 20, model: {{name: mlp}}}}
topology: {{nodes: {nodes}, ranks_per_node: 1}}
faults:
  - type: {fault}
    target: {target}
    trigger: {{at_step: 5}}
timeout_s: 60
""")
    result = _cli(slurm_cluster, tmp_path, "run", str(scenario), "--out", str(tmp_path / "out"), timeout=50)
    assert result.returncode == 2, result.stdout + result.stderr
    assert needle in result.stdout + result.stderr
    assert "bad.yaml" in result.stdout + result.stderr
    assert not _trainchaos_jobs(slurm_cluster)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("resources.jsonl"))


@pytest.mark.timeout(200)
def test_a_run_inside_an_existing_allocation_leaves_the_allocation_alone(slurm_cluster: SlurmTestbed,
                                                                         tmp_path: Path) -> None:
    """``jobid``: the run is one job step of someone's allocation; it ends, the allocation
    does not."""
    job = slurm_cmd(slurm_cluster, "sbatch", "--parsable", "-N2", "--job-name=user-alloc", "--output=/dev/null",
                 "--wrap", "sleep 300").strip()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "RUNNING" not in slurm_cmd(slurm_cluster, "squeue", "-h", "-j", job, "-o", "%T"):
            time.sleep(0.2)
        scenario = tmp_path / "in-alloc.yaml"
        scenario.write_text((SCENARIOS / "rank-kill.yaml").read_text()
                            .replace("backend: slurm", f"backend: {{slurm: {{jobid: {job}}}}}")
                            .replace("name: slurm-rank-kill", "name: in-alloc"))
        scenario = warm_copy(scenario, tmp_path / "warm")
        result = _cli(slurm_cluster, tmp_path, "run", str(scenario), "--out", str(tmp_path / "out"))
        journal = json.loads((tmp_path / "out" / "in-alloc" / "0" / "journal.json").read_text())
        assert result.returncode == 0, result.stdout + result.stderr
        assert journal["status"] == "completed" and journal["metrics"]["lost_steps"] <= 10
        resources = (tmp_path / "out" / "in-alloc" / "0" / "resources.jsonl").read_text()
        assert '"kind": "slurm_step"' in resources and '"kind": "slurm_job"' not in resources
        assert "RUNNING" in slurm_cmd(slurm_cluster, "squeue", "-h", "-j", job, "-o", "%T"), "the allocation must live on"
        steps = slurm_cmd(slurm_cluster, "squeue", "-h", "-s", "-j", job, "-o", "%i %j")
        assert "trainchaos-" not in steps, steps
        assert not find_run_processes(journal["run_id"])
        with machine_cleanup_lock():
            check = _cli(slurm_cluster, tmp_path, "cleanup", "--check", timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        slurm_cmd(slurm_cluster, "scancel", job)
