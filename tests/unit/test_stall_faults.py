"""stall_loop and thermal_throttle: what the probe does in the rank, and how the types are
declared and validated. Clocks are faked where time is the subject; the stall modes block
for real (0.3 s each) because what is tested is which threads still run."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from chaos import probe
from chaos.faults.base import lookup
from chaos.probe import core as probe_core
from chaos.scenario.load import ScenarioError, parse_scenario
from tests.unit.test_probe import FakeClock


def _beats_while(block: callable, seconds: float) -> tuple[float, int]:
    """(seconds the calling thread was blocked, beats another thread made meanwhile)."""
    beats, stop = [], threading.Event()

    def beat() -> None:
        while not stop.is_set():
            beats.append(1)
            time.sleep(0.01)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    time.sleep(0.05)
    before = len(beats)
    t0 = time.monotonic()
    block(seconds)
    blocked = time.monotonic() - t0
    during = len(beats) - before
    stop.set()
    thread.join()
    return blocked, during


@pytest.mark.parametrize("mode", ["sleep", "lock", "queue"])
def test_a_stalled_training_thread_leaves_the_other_threads_running(mode: str) -> None:
    blocked, beats = _beats_while(probe.STALL_MODES[mode], 0.3)
    assert 0.29 <= blocked < 1.0
    assert beats >= 10, f"{mode}: the heartbeat thread must run on ({beats} beats in 0.3 s)"


def test_the_gil_mode_holds_every_python_thread() -> None:
    """A real GIL-holding C call (libc nanosleep through ctypes.PyDLL): the heartbeat stops too."""
    blocked, beats = _beats_while(probe.STALL_MODES["gil"], 0.3)
    assert 0.29 <= blocked < 1.0
    assert beats <= 2, f"no Python thread may run while the GIL is held ({beats} beats)"


def test_the_probe_stalls_at_the_exact_step_and_reports_the_end(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps([{"id": "f0-stall_loop", "type": "stall_loop", "ranks": [1], "at_step": 3,
                                   "action": "stall", "point": "step_end",
                                   "params": {"mode": "queue", "duration_s": 0.2}}]))
    rank = probe.Probe(str(tmp_path / "events"), "rank-1", 0, str(faults))
    took = {}
    for step in range(1, 5):
        t0 = time.monotonic()
        rank.step_end(step, 1.0)
        took[step] = time.monotonic() - t0
    rank.close()
    assert took[3] >= 0.19 and max(took[s] for s in (1, 2, 4)) < 0.1
    events = [json.loads(line) for f in (tmp_path / "events").iterdir() for line in f.read_text().splitlines()]
    kinds = [(e["kind"], e.get("step")) for e in events if e["kind"].startswith("fault_")]
    assert kinds == [("fault_injected", 3), ("fault_reverted", 3)]


def test_a_thermal_ramp_stretches_steps_as_the_factor_climbs_holds_and_recovers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(probe_core.time, "perf_counter", clock.perf_counter)
    monkeypatch.setattr(probe_core.time, "monotonic", clock.perf_counter)
    monkeypatch.setattr(probe_core.time, "sleep", clock.sleep)
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps([{"id": "f0-thermal", "type": "thermal_throttle", "ranks": [0], "at_step": 5,
                                   "action": "slowdown", "point": "step_end",
                                   "params": {"factor": 3.0, "ramp_s": 1.0, "hold_s": 1.0, "recover_s": 1.0}}]))
    rank = probe.Probe(str(tmp_path / "events"), "rank-0", 0, str(faults))
    factors = []
    for step in range(1, 40):
        clock.now += 0.1  # every step computes 0.1 s; the delay is (factor - 1) x 0.1 s
        before = len(clock.sleeps)
        rank.step_end(step, 1.0)
        factors += [round(1 + s / 0.1, 2) for s in clock.sleeps[before:]]
    rank.close()
    peak = factors.index(3.0)
    climb, after = factors[:peak], factors[peak:]
    assert climb == sorted(climb) and climb[0] < 1.5 and len(climb) >= 3
    held = [f for f in after if f == 3.0]
    fall = after[len(held):]
    assert len(held) >= 3 and fall == sorted(fall, reverse=True) and fall[-1] < 1.5
    events = [json.loads(line) for f in (tmp_path / "events").iterdir() for line in f.read_text().splitlines()]
    assert [e["kind"] for e in events if e["kind"].startswith("fault_")] == ["fault_injected", "fault_reverted"]


def test_the_ramp_profile() -> None:
    ramp = probe.RampProfile(t0=10.0, peak=3.0, ramp_s=4.0, hold_s=2.0, recover_s=4.0)
    assert [ramp.factor(10.0 + t) for t in (0, 1, 4, 5.9, 8, 10)] == [1.0, 1.5, 3.0, 3.0, 2.0, None]
    assert ramp.passes(1.5) == 1.0 and ramp.passes(4.0) is None
    assert probe.RampProfile(0.0, 2.0, 0.0, None, 0.0).factor(1e9) == 2.0


def _scenario(fault: dict, harness: dict | None = None) -> object:
    return parse_scenario({"name": "s", "workload": {"harness": {"steps": 50, **(harness or {})}},
                           "topology": {"nodes": 1, "ranks_per_node": 2},
                           "faults": [{"target": {"rank": 1}, "trigger": {"at_step": 5}, **fault}]}, "s.yaml")


def test_the_types_are_declared_like_the_others() -> None:
    stall, thermal = lookup("stall_loop"), lookup("thermal_throttle")
    assert (stall.family, stall.failure_class, stall.in_process) == ("process", "stalled", True)
    assert (thermal.family, thermal.failure_class, thermal.in_process) == ("process", "slow", True)
    assert "GIL" in stall.fidelity and "not inside kernels" in thermal.fidelity
    sc = _scenario({"type": "stall_loop", "params": {"mode": "gil"}})
    from chaos.runner.plan import make_plan, probe_instructions

    (planned,) = make_plan(sc, 0)
    assert planned.fault.failure_class == "hang"  # the heartbeat stops with the GIL held
    (instruction,) = probe_instructions([planned])
    assert (instruction["action"], instruction["at_step"], instruction["ranks"]) == ("stall", 5, [1])


@pytest.mark.parametrize(("fault", "where", "says"), [
    ({"type": "stall_loop", "params": {"mode": "spin"}}, "faults[0].params.mode", "sleep"),
    ({"type": "stall_loop", "params": {"duration_s": 0}}, "faults[0].params.duration_s", "must be > 0"),
    ({"type": "thermal_throttle", "params": {"factor": 1.0}}, "faults[0].params.factor", "must be > 1"),
    ({"type": "thermal_throttle", "params": {"ramp_s": -1}}, "faults[0].params.ramp_s", "must be between 0"),
])
def test_bad_params_are_located(fault: dict, where: str, says: str) -> None:
    with pytest.raises(ScenarioError) as info:
        _scenario(fault)
    assert where in str(info.value) and says in str(info.value)
