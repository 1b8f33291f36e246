"""Run handlers (chaos.runner.handlers): every handler is called in the order registered, and
one that fails is logged while the run and the other handlers go on."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from chaos.runner.handlers import HandlerRegistry, RunHandler
from chaos.runner.run import _Runner
from chaos.runner.state import RunProgress
from chaos.scenario.load import parse_scenario


class _Recorder(RunHandler):
    def __init__(self, name: str, calls: list[tuple[str, str, Any]]) -> None:
        self.name, self.calls = name, calls

    def run_started(self, start: Any, ctx: Any) -> None:
        self.calls.append((self.name, "run_started", start))

    def event(self, ev: Any) -> None:
        self.calls.append((self.name, "event", ev["kind"]))

    def run_stopped(self) -> None:
        self.calls.append((self.name, "run_stopped", None))


class _Broken(RunHandler):
    def event(self, ev: Any) -> None:
        raise RuntimeError("checker bug")

    def run_stopped(self) -> None:
        raise OSError("disk gone")


def test_handlers_are_called_in_the_order_registered() -> None:
    calls: list[tuple[str, str, Any]] = []
    registry = HandlerRegistry([_Recorder("a", calls)])
    registry.register(_Recorder("b", calls))
    registry.run_started("start", None)  # type: ignore[arg-type]
    registry.event({"t": 1.0, "kind": "step_end", "step": 1})
    registry.fault_injected(None)  # type: ignore[arg-type]  # not overridden: the base does nothing
    registry.run_stopped()
    assert calls == [("a", "run_started", "start"), ("b", "run_started", "start"),
                     ("a", "event", "step_end"), ("b", "event", "step_end"),
                     ("a", "run_stopped", None), ("b", "run_stopped", None)]


def test_a_failing_handler_is_logged_and_the_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[tuple[str, str, Any]] = []
    registry = HandlerRegistry([_Broken(), _Recorder("after", calls)])
    with caplog.at_level(logging.ERROR, logger="chaos.runner.handlers"):
        registry.event({"t": 1.0, "kind": "ckpt_save_end"})
        registry.run_stopped()
    assert calls == [("after", "event", "ckpt_save_end"), ("after", "run_stopped", None)]
    failures = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in failures] == ["run handler _Broken failed in event",
                                                  "run handler _Broken failed in run_stopped"]
    assert failures[0].exc_info is not None and "checker bug" in str(failures[0].exc_info[1])


def test_the_runner_feeds_each_event_to_its_intake_and_handlers_and_a_broken_one_does_not_stop_it(
        tmp_path: Path) -> None:
    scenario = parse_scenario({"name": "h", "seed": 1, "topology": {"nodes": 2, "ranks_per_node": 1}},
                              str(tmp_path / "h.yaml"))
    calls: list[tuple[str, str, Any]] = []
    steps: list[tuple[int, int]] = []
    runner = _Runner(scenario, str(tmp_path / "run"), 1, True, RunProgress(on_step=lambda s, t: steps.append((s, t))),
                     handlers=[_Broken(), _Recorder("checker", calls)])
    noted: list[dict] = []
    runner.cluster, runner.steps_target = SimpleNamespace(note_event=noted.append), 10
    events = [{"t": 1.0, "kind": "rank_start", "src": "rank-1", "node": 1, "rank": 1, "world_size": 2},
              {"t": 2.0, "kind": "step_end", "src": "rank-1", "step": 3},
              {"t": 3.0, "kind": "step_end", "src": "rank-0", "step": 2}]
    runner._take(events)
    assert [kind for _, _, kind in calls] == ["rank_start", "step_end", "step_end"]
    assert noted == events[:1] and steps == [(3, 10)] and runner.status == "running"
    assert runner.intake.step_seen((0,)) == 2 and runner.intake.step_seen((1,)) == 3
    assert runner.intake.rank_node == {1: 1} and runner.intake.event_times("step_end") == [2.0, 3.0]


def test_the_freshness_handler_reads_each_saved_checkpoint_between_start_and_stop() -> None:
    from chaos.runner.freshness import FreshnessHandler
    from chaos.workload.base import CheckpointImage

    workload = SimpleNamespace(read_checkpoint=lambda path: CheckpointImage(step=7, digest=f"d:{path}"))
    emitted: list[tuple[str, dict]] = []
    handler = FreshnessHandler(workload, RunProgress())  # type: ignore[arg-type]
    handler.event({"t": 0.5, "kind": "ckpt_save_end", "path": "/c/early", "step": 6})  # before the start: not read
    handler.run_started(None, SimpleNamespace(emit=lambda kind, **f: emitted.append((kind, f))))  # type: ignore[arg-type]
    handler.event({"t": 1.0, "kind": "ckpt_save_end", "src": "rank-0", "path": "/c/s7", "step": 7, "tier": "disk"})
    handler.event({"t": 1.5, "kind": "step_end", "step": 8})
    handler.run_stopped()
    assert emitted == [("ckpt_image", {"path": "/c/s7", "tier": "disk", "saved_by": "rank-0",
                                       "saved_incarnation": None, "saved_t": 1.0, "step": 7, "digest": "d:/c/s7"})]
