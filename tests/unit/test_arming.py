"""The run loop journals a fault's ``apply`` ahead of its time (chaos.runner.run._arm_ahead,
chaos.runner.lifecycle.FaultLifecycle.arm): a timed fault once it is due within the horizon, a step
fault once its ranks reached the step before; never one further off."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

from chaos.model import triggers
from chaos.runfiles.rollback import FaultJournal
from chaos.runner.lifecycle import FaultLifecycle
from chaos.runner.run import _ARM_AHEAD_S, _Runner
from chaos.scenario.load import parse_scenario


def _runner(tmp_path: Path, triggers: list[dict]) -> tuple[_Runner, FaultJournal]:
    faults = [{"type": "hang_rank", "target": {"rank": 1}, "params": {"duration_s": 0.1}, "trigger": t}
              for t in triggers]
    scenario = parse_scenario({"name": "arm", "seed": 1, "topology": {"nodes": 2, "ranks_per_node": 1},
                               "faults": faults}, str(tmp_path / "arm.yaml"))
    runner = _Runner(scenario, str(tmp_path / "run"), 1, True, None)
    journal = FaultJournal(str(tmp_path / "fault_journal.jsonl"))
    runner._lifecycle = FaultLifecycle(SimpleNamespace(), journal)  # type: ignore[arg-type]
    return runner, journal


NOW = 1_000_000.0


def _frozen_clock(monkeypatch) -> None:
    """The triggers read the wall clock: stopped here, a fault's distance to its time is exact."""
    monkeypatch.setattr(triggers, "time", SimpleNamespace(time=lambda: NOW))


def _armed(journal: FaultJournal) -> list[tuple[str, float | None]]:
    return [(r["fault_id"], r.get("armed")) for r in journal.records() if r["op"] == "apply"]


def test_timed_faults_are_armed_once_due_within_the_horizon(tmp_path: Path, monkeypatch) -> None:
    _frozen_clock(monkeypatch)
    runner, journal = _runner(tmp_path, [{"at_time": 5}, {"at_time": 5 + 3 * _ARM_AHEAD_S}])
    runner._arm_ahead()
    assert _armed(journal) == []  # no first step yet: no time is known
    first = NOW - 5 + _ARM_AHEAD_S / 2
    runner.intake.t_first_step, runner.intake.t_first_step_wall = time.monotonic(), first
    runner._arm_ahead()
    runner._arm_ahead()
    assert _armed(journal) == [("f0-hang_rank", first + 5)]
    runner.intake.t_first_step_wall = first - 3 * _ARM_AHEAD_S
    runner.states[0].fired = True
    runner._arm_ahead()
    assert [fid for fid, _ in _armed(journal)] == ["f0-hang_rank", "f1-hang_rank"]


def test_a_poisson_trigger_arms_each_occurrence_due_within_the_horizon(tmp_path: Path, monkeypatch) -> None:
    _frozen_clock(monkeypatch)
    runner, journal = _runner(tmp_path, [{"poisson": {"mtbf_s": 0.2 * _ARM_AHEAD_S, "max_faults": 50}}])
    runner.intake.t_first_step, runner.intake.t_first_step_wall = time.monotonic(), NOW
    runner._arm_ahead()
    soon = [st.planned.fault_id for st in runner.states if st.planned.offset_s <= _ARM_AHEAD_S]
    assert soon and len(soon) < len(runner.states)
    assert [fid for fid, _ in _armed(journal)] == soon


def test_a_step_fault_is_armed_when_its_ranks_reach_the_step_before(tmp_path: Path) -> None:
    runner, journal = _runner(tmp_path, [{"at_step": 5}])
    runner.intake.step_by_rank = {0: 4, 1: 3}  # another rank's step does not count
    runner._arm_ahead()
    assert _armed(journal) == []
    runner.intake.step_by_rank[1] = 4
    runner._arm_ahead()
    assert _armed(journal) == [("f0-hang_rank", None)]


def test_an_every_trigger_arms_its_occurrences_one_interval_apart(tmp_path: Path, monkeypatch) -> None:
    _frozen_clock(monkeypatch)
    runner, journal = _runner(tmp_path, [{"every": {"interval_s": 0.6 * _ARM_AHEAD_S, "max_faults": 3}}])
    assert [st.planned.offset_s for st in runner.states] == [0.6 * _ARM_AHEAD_S * k for k in (1, 2, 3)]
    runner.intake.t_first_step, runner.intake.t_first_step_wall = time.monotonic(), NOW
    runner._arm_ahead()
    assert _armed(journal) == [("f0-hang_rank#1", NOW + 0.6 * _ARM_AHEAD_S)]  # the 2nd is 1.2 horizons off
