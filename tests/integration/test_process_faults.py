"""The smoke suite's other process/GPU faults, run for real: what each must show besides
timing (timing targets belong to the verdict of `make demo`, not to a pass/fail test).

The crash mid-checkpoint and the node kill run with warm ranks (``harness.warm_start``: a
restart then pays no imports; the node kill asserts a warm node's process set, its zygote and
the ranks' clients included: test_power's outage asserts a cold node's), and the device
error is the run ``make demo`` makes."""

from __future__ import annotations

import os

import pytest

from chaos.runfiles.events import read_events
from chaos.runner.run import run_scenario_once
from chaos.util.procs import find_run_processes
from tests.integration._support import load_warm

SMOKE = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "scenarios", "smoke")


def _run(name: str, tmp_path) -> tuple[dict, list[dict]]:
    scenario = load_warm(os.path.join(SMOKE, f"{name}.yaml"))
    journal = run_scenario_once(scenario, str(tmp_path / name), scenario.seed).to_dict()
    assert not find_run_processes(journal["run_id"]), "processes of the run left behind"
    return journal, read_events(os.path.join(journal["run_dir"], "events"))


def _only_fault(journal: dict) -> tuple[dict, dict]:
    (fault,) = journal["faults"]
    (metrics,) = journal["metrics"]["faults"]
    return fault, metrics


@pytest.mark.integration
@pytest.mark.timeout(200)
def test_kill_node_shrinks_the_job_and_blames_the_dead_node(tmp_path, state_dir):
    journal, events = _run("kill-node", tmp_path)
    assert journal["status"] == "completed", journal["error"]
    fault, metrics = _only_fault(journal)
    # every process of the node at once: its agent, its zygote, both ranks and their clients
    ranks = {e["pid"] for e in events if e["kind"] == "rank_start" and e["node"] == 1 and e["t"] < fault["t_inject"]}
    assert len(ranks) == 2 and ranks <= set(fault["details"]["pids"])
    assert len(fault["details"]["pids"]) == 6, fault["details"]["pids"]
    # exactly at the planned step: both ranks of the node held after step 50 until the kill
    # was in effect (chaos.probe.hold), so neither began step 51
    killed = [e["step"] for e in events if e["kind"] == "step_end" and e["src"] in ("rank-2", "rank-3")
              and e["incarnation"] == 0]
    assert max(killed) == 50 and killed.count(50) == 2, sorted(killed)[-4:]
    assert (fault["precision"], fault["step_at_inject"], fault["hold"]) == ("exact", 50, "held")
    assert fault["lag_ms"] is not None and fault["lag_ms"] >= 0
    assert metrics["attribution"] == "correct", metrics["attribution_detail"]
    assert metrics["detected_suspect"] in ("rank-2", "rank-3", "node-1")
    # the survivors continue elastically with half the world, from a checkpoint
    after = [e for e in events if e["kind"] == "rank_start" and e["t"] > fault["t_inject"]]
    assert {e["world_size"] for e in after} == {2} and {e["rank"] for e in after} == {0, 1}
    assert journal["metrics"]["final_world_size"] == 2
    assert 0 <= metrics["lost_steps"] <= 20 and metrics["resumed_from"] % 20 == 0


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_device_error_is_reported_by_the_failing_rank_at_its_step(smoke_device_error):
    # The run test_scale_from_runs feeds to the scale model too (one run for both).
    journal, events = smoke_device_error.journal, smoke_device_error.events
    assert journal["status"] == "completed", journal["error"]
    fault, metrics = _only_fault(journal)
    assert fault["precision"] == "exact" and fault["step_at_inject"] == 45
    first = next(e for e in events if e["kind"] == "detected" and e["t"] >= fault["t_inject"])
    assert (first["by"], first["suspect"], first["failure_class"]) == ("rank-2", "rank-2", "device")
    assert "Xid 79" in first["reason"]
    assert metrics["resumed_from"] == 40 and metrics["lost_steps"] == 5


@pytest.mark.integration
@pytest.mark.timeout(200)
def test_crash_mid_checkpoint_never_loads_the_partial_file(tmp_path, state_dir):
    journal, events = _run("crash-during-checkpoint", tmp_path)
    assert journal["status"] == "completed", journal["error"]
    fault, metrics = _only_fault(journal)
    crash = next(e for e in events if e["kind"] == "fault_injected" and e["src"] == "rank-0")
    assert crash["point"] == "ckpt_write" and crash["step"] == 60
    # the step-60 save never completed; every rank resumed from the previous good one
    saves = [e["step"] for e in events if e["kind"] == "ckpt_save_end" and e["t"] < crash["t"]]
    assert 60 not in saves
    loads = [e for e in events if e["kind"] == "ckpt_load" and e["t"] > crash["t"]]
    assert loads and {e["step"] for e in loads} == {40} and all(e["verified"] for e in loads)
    assert metrics["resumed_from"] == 40 and metrics["lost_steps"] == 20
    assert metrics["attribution"] == "correct", metrics["attribution_detail"]
