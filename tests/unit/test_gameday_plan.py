"""Game-day logic without an engine: plan validation (every error located), conditions, the
pace-based goodput, the CLI's exit 2 for a bad plan or no live run, and the session's
guarantees with a stand-in run: a stop condition and Ctrl-C both revert every fault, write
the report and set the exit code; skipping a step injects nothing. (The real thing, on a
dockerd through a pseudo-terminal, is tests/integration/test_gameday.py.)"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from chaos.cluster.base import ResolvedTarget
from chaos.errors import ScenarioError
from chaos.faults.base import FaultType, register
from chaos.gameday.attach import Resolution
from chaos.gameday.observe import Observer
from chaos.gameday.plan import Plan, load_plan, parse_condition
from chaos.gameday.session import EXIT_INTERRUPTED, GameDay


def _plan_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return str(path)


def test_every_plan_error_is_reported_with_its_location(tmp_path: Path) -> None:
    path = _plan_file(tmp_path, """\
name: bad
stop_when: ["goodput <<< 1", "speed > 2"]
steps:
  - inject: {type: no_such_fault, target: {node: 1}}
  - inject: {type: device_error, target: {rank: 0}}
  - inject: {type: container_pause, target: {node: 1}, params: {duration_s: -1}}
  - revert: never-named
  - wait: {seconds: 1}
    observe: {seconds: 1}
  - check: {condition: "dead_s > x"}
""")
    with pytest.raises(ScenarioError) as exc:
        load_plan(path)
    text = str(exc.value)
    for where in ("stop_when[0]", "stop_when[1]: unknown metric 'speed'", "steps[0].inject.type: unknown fault type",
                  "steps[1].inject.type: device_error does not work", "steps[2].inject.params.duration_s",
                  "steps[3].revert: no earlier inject step named 'never-named'", "steps[4]: a step has exactly one",
                  "steps[5].check.condition"):
        assert where in text, text
    assert all(line.startswith(path) for line in text.splitlines())


def test_shipped_plans_are_valid() -> None:
    plans = sorted((Path(__file__).resolve().parents[2] / "gamedays").glob("*.yaml"))
    assert len(plans) >= 2
    for path in plans:
        assert load_plan(str(path)).steps


def test_conditions_parse_and_hold() -> None:
    cond = parse_condition("goodput < 0.3 for 20s")
    assert (cond.metric, cond.op, cond.value, cond.for_s) == ("goodput", "<", 0.3, 20.0)
    assert cond.holds({"goodput": 0.1}) and not cond.holds({"goodput": 0.5})
    assert str(parse_condition("dead_s>=5")) == "dead_s >= 5"


def test_goodput_is_the_pace_now_against_the_pace_before_the_first_inject() -> None:
    obs = Observer(window_s=5)
    now = obs.t_start = 1000.0
    obs.take([{"kind": "step_end", "step": s, "t": now - 5 + 0.5 * s} for s in range(1, 11)])
    assert obs.pace(now) == pytest.approx(2.0)
    obs.reference_pace = 2.0
    # After a restart the job replays steps 6..10 from its checkpoint: not new progress.
    obs.take([{"kind": "step_end", "step": s, "t": now + 5 + s * 0.1} for s in range(6, 12)])
    assert obs.max_step == 11
    assert obs.pace(now + 10) == pytest.approx(0.2)


def test_gameday_without_a_live_run_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from chaos.cli import main

    monkeypatch.setenv("TRAINCHAOS_STATE_DIR", str(tmp_path / "state"))
    path = _plan_file(tmp_path, "name: p\nrun: latest\nsteps:\n  - observe: {seconds: 1}\n")
    monkeypatch.setattr(sys, "argv", ["trainchaos", "gameday", path, "--dry-run"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    assert f"{path}: run: no live docker run 'latest'" in capsys.readouterr().err


# -- the session, with a stand-in run and a recording fault --------------------------------

EVENTS: list[tuple[str, Any]] = []


@dataclass
class _Recorder(FaultType):
    type_name: ClassVar[str] = "test_gameday_recorder"
    family: ClassVar[str] = "test"
    failure_class: ClassVar[str] = "hang"
    fidelity: ClassVar[str] = "a test double"
    summary: ClassVar[str] = "records inject and revert"
    target_kinds: ClassVar[tuple[str, ...]] = ("node",)

    def inject(self, ctx: Any) -> dict[str, Any]:
        EVENTS.append(("inject", self.target.nodes))
        return {"nodes": list(self.target.nodes)}

    def revert(self, ctx: Any, record: dict[str, Any]) -> None:
        EVENTS.append(("revert", tuple(record["nodes"])))


@pytest.fixture(autouse=True)
def _recorder_registered() -> Any:
    """Known only while a test of this module runs: other tests list every registered type."""
    from chaos.faults import base

    base.FAULT_TYPES.load()
    register(_Recorder)
    yield
    base.FAULT_TYPES.unregister(_Recorder.type_name)


class _FakeRun:
    def __init__(self, tmp_path: Path) -> None:
        self.spec = SimpleNamespace(run_id="trainchaos-fake", run_dir=str(tmp_path / "run"))
        self._containers = {0: "trainchaos-fake-n0", 1: "trainchaos-fake-n1"}

    def refresh(self) -> list[dict[str, Any]]:
        return []

    def status_of(self, node: int) -> str:
        return "running"

    def resolve_step(self, target: dict[str, Any], live: bool = True) -> Resolution:
        node = int(target["node"])
        return Resolution(ResolvedTarget(nodes=(node,)), [(node, self._containers[node], "running")])


def _session(tmp_path: Path, plan_text: str, answers: list[Any], yes: bool = False) -> GameDay:
    import yaml

    plan = Plan.model_validate(yaml.safe_load(plan_text))
    feed = iter(answers)

    def ask(prompt: str) -> str:
        answer = next(feed)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    gd = GameDay(plan, str(tmp_path / "plan.yaml"), str(tmp_path / "out"), yes=yes, echo=lambda s: None, ask=ask)
    gd.run = _FakeRun(tmp_path)
    EVENTS.clear()
    return gd


def _report(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "out" / "report.json").read_text())


def test_stop_condition_reverts_everything_and_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINCHAOS_STATE_DIR", str(tmp_path / "state"))
    gd = _session(tmp_path, """\
name: s
stop_when: ["dead_s > 0.5"]
steps:
  - {name: a, inject: {type: test_gameday_recorder, target: {node: 0}}}
  - {name: b, inject: {type: test_gameday_recorder, target: {node: 1}}}
  - wait: {seconds: 60}
""", [], yes=True)
    assert gd.execute() == 1
    # Newest first, both reverted, after both were injected.
    assert EVENTS == [("inject", (0,)), ("inject", (1,)), ("revert", (1,)), ("revert", (0,))]
    report = _report(tmp_path)
    assert report["status"] == "stopped" and "dead_s > 0.5" in report["reason"]
    assert [d["by"] for d in report["decisions"]] == ["--yes", "--yes"]


def test_ctrl_c_reverts_everything_and_exits_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINCHAOS_STATE_DIR", str(tmp_path / "state"))
    gd = _session(tmp_path, """\
name: c
steps:
  - {name: a, inject: {type: test_gameday_recorder, target: {node: 1}}}
  - ask: "what do you see?"
""", ["a note first", "y", KeyboardInterrupt()])
    assert gd.execute() == EXIT_INTERRUPTED
    assert EVENTS == [("inject", (1,)), ("revert", (1,))]
    report = _report(tmp_path)
    assert report["status"] == "interrupted"
    assert report["notes"][0]["text"] == "a note first"
    assert (tmp_path / "out" / "report.md").exists()


def test_skip_injects_nothing_and_abort_stops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINCHAOS_STATE_DIR", str(tmp_path / "state"))
    gd = _session(tmp_path, """\
name: k
steps:
  - {name: a, inject: {type: test_gameday_recorder, target: {node: 0}}}
  - {name: b, inject: {type: test_gameday_recorder, target: {node: 1}}}
  - {name: c, inject: {type: test_gameday_recorder, target: {node: 0}}}
""", ["s", "y", "a"])
    assert gd.execute() == 1
    assert EVENTS == [("inject", (1,)), ("revert", (1,))]
    assert [d["decision"] for d in _report(tmp_path)["decisions"]] == ["skip", "yes", "abort"]
