"""Honest blindness (issue 42): a fault whose detection no source of the workload could have
reported is detection ``unknown`` with the fix named, never ``undetected`` blamed on the stack."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.metrics import FaultRecord, RunInfo, compute_metrics
from chaos.metrics.records import DetectionSources
from chaos.model.scenario import Bound, Targets
from chaos.runfiles.record import MetricsRecord
from chaos.runner.verdict import judge
from chaos.scenario.load import parse_scenario
from chaos.workload import workload_for

FIX = "add the adapter line to the script: `manager = chaos.adapters.torchft.instrument(manager, model=model)`"


def _events(via_log: bool) -> list[dict[str, Any]]:
    """Two ranks training 10 steps; their steps read from log lines, or reported by the probe."""
    extra = {"via": "log"} if via_log else {}
    return [{"t": float(step) + 0.01 * r, "src": f"rank-{r}", "incarnation": 0, "kind": "step_end",
             "step": step, "loss": 1.0, **extra} for step in range(1, 11) for r in (0, 1)]


def _fault(cls: str = "crash", also: tuple[str, ...] = ()) -> FaultRecord:
    return FaultRecord(fault_id="f0-kill_rank", type="kill_rank", failure_class=cls, target_srcs=["rank-1"],
                       t_inject=5.5, also_classes=also)


def _measure(sources: DetectionSources | None, fault: FaultRecord, via_log: bool = True,
             detection: dict[str, Any] | None = None):
    events = _events(via_log) + ([detection] if detection else [])
    run = RunInfo("completed", 0.0, 11.0, 10, 2, detection=sources)
    return compute_metrics(events, [fault], run)


TORCHFT_WITHOUT_LINE = DetectionSources(in_job="probe", agent=False, fix=FIX)
COMMAND = DetectionSources(in_job="probe", agent=True, fix="report it through the probe")


def test_a_kill_no_source_could_report_is_unknown_with_the_fix_named() -> None:
    m = _measure(TORCHFT_WITHOUT_LINE, _fault())
    (fm,) = m.faults
    assert fm.detection_s is None and fm.attribution == "unknown"
    assert fm.unknown["detection_s"] == f"no detection source sees a crash fault in this workload; {FIX}"
    assert not m.undetected  # the tool was blind: nothing says the stack missed it
    verdict = judge(Targets(detection_s=Bound(max=5), attribution="correct"), m)
    assert not verdict.passed
    reasons = verdict.reasons()
    assert reasons[0] == (f"fault f0-kill_rank: detection unknown: no detection source sees a crash fault in "
                          f"this workload; {FIX} (target detection_s <= 5 s)")
    assert reasons[1] == f"f0-kill_rank: attribution unknown: no detection source sees a crash fault in this workload; {FIX}"
    assert not any("undetected" in r for r in reasons)
    # and the record keeps it typed, for the reports' "unknown" instead of "undetected"
    fault = MetricsRecord.of(m).faults[0]
    assert fault.missing("detection_s", "undetected") == "unknown"


@pytest.mark.parametrize(("sources", "fault", "via_log"), [
    (None, _fault("hang"), True),                        # not declared: as before
    (DetectionSources(), _fault("hang"), True),          # the harness reports every detector it runs
    (COMMAND, _fault("hang"), False),                    # the script reports through the probe
    (COMMAND, _fault("crash"), True),                    # the agent sees the worker die
    (COMMAND, _fault("oom", also=("crash",)), True),     # ... whatever else it also is
    (TORCHFT_WITHOUT_LINE, _fault("crash"), False),      # the adapter line is there
])
def test_a_fault_some_source_could_have_reported_stays_undetected(sources, fault, via_log) -> None:
    m = _measure(sources, fault, via_log)
    (fm,) = m.faults
    assert (fm.attribution, fm.attribution_detail, fm.unknown) == ("none", "undetected", {})
    assert m.undetected
    assert judge(Targets(detection_s=Bound(max=5)), m).reasons() == [
        "fault f0-kill_rank undetected (target detection_s <= 5 s)"]


def test_a_hang_in_a_command_without_the_probe_is_unknown_the_agent_sees_only_deaths() -> None:
    (fm,) = _measure(COMMAND, _fault("hang")).faults
    assert fm.attribution == "unknown" and "report it through the probe" in fm.unknown["detection_s"]


def test_a_torchft_group_lost_whole_without_the_adapter_line_is_unknown_even_read_from_its_logs() -> None:
    """The issue's case: the group's agent dies with it, the other groups train on."""
    read_from_logs = DetectionSources(in_job="probe", agent=True, node_loss_seen=False, fix=FIX)
    group = FaultRecord(fault_id="f0-kill_node", type="kill_node", failure_class="crash",
                        target_srcs=["rank-1", "node-1"], t_inject=5.5)
    (fm,) = _measure(read_from_logs, group).faults
    assert fm.attribution == "unknown" and fm.unknown["detection_s"].endswith(FIX)
    (rank,) = _measure(read_from_logs, _fault()).faults  # one worker: its group's agent sees it
    assert rank.attribution_detail == "undetected"
    (elsewhere,) = _measure(COMMAND, group).faults  # torchrun: the other nodes' workers fail with it
    assert elsewhere.attribution_detail == "undetected"


def test_a_detection_that_did_come_is_measured_whatever_the_sources_declare() -> None:
    seen = {"t": 6.0, "src": "node-1", "incarnation": 0, "kind": "detected", "by": "node-1",
            "suspect": "rank-1", "failure_class": "crash", "via": "log"}
    (fm,) = _measure(TORCHFT_WITHOUT_LINE, _fault(), detection=seen).faults
    assert fm.detection_s == pytest.approx(0.5) and fm.attribution == "correct" and fm.unknown == {}


def _workload(section: dict[str, Any]):
    return workload_for(parse_scenario({"name": "x", "workload": section}, "x.yaml").workload)


def test_each_kind_declares_its_sources_and_names_its_own_fix(tmp_path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('step 1')\n")
    harness = _workload({"harness": {"steps": 4}}).detection_sources()
    assert harness.in_job == "always"
    command = _workload({"command": f"python {script}", "steps": 4}).detection_sources()
    assert (command.in_job, command.agent) == ("probe", True)
    assert 'chaos.probe.emit("detected"' in command.fix
    pytest.importorskip("torchft")
    bare = _workload({"torchft": {"script": str(script), "steps": 4}}).detection_sources()
    assert (bare.in_job, bare.agent, bare.node_loss_seen) == ("probe", False, False)
    assert bare.fix == FIX
    read = _workload({"torchft": {"script": str(script), "steps": 4,
                                  "progress_regex": r"step (?P<step>\d+)"}}).detection_sources()
    assert read.agent  # a script read from its log lines: its agents' reports count


def test_with_no_step_source_recovery_catchup_and_lost_steps_are_unknown_not_never_recovered() -> None:
    blind = DetectionSources(in_job="probe", agent=True, fix="F", progress_fix="give workload.progress_regex")
    seen = {"t": 6.0, "src": "node-0", "incarnation": 0, "kind": "detected", "by": "node-0",
            "suspect": "rank-1", "failure_class": "crash", "via": "log"}
    run = RunInfo("completed", 0.0, 11.0, 10, 2, detection=blind)
    m = compute_metrics([seen], [_fault()], run)
    (fm,) = m.faults
    assert fm.detection_s == pytest.approx(0.5)  # the agent saw the worker die
    assert fm.recovery_s is None and set(fm.unknown) == {"recovery_s", "catchup_s"}
    verdict = judge(Targets(recovery_s=Bound(max=10)), m)
    assert verdict.reasons()[0] == ("fault f0-kill_rank: recovery unknown: no source reports this workload's steps; "
                                    "give workload.progress_regex (target recovery_s <= 10 s)")
    # steps read from its log lines: never recovered is the job's
    logs = DetectionSources(in_job="probe", agent=True, progress_from_logs=True)
    (fm,) = compute_metrics([seen], [_fault()], RunInfo("completed", 0.0, 11.0, 10, 2, detection=logs)).faults
    assert fm.recovery_s is None and fm.unknown == {}


def test_every_built_in_stack_kind_names_its_own_adapter_line_as_the_fix() -> None:
    """A stack kind without one would name the generic probe call, not the line its users add."""
    from chaos.workload import WORKLOADS
    from chaos.workload.script import ScriptWorkload

    stacks = [cls for cls in WORKLOADS.known().values() if isinstance(cls, type) and issubclass(cls, ScriptWorkload)]
    assert {cls.kind for cls in stacks} >= {"torchft", "lightning", "accelerate", "dcp", "nvrx_inprocess", "deepspeed"}
    assert [cls.kind for cls in stacks if "chaos.adapters" not in cls.adapter_line] == []
