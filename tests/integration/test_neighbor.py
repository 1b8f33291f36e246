"""A noisy neighbour and a memory leak in one real run (2 nodes x 1 rank, each node held to a
memory cgroup of its own): the neighbour's slowdown is measured against the victim's own
steps and it is stopped on time, the OOM kill is reported by the kernel's record as `oom`
of the leaking rank, the job recovers, and nothing of either is left on the machine."""

from __future__ import annotations

import os

import pytest

from chaos.cluster.cgroups import own_cgroup
from chaos.runfiles.events import read_events
from chaos.runner.run import run_scenario_once
from chaos.scenario.load import parse_scenario
from chaos.util.procs import find_run_processes


@pytest.mark.integration
@pytest.mark.cgroup
@pytest.mark.timeout(240)
def test_neighbour_slows_and_leak_is_an_oom_of_the_right_rank(tmp_path, state_dir):
    scenario = parse_scenario({
        "name": "neighbor-and-leak",
        "seed": 5,
        # Paced: the leak (from step 120, 500 MB/s) must fill node 1's 1536 MB before the job
        # ends. Unpaced, a quiet host ran the 140 steps after it in 2.5 s, and the job finished
        # unkilled; paced, they last 5.6 s or more.
        "workload": {"harness": {"model": {"name": "mlp"}, "steps": 260, "step_delay_s": 0.04,
                                 "checkpoint": {"every_steps": 20}}},
        "topology": {"nodes": 2, "ranks_per_node": 1},
        "backend": {"local": {"memory_mb": 1536}},
        "faults": [
            {"name": "hog", "type": "noisy_neighbor", "target": {"node": 0}, "trigger": {"at_step": 20},
             "params": {"kind": "cpu", "workers": 4, "cpus": 1.5, "duration_s": 3}},
            {"name": "leak", "type": "memory_leak", "target": {"rank": 1}, "trigger": {"at_step": 120},
             "params": {"rate_mb_s": 500, "max_mb": 4096}},
        ],
        "timeout_s": 200,
    }, str(tmp_path / "s.yaml"))
    journal = run_scenario_once(scenario, str(tmp_path / "run"), seed=5).to_dict()
    assert journal["status"] == "completed", journal["error"]
    metrics = {f["fault_id"]: f for f in journal["metrics"]["faults"]}

    # The neighbour: measured against the victim's own steps (no timing claim here: that is
    # the scenario's target), stopped after its 3 s, in a CPU cgroup of its own.
    hog = metrics["hog"]
    assert hog["victim_step_s_before"] and hog["victim_step_s_during"] and hog["victim_slowdown"]
    assert 2.9 <= hog["t_revert"] - hog["t_inject"] <= 10
    record = next(f for f in journal["faults"] if f["fault_id"] == "hog")
    assert record["details"]["processes"][0]["spec"]["argv"][-2] == "--join-cgroup"

    # The leak: killed by the kernel in node 1's cgroup, named an OOM of rank 1 by the
    # kernel's record before anyone called it a crash; the group restarts and finishes.
    leak = metrics["leak"]
    assert (leak["detected_by"], leak["detected_suspect"], leak["detected_class"]) == ("kernel-node-1", "rank-1", "oom")
    assert leak["attribution"] == "correct" and leak["restarted"] and leak["recovery_s"] is not None
    events = read_events(os.path.join(journal["run_dir"], "events"))
    ooms = [e for e in events if e["kind"] == "detected" and e.get("failure_class") == "oom"]
    assert len(ooms) == 1 and ooms[0]["oom_kills"] == 1
    assert journal["metrics"]["false_detections"] == 0 and journal["metrics"]["final_step"] == 260

    # Nothing left: no neighbour, no watcher, no cgroup of the run.
    assert find_run_processes(journal["run_id"]) == []
    for controller in ("memory", "cpu"):
        parent = own_cgroup(controller)
        assert not [n for n in os.listdir(parent) if n.startswith(journal["run_id"])]
