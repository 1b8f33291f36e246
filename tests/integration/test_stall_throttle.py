"""A throttled rank named slow while training goes on, then a stalled one named stalled and
restarted, in one real 2 x 2 run: the slow-rank detector and the step-progress watchdog.

The heartbeat watchdog is on (3 s) through both: the stalled rank's heartbeat answers, so only
the progress watchdog can see it. The stall comes long after the throttle has ended, and
the job is paced (step_delay_s) so that the ramp spans tens of steps."""

from __future__ import annotations

import os

import pytest

from chaos.runfiles.events import read_events
from chaos.runner.run import run_scenario_once
from chaos.scenario.load import parse_scenario


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_throttled_rank_is_named_slow_and_a_stalled_one_stalled(tmp_path, state_dir):
    scenario = parse_scenario(
        {
            "name": "throttle-then-stall",
            "seed": 6,
            "workload": {"harness": {
                "steps": 90, "step_delay_s": 0.03, "model": {"name": "mlp"}, "checkpoint": {"every_steps": 20},
                "failure": {"watchdog_s": 3}, "progress": {"timeout_s": 5}, "slow_rank": {"enabled": True}}},
            "topology": {"nodes": 2, "ranks_per_node": 2},
            "faults": [
                {"name": "hot", "type": "thermal_throttle", "target": {"rank": 3}, "trigger": {"at_step": 10},
                 "params": {"factor": 3, "ramp_s": 2, "hold_s": 2, "recover_s": 0}},
                {"name": "stuck", "type": "stall_loop", "target": {"rank": 1}, "trigger": {"at_step": 65},
                 "params": {"mode": "queue"}},
            ],
            "targets": {"attribution": "correct", "false_detections": {"max": 0}},
            "timeout_s": 200,
        },
        str(tmp_path / "throttle-then-stall.yaml"),
    )
    journal = run_scenario_once(scenario, str(tmp_path / "run"), seed=6).to_dict()
    assert journal["status"] == "completed", journal["error"]
    metrics = {m["fault_id"]: m for m in journal["metrics"]["faults"]}
    events = read_events(os.path.join(journal["run_dir"], "events"))
    detected = [e for e in events if e["kind"] == "detected"]

    # The throttle: named by the slow-rank detector, on the right rank, without a restart.
    hot = metrics["hot"]
    assert (hot["detected_suspect"], hot["detected_class"], hot["detector"]) == ("rank-3", "slow", "slow_rank")
    assert hot["attribution"] == "correct" and not hot["restarted"]
    # Counted in the throttled rank's steps from its factor passing 1.5 (how many is the
    # host's pace: benchmarks/slow_rank_study.py), from the ramp the run planned.
    assert isinstance(hot["throttle_detection_steps"], int)
    slow = [e for e in detected if e.get("detector") == "slow_rank"]
    reverted = next(e for e in events if e["kind"] == "fault_reverted" and e.get("fault") == "hot")
    assert slow[0]["t"] < reverted["t"], "named while it was still slow"
    assert all(e["suspect"] == "rank-3" and e["src"] == "rank-0" for e in slow), slow  # nobody else, ever

    # The stall: its heartbeat answered, the progress watchdog named it stalled, host-side,
    # with where its training thread waits, and the job restarted and completed.
    stuck = metrics["stuck"]
    assert (stuck["detected_suspect"], stuck["detected_class"], stuck["detector"]) == ("rank-1", "stalled", "progress")
    assert stuck["attribution"] == "correct" and stuck["restarted"] and stuck["recovery_s"] is not None
    first = next(e for e in detected if e["t"] >= stuck["t_inject"])
    assert first.get("cause") == "host" and "queue.py" in first["reason"], first
    assert 4.5 <= stuck["detection_s"], "not before the progress timeout (5 s)"
    assert not any(e.get("failure_class") == "hang" for e in detected), "a live rank is not hung"
    assert journal["metrics"]["false_detections"] == 0
    assert journal["verdict"]["passed"], journal["verdict"]
