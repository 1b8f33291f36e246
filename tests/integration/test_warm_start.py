"""Warm start (harness.warm_start): a rank killed under it is the training process, torchrun
sees it fail, the group recovers, and the model ends bitwise where a cold run's does."""

from __future__ import annotations

import json
import os

import pytest

from chaos.events import read_events
from chaos.procs import find_run_processes
from chaos.run import run_scenario_once
from chaos.scenario import parse_scenario


def _scenario(warm: bool, faults: list[dict]) -> object:
    return parse_scenario({
        "name": f"warm-start-{'warm' if warm else 'cold'}",
        "seed": 11,
        "workload": {"harness": {"steps": 40, "warm_start": warm, "checkpoint": {"every_steps": 10}}},
        "topology": {"nodes": 2, "ranks_per_node": 2},
        "faults": faults,
        "timeout_s": 240,
    }, "<test_warm_start>")


def _digest(run_dir: str) -> str:
    with open(os.path.join(run_dir, "final.json"), encoding="utf-8") as fh:
        return json.load(fh)["digest"]


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_a_rank_killed_under_warm_start_is_the_trainer_and_the_model_ends_as_cold(tmp_path, state_dir):
    cold = run_scenario_once(_scenario(False, []), str(tmp_path / "cold"), 11, with_faults=False)
    assert cold["status"] == "completed", cold["error"]
    assert cold["rank_launch"] == "cold"

    kill = {"type": "kill_rank", "target": {"rank": 3}, "trigger": {"at_step": 25}}
    warm = run_scenario_once(_scenario(True, [kill]), str(tmp_path / "warm"), 11)
    run_dir = warm["run_dir"]
    assert warm["status"] == "completed", warm["error"]
    assert warm["rank_launch"] == "warm"
    assert not find_run_processes(warm["run_id"]), "processes of the run left behind (a zygote?)"

    events = read_events(os.path.join(run_dir, "events"))
    (fault,) = warm["faults"]
    starts = [e for e in events if e["kind"] == "rank_start" and e["rank"] == 3]
    before = [e for e in starts if e["t"] < fault["t_inject"]]
    # The pid the fault killed is the one rank 3 announced: the forked training process.
    assert fault["details"]["pids"] == [before[-1]["pid"]]
    detected = [e for e in events if e["kind"] == "detected" and e["t"] >= fault["t_inject"]]
    assert detected and detected[0]["suspect"] == "rank-3"
    # torchrun saw a worker of that node fail and restarted the group (which failure it
    # reports first, the killed rank's -9 or a peer's exit on detecting it, is a race of its
    # monitor; that the proxy dies of the rank's SIGKILL is tests/unit/test_zygote.py's).
    logs = {name: open(os.path.join(run_dir, "logs", name), encoding="utf-8", errors="replace").read()
            for name in sorted(os.listdir(os.path.join(run_dir, "logs")))}
    node = before[-1]["node"]
    assert "failed (exitcode: " in logs[f"node-{node}.log"]
    after = [e for e in events if e["kind"] == "rank_start" and e["t"] > fault["t_inject"]]
    assert sorted(e["rank"] for e in after) == [0, 1, 2, 3] and {e["restart_count"] for e in after} == {1}
    assert next(e for e in after if e["rank"] == 3)["pid"] != before[-1]["pid"]
    # Each node's zygote was up, single-threaded, before forking (harness.zygote.serve).
    assert all(text.count("forking ranks") == 1 for text in logs.values())
    (metrics,) = warm["metrics"]["faults"]
    assert metrics["resumed_from"] == 20 and metrics["lost_steps"] == fault["step_at_inject"] - 20
    # Seeded, same world size: warm and cold training end bitwise equal.
    assert _digest(run_dir) == _digest(cold["run_dir"])
