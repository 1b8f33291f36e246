"""The hold that lands external faults at their step (chaos.probe.hold): the probe's side with a
thread standing in for the controller, the plan's hold instructions, where a fault landed
(chaos.runner.precision) and the controller's wait (chaos.runner.wakeup, run._wait_s)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from chaos import probe
from chaos.probe import hold
from chaos.runfiles.events import read_events
from chaos.runner import wakeup
from chaos.runner.plan import make_plan, probe_instructions
from chaos.runner.precision import landing, precision_of
from chaos.runner.run import _Runner
from chaos.scenario.load import parse_scenario

FAULT = "f0-kill_rank"


def _instructions(tmp_path: Path, ranks: list[int] | None = (1,), timeout_s: float = 5.0) -> str:
    path = tmp_path / "probe_faults.json"
    path.write_text(json.dumps([{"id": FAULT, "type": "kill_rank", "ranks": list(ranks) if ranks else None,
                                 "at_step": 3, "at_or_after": False, "action": "hold", "point": "step_end",
                                 "timeout_s": timeout_s}]))
    return str(path)


def _rank(tmp_path: Path, src: str = "rank-1", incarnation: int = 0, **kw) -> probe.Probe:
    return probe.Probe(str(tmp_path / "events"), src, incarnation, _instructions(tmp_path, **kw))


def _holds(tmp_path: Path) -> str:
    return str(tmp_path / "holds")


def _train(rank: probe.Probe, steps: int, done: list[int], with_step_begin: bool = True) -> None:
    for step in range(1, steps + 1):
        if with_step_begin:
            rank.fault_point("step_begin", step=step)
        done.append(step)
        rank.step_end(step, 1.0)


def _hold_events(tmp_path: Path) -> list[tuple[str, str, int]]:
    return [(e["src"], e["phase"], e["step"]) for e in read_events(str(tmp_path / "events"))
            if e["kind"] == "fault_hold"]


def _wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.mark.parametrize("with_step_begin", [True, False])
def test_the_targeted_rank_holds_after_its_step_until_the_fault_is_confirmed(tmp_path: Path, with_step_begin: bool) -> None:
    """Step 3's work is done (a script marking step beginnings holds at the next one, after
    the step's own save; one that only reports step_end holds there) and step 4 does not
    start before the controller's word."""
    rank = _rank(tmp_path)
    done: list[int] = []
    worker = threading.Thread(target=_train, args=(rank, 5, done, with_step_begin))
    worker.start()
    _wait_for(lambda: _hold_events(tmp_path))
    time.sleep(0.05)
    assert done == [1, 2, 3], "step 4 began while the rank should hold"
    assert _hold_events(tmp_path) == [("rank-1", "start", 3)]
    assert hold.confirm(_holds(tmp_path), FAULT)
    worker.join(10)
    assert done == [1, 2, 3, 4, 5]
    assert _hold_events(tmp_path) == [("rank-1", "start", 3), ("rank-1", "released", 3)]
    assert not hold.confirm(_holds(tmp_path), FAULT), "a second confirmation is a no-op"


def test_other_ranks_and_other_steps_never_hold(tmp_path: Path) -> None:
    rank0 = _rank(tmp_path, src="rank-0")
    done: list[int] = []
    _train(rank0, 5, done)  # no confirmation exists: a hold would block for 5 s
    assert done == [1, 2, 3, 4, 5] and _hold_events(tmp_path) == []


def test_a_job_wide_fault_holds_every_rank(tmp_path: Path) -> None:
    rank = _rank(tmp_path, src="rank-0", ranks=None, timeout_s=0.05)
    _train(rank, 4, [])
    assert [phase for _, phase, _ in _hold_events(tmp_path)] == ["start", "timeout"]


def test_a_controller_that_never_confirms_costs_the_timeout_and_is_recorded(tmp_path: Path) -> None:
    rank = _rank(tmp_path, timeout_s=0.1)
    started = time.monotonic()
    done: list[int] = []
    _train(rank, 5, done)
    assert done == [1, 2, 3, 4, 5] and 0.1 <= time.monotonic() - started < 3
    (start, end) = [e for e in read_events(str(tmp_path / "events")) if e["kind"] == "fault_hold"]
    assert (start["phase"], start["timeout_s"]) == ("start", 0.1)
    assert end["phase"] == "timeout" and end["waited_s"] >= 0.1


def test_a_restarted_rank_passes_the_step_again_without_holding(tmp_path: Path) -> None:
    first = _rank(tmp_path, timeout_s=0.05)
    _train(first, 3, [], with_step_begin=False)  # held at 3, then (here) timed out
    first.close()
    again = _rank(tmp_path, incarnation=1)
    done: list[int] = []
    _train(again, 5, done)  # the claim is taken: a hold would block for 5 s
    assert done == [1, 2, 3, 4, 5] and len(_hold_events(tmp_path)) == 2
    # A rank that had not held yet (killed with its node by a peer's fault) finds the
    # confirmation on its way through the step: no hold, no event.
    hold.confirm(_holds(tmp_path), FAULT)
    late = _rank(tmp_path, src="rank-2", ranks=[1, 2])
    _train(late, 5, [])
    assert len(_hold_events(tmp_path)) == 2


def test_a_detached_probe_never_holds(tmp_path: Path) -> None:
    rank = probe.Probe(None, "rank-1", 0, _instructions(tmp_path))
    done: list[int] = []
    _train(rank, 5, done)
    assert done == [1, 2, 3, 4, 5]


# -- the plan --------------------------------------------------------------------------------

def _scenario(faults: list[dict]):
    return parse_scenario({"name": "holds", "seed": 1, "topology": {"nodes": 2, "ranks_per_node": 2},
                           "faults": faults}, "holds.yaml")


def test_holds_are_planned_only_for_external_faults_at_a_step_that_fire() -> None:
    plan = make_plan(_scenario([
        {"type": "kill_rank", "target": {"rank": 3}, "trigger": {"at_step": 20}},
        {"type": "kill_node", "target": {"node": 0}, "trigger": {"at_step": 30}},
        {"type": "kill_rank", "target": {"rank": 1}, "trigger": {"at_time": 5}},
        {"type": "kill_rank", "target": {"rank": 2}, "trigger": {"at_step": 40}, "probability": 0.001},
        {"type": "device_error", "target": {"rank": 2}, "trigger": {"at_step": 50}},
    ]), 1)
    assert not plan[3].fires  # the seeded draw against its probability said no
    holds = [o for o in probe_instructions(plan) if o["action"] == hold.ACTION]
    assert [(o["id"], o["ranks"], o["at_step"], o["point"], o["at_or_after"]) for o in holds] == [
        ("f0-kill_rank", [3], 20, "step_end", False),
        ("f1-kill_node", [0, 1], 30, "step_end", False),
    ]
    assert all(o["timeout_s"] == hold.DEFAULT_TIMEOUT_S for o in holds)
    # the in-process fault keeps its own instruction, and no hold: it fires in the step
    assert [o["action"] for o in probe_instructions(plan) if o["id"] == "f4-device_error"] == ["device_error"]


# -- where a fault landed --------------------------------------------------------------------

def _planned(trigger: dict, target: dict | None = None, fault_type: str = "kill_rank"):
    (planned,) = make_plan(_scenario([{"type": fault_type, "target": target or {"rank": 1},
                                       "trigger": trigger}]), 1)
    return planned


def _step(src: str, step: int, t: float, incarnation: int = 0) -> dict:
    return {"t": t, "src": src, "kind": "step_end", "step": step, "incarnation": incarnation}


def _hold_ev(src: str, phase: str, t: float, fault: str = FAULT) -> dict:
    return {"t": t, "src": src, "kind": "fault_hold", "fault": fault, "phase": phase, "step": 3}


def test_a_held_kill_lands_exact_and_its_lag_is_the_hold() -> None:
    events = [_step("rank-0", 3, 9.9), _step("rank-1", 3, 10.0), _hold_ev("rank-1", "start", 10.001),
              _step("rank-0", 4, 10.5)]
    got = landing(_planned({"at_step": 3}), events, t_inject=10.004)
    assert (got.step, got.precision, got.hold) == (3, "exact", "held")
    assert got.lag_ms == pytest.approx(4.0)


def test_a_fault_without_a_hold_is_measured_where_it_landed() -> None:
    events = [_step("rank-1", 3, 10.0), _step("rank-1", 4, 10.03)]
    got = landing(_planned({"at_step": 3}), events, t_inject=10.045)
    assert (got.step, got.precision, got.hold) == (4, "next_step", None)
    assert got.lag_ms == pytest.approx(45.0)
    assert [precision_of(3, s) for s in (2, 3, 4, 6)] == ["early", "exact", "next_step", "late"]


def test_a_hold_that_timed_out_on_any_rank_is_reported_as_timed_out() -> None:
    planned = _planned({"at_step": 3}, {"node": 0}, "kill_node")
    events = [_step("rank-0", 3, 10.0), _step("rank-1", 3, 10.0)] + [
        _hold_ev(src, phase, t, "f0-kill_node") for src, phase, t in
        [("rank-0", "start", 10.0), ("rank-1", "start", 10.0), ("rank-0", "released", 10.2), ("rank-1", "timeout", 15.0)]]
    assert landing(planned, events, t_inject=16.0).hold == "timeout"


def test_a_time_trigger_lag_is_from_its_planned_time_and_a_job_wide_target_counts_every_rank() -> None:
    planned = _planned({"at_time": 5})
    got = landing(planned, [_step("rank-1", 7, 104.0)], t_inject=105.0031, t_planned=105.0)
    assert (got.step, got.precision, got.lag_ms, got.hold) == (7, None, pytest.approx(3.1), None)
    assert landing(planned, [], t_inject=None) == type(got)()


# -- the controller's wait -------------------------------------------------------------------

def test_a_write_wakes_the_wait_at_once_when_its_group_is_asked_for(tmp_path: Path) -> None:
    events, holds = tmp_path / "events", tmp_path / "holds"
    events.mkdir(), holds.mkdir()
    with wakeup.Wakeup() as wait:
        if wait.mode != "inotify":
            pytest.skip("no inotify here: the fallback is tested below")
        wait.watch(str(events), "events")
        wait.watch(str(holds), "holds")
        threading.Timer(0.05, (events / "rank-0.jsonl").write_text, args=("{}\n",)).start()
        started = time.monotonic()
        assert wait.wait(5.0, {"events", "holds"}) is True
        assert time.monotonic() - started < 2.0
        # a write of a group not asked for is read and ignored: the timeout ends the wait
        (events / "rank-0.jsonl").write_text("{}\n{}\n")
        assert wait.wait(0.05, {"holds"}) is False
        assert wait.wait(0.01, {"events"}) is False, "the writes before were drained"
        # ...while one asked for ends it before the timeout
        threading.Timer(0.05, hold.request, args=(str(holds), FAULT, "rank-1")).start()
        started = time.monotonic()
        assert wait.wait(5.0, {"holds"}) is True and time.monotonic() - started < 2.0


def test_without_inotify_the_wait_is_a_bounded_sleep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wakeup, "_libc", lambda: None)
    with wakeup.Wakeup(fallback_s=0.02) as wait:
        wait.watch(str(tmp_path))
        assert wait.mode == "poll"
        started = time.monotonic()
        assert wait.wait(10.0, {"files"}) is False
        assert time.monotonic() - started < 1.0


def _runner(tmp_path: Path, faults: list[dict], ranks_per_node: int = 1) -> _Runner:
    scenario = parse_scenario({"name": "wait", "seed": 1, "topology": {"nodes": 2, "ranks_per_node": ranks_per_node},
                               "faults": faults}, str(tmp_path / "wait.yaml"))
    runner = _Runner(scenario, str(tmp_path / "run"), 1, True, None)
    runner.ctx = SimpleNamespace(scheduled_reverts=[])
    return runner


def test_the_loop_waits_until_the_next_timed_trigger_and_on_writes_for_step_triggers(tmp_path: Path) -> None:
    deadline = time.monotonic() + 100
    runner = _runner(tmp_path, [{"type": "kill_rank", "target": {"rank": 1}, "trigger": {"at_time": 1}}])
    # no first step yet: nothing timed, and the first step comes as an event
    assert runner._wait_s(deadline) == (0.05, {"holds", "events"})
    runner.intake.t_first_step, runner.intake.t_first_step_wall = time.monotonic(), time.time() - 0.99
    wait, groups = runner._wait_s(deadline)
    assert 0 < wait <= 0.011 and groups == {"holds"}
    runner.states[0].fired = True
    runner.ctx.scheduled_reverts.append((time.monotonic() + 0.02, object()))
    assert 0.01 < runner._wait_s(deadline)[0] <= 0.02
    stepped = _runner(tmp_path, [{"type": "kill_rank", "target": {"rank": 1}, "trigger": {"at_step": 5}}])
    assert stepped._wait_s(deadline) == (0.05, {"holds", "logs"})


def test_a_deferred_repeat_waits_for_an_event_not_in_a_spin(tmp_path: Path) -> None:
    runner = _runner(tmp_path, [{"type": "kill_rank", "target": {"rank": 1},
                                 "trigger": {"poisson": {"mtbf_s": 1, "max_faults": 2}}}])
    runner.intake.t_first_step, runner.intake.t_first_step_wall = time.monotonic() - 1000, time.time() - 1000
    first, second = runner.states
    first.deferred_since = time.time()  # due long ago, its target restarting
    assert runner._wait_s(time.monotonic() + 100) == (0.05, {"holds", "events"})
    assert not second.fired  # its turn comes after the first: no wait is computed for it


def test_confirming_writes_a_whole_file_once(tmp_path: Path) -> None:
    directory = str(tmp_path / "holds")
    assert hold.confirm(directory, "f0-x#2", "failed")
    assert not hold.confirm(directory, "f0-x#2")
    assert open(hold.confirmation(directory, "f0-x#2")).read() == "failed\n"
    hold.request(directory, "f0-x#2", "rank-3")
    assert sorted(os.listdir(directory)) == ["f0-x#2", "f0-x#2@rank-3"]
    assert hold.wait(directory, "f0-x#2", 5.0)[0] == "released"


def test_a_step_trigger_waits_for_every_targeted_rank_to_end_the_step_but_not_forever(tmp_path: Path) -> None:
    runner = _runner(tmp_path, [{"type": "kill_node", "target": {"node": 1}, "trigger": {"at_step": 5}}],
                     ranks_per_node=2)
    (st,) = runner.states
    assert st.planned.fault.target.ranks == (2, 3)
    runner.intake.step_by_rank = {2: 5, 3: 4}
    assert not runner._due(st), "rank 3 has not ended step 5 yet"
    runner.intake.step_by_rank[3] = 5
    assert runner._due(st)
    runner.intake.step_by_rank[3] = 4
    st.step_reached -= 1.0  # rank 3 never came (gone, stalled): the fault lands anyway
    assert runner._due(st)
    # the loop looks again when the wait for the others ends
    st.step_reached = time.monotonic() - 0.995
    assert runner._wait_s(time.monotonic() + 100)[0] <= 0.006
