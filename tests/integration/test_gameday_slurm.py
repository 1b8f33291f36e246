"""``trainchaos gameday`` against a live Slurm job of the local testbed (munge, slurmctld and
two emulated slurmd, ``chaos.cluster.slurm_testbed``), driven through a pseudo-terminal
(pexpect) as an operator would: the staging job (``scenarios/gameday/slurm-staging-job.yaml``)
runs under its own controller; a dry run names node 1's Slurm task and changes nothing; the
shipped plan ``gamedays/slurm-node-down.yaml`` is confirmed at its prompt, takes node 1 DOWN
through Slurm, sees the job's detection since, waits for the job to train again on the node
it has left and RESUMEs the node. Then the power faults: a power_outage whose power would
return is refused by the dry run (exit 2: Slurm has no PowerReturn, nothing touched), and one
without cuts the domain of the node the job has left: every process of its Slurm task
killed. After the job's controller is stopped nothing is left on
the testbed: no trainchaos job queued, every node idle, no process of the run, and
``cleanup --check`` exits 0.

One test (one job start, the slow part): the game day on Slurm is the same session as on
docker (tests/integration/test_gameday.py holds the refusals, Ctrl-C, stop conditions and
SIGKILL cleanup, which nothing here does differently).
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

pexpect = pytest.importorskip("pexpect")

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

PLAN = REPO / "gamedays" / "slurm-node-down.yaml"


slurm_cluster = slurm_cluster_fixture(nodes=2)


def _stepping(run_dir: Path, ranks: int) -> bool:
    files = list((run_dir / "events").glob("rank-*.jsonl")) if (run_dir / "events").exists() else []
    return len({p.name.split(".")[0] for p in files}) >= ranks and all('"step_end"' in p.read_text() for p in files)


@pytest.mark.timeout(300)
def test_node_down_game_day_against_a_live_slurm_job(slurm_cluster: SlurmTestbed, tmp_path: Path) -> None:
    env = {**cli_env(tmp_path / "state", **slurm_cluster.env()), "COLUMNS": "200"}
    scenario = warm_copy(REPO / "scenarios" / "gameday" / "slurm-staging-job.yaml", tmp_path / "warm")
    controller = subprocess.Popen([*TRAINCHAOS, "run", str(scenario), "--out", "reports"], env=env, cwd=tmp_path,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
    run_dir = tmp_path / "reports" / "gameday-slurm-staging-job" / "0"
    run_id = None
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not _stepping(run_dir, 2):
            assert controller.poll() is None, "the staging job's controller died"
            time.sleep(0.5)
        assert _stepping(run_dir, 2), "the staging job never stepped on both nodes"
        run_id = json.loads((run_dir / "run.json").read_text())["run_id"]
        nodes_before = slurm_node_states(slurm_cluster)

        dry = run_trainchaos(["gameday", str(PLAN), "--dry-run"], env=env, cwd=tmp_path, timeout=60)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert "node_down -> node 1 = Slurm task of job " in dry.stdout and "(running)" in dry.stdout, dry.stdout
        assert "precondition: Slurm task running and ranks live (met)" in dry.stdout, dry.stdout
        assert slurm_node_states(slurm_cluster) == nodes_before, "a dry run changed a node"
        assert not (tmp_path / "reports" / "gameday").exists(), "a dry run wrote a report"

        gd = pexpect.spawn(TRAINCHAOS[0], [*TRAINCHAOS[1:], "gameday", str(PLAN), "--out", "gd-down"], env=env,
                           cwd=str(tmp_path), encoding="utf-8", timeout=60, dimensions=(50, 200))
        gd.expect("Slurm tasks")  # the live panel (a terminal): the job's nodes as Slurm's tasks
        gd.expect(r"proceed\? \[y\]es", timeout=60)
        assert "down" not in " ".join(slurm_node_states(slurm_cluster).values()), "injected before the operator said yes"
        gd.sendline("y")
        gd.expect("injected node_down")
        gd.expect(r"check detections >= 1: (passed|FAILED)", timeout=60)
        assert gd.match.group(1) == "passed", gd.before
        gd.expect("reverted down", timeout=150)
        gd.expect("report: ")
        gd.expect(pexpect.EOF)
        gd.close()
        report = json.loads((tmp_path / "gd-down" / "report.json").read_text())
        assert gd.exitstatus == 0, (report["status"], report["reason"])
        assert report["run_id"] == run_id and [d["decision"] for d in report["decisions"]] == ["yes"]
        [fault] = report["faults"]
        assert fault["type"] == "node_down" and fault["target"]["nodes"] == [1]
        assert fault["detections"] >= 1 and fault["t_revert"] is not None and fault["revert_error"] is None
        wait = next(e for e in report["timeline"] if e["action"] == "wait")
        assert wait["outcome"] == "held" and wait["metrics"]["steps_per_s"] > 0, wait
        # The game day's journal: the node Slurm took out, and its RESUME.
        records = list(FaultJournal(str(tmp_path / "gd-down" / "fault_journal.jsonl")).records())
        assert records[-1]["op"] == "reverted"
        (downed,) = {s["slurm_node"] for r in records if r.get("op") == "applied" for s in r["details"]["node_states"]}
        state = slurm_node_states(slurm_cluster)[downed]
        assert "down" not in state and "drain" not in state, (downed, state)
        assert controller.poll() is None, "the job must outlive the loss of a node (no_kill)"

        # Power on Slurm: the cut works (the tasks of the domain's nodes killed), a return does not.
        returns = tmp_path / "power-returns.yaml"
        returns.write_text("name: power-returns\nrun: latest\nsteps:\n"
                           "  - inject: {type: power_outage, target: {power_domain: pd-a}, params: {duration_s: 30}}\n")
        refused = run_trainchaos(["gameday", str(returns), "--dry-run"], env=env, cwd=tmp_path, timeout=60)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert (f"{returns}: steps[0].inject.params.duration_s: power_outage with duration_s needs PowerReturn"
                in refused.stderr), refused.stderr
        assert [p for p in find_run_processes(run_id) if p.node == 0], "a refused dry run touched node 0"
        cut = tmp_path / "power-cut.yaml"
        cut.write_text("name: power-cut\nrun: latest\nsteps:\n"
                       "  - inject: {type: power_outage, target: {power_domain: pd-a}}\n")
        power = run_trainchaos(["gameday", str(cut), "--yes", "--out", "gd-power"], env=env, cwd=tmp_path, timeout=60)
        assert power.returncode == 0, power.stdout + power.stderr
        [outage] = json.loads((tmp_path / "gd-power" / "report.json").read_text())["faults"]
        assert outage["type"] == "power_outage" and outage["target"]["nodes"] == [0], outage
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and [p for p in find_run_processes(run_id) if p.node == 0]:
            time.sleep(0.2)
        assert not [p for p in find_run_processes(run_id) if p.node == 0], "node 0 still runs after its power cut"
    finally:
        if controller.poll() is None:
            controller.send_signal(signal.SIGTERM)
            try:
                controller.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(controller.pid, signal.SIGKILL)
                controller.wait(timeout=10)
        if run_id:
            run_trainchaos(["cleanup", "--run-dir", str(run_dir)], env=env, cwd=tmp_path, timeout=120)
    # Nothing of the run or of the game day is left on the testbed.
    assert not [line for line in slurm_cmd(slurm_cluster, "squeue", "-h", "-o", "%j").split() if "trainchaos-" in line]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and set(slurm_node_states(slurm_cluster).values()) != {"idle"}:
        time.sleep(0.2)
    assert set(slurm_node_states(slurm_cluster).values()) == {"idle"}, slurm_node_states(slurm_cluster)
    assert not find_run_processes(run_id)
    with machine_cleanup_lock():
        check = run_trainchaos(["cleanup", "--check"], env=env, cwd=tmp_path, timeout=60)
    # This run's and this game day's only: the scan also sees what other runs on this
    # machine left (another test's crashed controller's scratch dir).
    ours = [line for line in check.stdout.splitlines() if run_id in line or "trainchaos-gd-" in line or "slurm" in line]
    assert ours == [], check.stdout
