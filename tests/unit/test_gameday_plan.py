"""Game-day logic without an engine: plan validation (every error located), conditions, the
pace-based goodput, the CLI's exit 2 for a bad plan or no live run, and the session's
guarantees with a stand-in run: a stop condition and Ctrl-C both revert every fault, write
the report and set the exit code; skipping a step injects nothing. (The real thing, on a
dockerd through a pseudo-terminal, is tests/integration/test_gameday.py.)"""

from __future__ import annotations

import io
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from chaos.cluster.capabilities import Attachable, ContainerHost, NodeHandle
from chaos.errors import EXIT_INTERRUPTED, ScenarioError
from chaos.faults.base import FaultParams, FaultType, register
from chaos.gameday.attach import AttachedRun
from chaos.gameday.observe import Observer, attribute
from chaos.gameday.plan import Plan, load_plan, parse_condition
from chaos.gameday.session import GameDay
from chaos.gameday.view import LiveStatus, render_status
from chaos.model.scenario import Topology


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

    path = _plan_file(tmp_path, "name: p\nrun: latest\nsteps:\n  - observe: {seconds: 1}\n")
    monkeypatch.setattr(sys, "argv", ["trainchaos", "gameday", path, "--dry-run"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    assert f"{path}: run: no live docker or slurm run 'latest'" in capsys.readouterr().err


# -- the session, with a stand-in run and a recording fault --------------------------------

EVENTS: list[tuple[str, Any]] = []


class _RecorderParams(FaultParams):
    detected_after_s: float | None = None
    """The job writes a detection this long after the inject began (the inject takes 0.3 s)."""
    steps_after_s: float | None = None
    """The job steps again (steps 100 and 101) this long after the inject's engine call."""


@dataclass
class _Recorder(FaultType):
    type_name: ClassVar[str] = "test_gameday_recorder"
    family: ClassVar[str] = "test"
    failure_class: ClassVar[str] = "hang"
    fidelity: ClassVar[str] = "a test double"
    summary: ClassVar[str] = "records inject and revert"
    target_kinds: ClassVar[tuple[str, ...]] = ("node",)
    params_model: ClassVar[type[FaultParams]] = _RecorderParams

    def inject(self, ctx: Any) -> dict[str, Any]:
        EVENTS.append(("inject", self.target.nodes))
        if self.params.get("detected_after_s") is not None:
            # The job notices while the engine call is still under way (a power cut takes
            # longer to apply than the survivors take to see the crash).
            t = time.time()
            time.sleep(0.3)
            ctx.cluster.written.append({"kind": "detected", "t": t + self.params["detected_after_s"],
                                        "src": "rank-0", "suspect": "rank-1", "failure_class": "crash"})
        if self.params.get("steps_after_s") is not None:
            t = time.time() + self.params["steps_after_s"]
            ctx.cluster.written.extend({"kind": "step_end", "step": 100 + k, "t": t + 0.01 * k} for k in range(2))
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


class _FakeBackend:
    """The attached backend's side: container names and states, events as they are written."""

    hosts: ClassVar[list[str]] = ["unix:///fake.sock"]
    capabilities: ClassVar[tuple[type, ...]] = (Attachable, ContainerHost)

    def __init__(self, states: dict[int, str]) -> None:
        self.states = states
        self.written: list[dict[str, Any]] = []

    def container_name(self, node: int) -> str:
        return f"trainchaos-fake-n{node}"

    def rescan(self) -> dict[int, str]:
        return dict(self.states)

    def node_handle(self, node: int) -> NodeHandle:
        name = self.container_name(node)
        return NodeHandle("container", name, f"it has no container (no {name} on {', '.join(self.hosts)})")

    def live_ranks(self) -> dict[int, Any]:
        return {}


class _FakeRun(AttachedRun):
    """The real target resolution and preconditions over a stand-in backend."""

    def __init__(self, tmp_path: Path, states: dict[int, str] | None = None) -> None:
        self.spec = SimpleNamespace(run_id="trainchaos-fake", run_dir=str(tmp_path / "run"))
        self.topology = Topology(nodes=2, ranks_per_node=1)
        self.backend = _FakeBackend(states or {0: "running", 1: "running"})
        self.states = self.backend.rescan()

    def poll_events(self) -> list[dict[str, Any]]:
        events, self.backend.written[:] = list(self.backend.written), []
        return events


def _session(tmp_path: Path, plan_text: str, answers: list[Any], yes: bool = False,
             states: dict[int, str] | None = None, echo: Any = None) -> GameDay:
    import yaml

    plan = Plan.model_validate(yaml.safe_load(plan_text))
    feed = iter(answers)

    def ask(prompt: str) -> str:
        answer = next(feed)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    gd = GameDay(plan, str(tmp_path / "plan.yaml"), str(tmp_path / "out"), yes=yes,
                 echo=echo or (lambda s: None), ask=ask)
    gd.run = _FakeRun(tmp_path, states)
    EVENTS.clear()
    return gd


def _report(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "out" / "report.json").read_text())


def test_stop_condition_reverts_everything_and_exits_1(tmp_path: Path) -> None:
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


def test_ctrl_c_reverts_everything_and_exits_130(tmp_path: Path) -> None:
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


def test_skip_injects_nothing_and_abort_stops(tmp_path: Path) -> None:
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


def test_a_detection_within_200ms_of_injection_passes_the_check_and_the_report_agrees(
        tmp_path: Path) -> None:
    """Issue 26: the job noticed 0.12 s after the outage began, while the fault was still
    being applied; the check must see it, counted from the inject's start, and the metrics
    rows and the Faults table must tell the same count."""
    gd = _session(tmp_path, """\
name: d
steps:
  - {name: outage, inject: {type: test_gameday_recorder, target: {node: 1}, params: {detected_after_s: 0.12}}}
  - check: {condition: "detections >= 1", since: outage}
  - check: {condition: "detections >= 1"}
  - observe: {seconds: 0.1}
""", [], yes=True)
    assert gd.execute() == 0, _report(tmp_path)["reason"]
    report = _report(tmp_path)
    assert [e["outcome"] for e in report["timeline"] if e["action"] == "check"] == ["passed", "passed"]
    fault = report["faults"][0]
    assert fault["detections"] == 1 and fault["detection_s"] == pytest.approx(0.12, abs=0.01)
    assert fault["suspect"] == "rank-1"
    assert [m["detections"] for m in report["metrics"]] == [1.0, 1.0]  # the observe row and the final
    assert len(report["detections"]) == 1 and report["detections_before_faults"] == 0
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| outage | test_gameday_recorder | nodes [1] |" in md and "0.12 s by rank-0 | rank-1 | 1 |" in md


def test_pace_since_an_inject_counts_only_the_steps_written_after_it() -> None:
    obs = Observer(window_s=10)
    now = 1000.0
    obs.take([{"kind": "step_end", "step": s, "t": now - 5 + 0.5 * s} for s in range(1, 11)])
    assert obs.pace(now) == pytest.approx(1.0)  # the plain window: 10 steps in 10 s
    assert obs.pace(now + 0.004, progress_since=now) == 0.0  # 4 ms after an outage: dead
    obs.take([{"kind": "step_end", "step": 11, "t": now + 3.0}, {"kind": "step_end", "step": 12, "t": now + 4.0}])
    assert obs.pace(now + 4.0, progress_since=now) == pytest.approx(0.5)  # 2 steps in the 4 s since
    # One step a moment after the inject is one step per second at most, not hundreds.
    assert obs.pace(now + 3.01, progress_since=now + 3.0) == pytest.approx(1.0)


def _stepped_before(gd: GameDay, steps: int = 10) -> None:
    """The job's history: ``steps`` steps over the second before the plan starts."""
    t = time.time()
    gd.run.backend.written.extend({"kind": "step_end", "step": s, "t": t - 1 + s / steps} for s in range(1, steps + 1))


def test_a_wait_after_an_outage_judges_progress_since_it_not_the_windows_history(tmp_path: Path) -> None:
    """Issue 45: ``steps_per_s > 0`` "held" 4 ms after a power cut, on the window's steps from
    before it, while the job was dead. Since the inject, no step: the wait times out."""
    gd = _session(tmp_path, """\
name: w
steps:
  - {name: outage, inject: {type: test_gameday_recorder, target: {node: 1}}}
  - wait: {condition: "steps_per_s > 0", within_s: 0.5}
  - observe: {seconds: 0.1}
""", [], yes=True)
    _stepped_before(gd)
    assert gd.execute() == 0, _report(tmp_path)["reason"]
    report = _report(tmp_path)
    wait = next(e for e in report["timeline"] if e["action"] == "wait")
    assert wait["outcome"] == "timed out" and wait["metrics"]["steps_per_s"] == 0.0
    assert report["metrics"][0]["steps_per_s"] == 0.0 and report["metrics"][0]["step"] == 10.0


def test_a_wait_after_an_outage_holds_once_the_job_steps_again(tmp_path: Path) -> None:
    gd = _session(tmp_path, """\
name: w
steps:
  - {name: outage, inject: {type: test_gameday_recorder, target: {node: 1}, params: {steps_after_s: 0.3}}}
  - wait: {condition: "steps_per_s > 0", within_s: 5, since: outage}
""", [], yes=True)
    _stepped_before(gd)
    assert gd.execute() == 0, _report(tmp_path)["reason"]
    wait = next(e for e in _report(tmp_path)["timeline"] if e["action"] == "wait")
    assert wait["outcome"] == "held" and wait["metrics"]["step"] == 101.0


def test_detections_go_to_the_newest_fault_injected_before_them() -> None:
    dets = [{"t": 5.0}, {"t": 10.5}, {"t": 11.0}, {"t": 30.0}]
    owners = attribute(dets, [("b", 20.0), ("a", 10.0)])
    assert owners == {None: [{"t": 5.0}], "a": [{"t": 10.5}, {"t": 11.0}], "b": [{"t": 30.0}]}


def test_an_absent_target_stops_before_the_engine_with_one_located_line(
        tmp_path: Path) -> None:
    said: list[str] = []
    gd = _session(tmp_path, """\
name: p
steps:
  - {name: a, inject: {type: test_gameday_recorder, target: {node: 0}}}
  - {name: freeze, inject: {type: test_gameday_recorder, target: {node: 1}}}
  - wait: {seconds: 60}
""", [], yes=True, states={0: "running", 1: "exited"}, echo=said.append)
    assert gd.execute() == 2
    # Node 1 never reached the engine; what was in effect is reverted.
    assert EVENTS == [("inject", (0,)), ("revert", (0,))]
    report = _report(tmp_path)
    line = (f"{tmp_path / 'plan.yaml'}: steps[1].inject.target: node 1 is down: its container "
            "trainchaos-fake-n1 is exited, not running; test_gameday_recorder (freeze) was not started, nothing touched")
    assert report["status"] == "precondition_failed" and report["reason"] == line
    assert f"game day precondition_failed: {line}" in said
    assert [f["step"] for f in report["faults"]] == ["a"]


def test_an_absent_target_with_skip_if_absent_is_skipped_with_its_reason(
        tmp_path: Path) -> None:
    gd = _session(tmp_path, """\
name: k
steps:
  - {name: freeze, skip_if_absent: true, inject: {type: test_gameday_recorder, target: {node: 1}}}
  - check: {condition: "detections >= 1", within_s: 30, since: freeze}
  - {name: other, inject: {type: test_gameday_recorder, target: {node: 0}}}
""", [], yes=True, states={0: "running"})
    assert gd.execute() == 0
    assert EVENTS == [("inject", (0,)), ("revert", (0,))]
    report = _report(tmp_path)
    assert [(s["step"], s["reason"]) for s in report["skipped"]] == [
        (0, "node 1 is down: it has no container (no trainchaos-fake-n1 on unix:///fake.sock)"),
        (1, "it counts from step freeze, which was skipped")]
    assert "## Skipped steps" in (tmp_path / "out" / "report.md").read_text()


def test_dry_run_shows_each_precondition_and_exits_2_when_one_is_unmet(tmp_path: Path) -> None:
    said: list[str] = []
    gd = _session(tmp_path, """\
name: dry
steps:
  - {name: a, inject: {type: test_gameday_recorder, target: {node: 0}}}
  - {name: b, inject: {type: test_gameday_recorder, target: {node: 1}}}
""", [], states={0: "running", 1: "paused"}, echo=said.append)
    assert gd.dry_run() == 2
    text = "\n".join(said)
    assert "precondition: container running (met)" in text
    assert ("precondition: container running (NOT MET: node 1 is paused: its container trainchaos-fake-n1 is "
            "paused, not running) -> the game day would stop here (exit 2)") in text
    assert said[-2].startswith(f"dry run: {tmp_path / 'plan.yaml'}: steps[1].inject.target: node 1 is paused")
    assert EVENTS == [] and not (tmp_path / "out").exists()


def test_a_target_outside_the_run_is_refused_by_the_guard(tmp_path: Path) -> None:
    from chaos.gameday.attach import TargetRefused

    run = _FakeRun(tmp_path)
    with pytest.raises(TargetRefused, match="node 5 is not one of the run's nodes"):
        run.resolve_step({"node": 5})
    with pytest.raises(TargetRefused, match="refusing to touch container 'bystander'"):
        run.resolve_step({"container": "bystander"})
    with pytest.raises(TargetRefused, match="power_domain 'pd-z' is not one of the run's"):
        run.resolve_step({"power_domain": "pd-z"})
    assert run.resolve_step({"container": "trainchaos-fake-n1"}).target.nodes == (1,)


def test_live_panel_shows_metrics_containers_each_stop_condition_and_the_step() -> None:
    from rich.console import Console

    status = LiveStatus(plan="power-domain", run_id="trainchaos-x", elapsed_s=42.0,
                        metrics={"steps_per_s": 4.5, "goodput": 0.9, "detections": 1.0, "dead_s": 0.3, "step": 812.0},
                        containers={0: "running", 1: "exited", 2: "exited"},
                        stops=[("dead_s > 30", 0.3, False, 0.0), ("goodput < 0.3 for 25s", 0.2, True, 12.0)],
                        step="3/5 check detections >= 1 within 10 s", step_s=2.0)
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(render_status(status))
    text = out.getvalue()
    for part in ("power-domain on trainchaos-x", "3/5 check detections >= 1 within 10 s",
                 "steps/s 4.5   goodput 0.9   detections 1", "n0 running  n1 exited  n2 exited"):
        assert part in text, text
    assert [line.split() for line in text.splitlines() if "dead_s > 30" in line][0][-3:] == ["now", "0.3", "ok"]
    assert [line.split() for line in text.splitlines() if "goodput < 0.3" in line][0][-5:] == ["now", "0.2", "HOLDS", "12", "s"]


@pytest.mark.parametrize("probe_reports", [False, True])
def test_a_fault_no_source_could_see_is_unknown_in_the_report_not_undetected(tmp_path: Path,
                                                                             probe_reports: bool) -> None:
    """A run whose job reports only through the probe, and whose ranks never did (a user's
    command without the probe calls): a freeze nobody reported is the tool's blindness
    (issue 42), as in a run's own metrics; once a rank has reported, it is undetected."""
    from chaos.metrics.records import DetectionSources

    gd = _session(tmp_path, """\
name: blind
steps:
  - {name: freeze, inject: {type: test_gameday_recorder, target: {node: 1}}}
""", [], yes=True)
    gd.run.detection = DetectionSources(in_job="probe", fix="call chaos.probe.step_end(step) each step")
    if probe_reports:
        gd.run.backend.written.append({"kind": "step_end", "step": 1, "t": time.time(), "src": "rank-0"})
    assert gd.execute() == 0
    (fault,) = _report(tmp_path)["faults"]
    markdown = (tmp_path / "out" / "report.md").read_text()
    if probe_reports:
        assert fault["detection_unknown"] is None and "| undetected |" in markdown
    else:
        assert fault["detection_unknown"] == ("no detection source sees a hang fault in this workload; "
                                              "call chaos.probe.step_end(step) each step")
        assert "| unknown (no detection source sees a hang fault" in markdown and "undetected" not in markdown


def test_the_detection_sources_of_an_attached_run_are_its_workloads() -> None:
    from chaos.gameday.attach import detection_sources_of

    harness = detection_sources_of({"harness": {"steps": 10}})
    command = detection_sources_of({"command": "python train.py", "steps": 10})
    assert harness is not None and harness.in_job == "always"
    assert command is not None and command.in_job == "probe" and command.fix
    assert detection_sources_of(None) is None and detection_sources_of({"no_such_field": 1}) is None
