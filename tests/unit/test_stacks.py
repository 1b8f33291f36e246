"""The stack comparison without running training: which scenario runs which fault on which
stack (``chaos.scenario.stacks``), the survivors' stall (``chaos.metrics.families.survivors``) and the
side-by-side tables (``chaos.report.stacks``). A real comparison runs in
tests/integration/test_bench_stacks.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chaos.errors import EXIT_BAD_INPUT, ScenarioError
from chaos.metrics.families.survivors import survivor_stall
from chaos.report.stacks import stack_tables, write_stacks
from chaos.runfiles.record import RunRecord
from chaos.scenario.stacks import load_stacks

SCENARIO = """\
name: {name}
workload: {{harness: {{model: {{name: mlp}}, steps: 40}}}}
topology: {{nodes: 2, ranks_per_node: 1}}
faults: [{{type: kill_rank, target: {{rank: 1}}, trigger: {{{trigger}}}}}]
targets: {{recovery_s: {{max: 60}}}}
"""


def _layout(root: Path, files: dict[str, list[str]], trigger: str = "at_step: 10") -> Path:
    for stack, faults in files.items():
        for fault in faults:
            path = root / stack / f"{fault}.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(SCENARIO.format(name=f"{stack}-{fault}", trigger=trigger))
    return root


def test_reference_first_standard_faults_in_order_and_names_by_cell(tmp_path: Path) -> None:
    root = _layout(tmp_path, {"alpha": ["kill-rank", "zzz-custom"], "torchrun": ["freeze-rank", "kill-rank"]})
    matrix = load_stacks(str(root))
    assert matrix.stacks == ["torchrun", "alpha"]
    assert matrix.faults == ["kill-rank", "freeze-rank", "zzz-custom"]
    assert [s.name for s in matrix.scenarios] == ["kill-rank--torchrun", "kill-rank--alpha",
                                                  "freeze-rank--torchrun", "zzz-custom--alpha"]
    assert ("freeze-rank", "alpha") not in matrix.cells
    assert matrix.cell_of("zzz-custom--alpha") == ("zzz-custom", "alpha")
    narrowed = load_stacks(str(root), stacks=["alpha"], faults=["kill-rank"])
    assert (narrowed.stacks, [s.name for s in narrowed.scenarios]) == (["alpha"], ["kill-rank--alpha"])


def test_sustained_scenarios_live_in_their_own_folder(tmp_path: Path) -> None:
    _layout(tmp_path, {"torchrun": ["kill-rank"], "torchrun/sustained": ["kill-rank"]},
            trigger="poisson: {mtbf_s: 30, max_faults: 10}")
    assert [s.name for s in load_stacks(str(tmp_path)).scenarios] == ["kill-rank--torchrun"]
    (sustained,) = load_stacks(str(tmp_path), sustained=True).scenarios
    assert sustained.faults[0].trigger.max_faults == 10 and "sustained" in sustained.path


def test_bad_input_is_located_and_starts_nothing(tmp_path: Path) -> None:
    root = _layout(tmp_path, {"torchrun": ["kill-rank"]})
    with pytest.raises(ScenarioError) as info:
        load_stacks(str(root), stacks=["torchft"], faults=["kill-nod"])
    text = str(info.value)
    assert info.value.exit_code == EXIT_BAD_INPUT
    assert "--stacks: no stack folder named 'torchft'; present: torchrun" in text
    assert "--faults: no scenario file for 'kill-nod'" in text
    (root / "torchrun" / "kill-rank.yaml").write_text("name: x\nrepeat: 0\n")
    with pytest.raises(ScenarioError, match=r"kill-rank.yaml: repeat: 0 is out of range"):
        load_stacks(str(root))
    with pytest.raises(ScenarioError, match="not a directory of stack folders"):
        load_stacks(str(tmp_path / "nowhere"))


def _steps(src: str, times: list[float]) -> list[dict]:
    return [{"src": src, "t": t, "step": i} for i, t in enumerate(times)]


def test_survivor_stall_of_a_restart_and_of_a_stack_that_drops_the_failed_group() -> None:
    every = [0.0, 1.0, 2.0, 3.0]
    # torchrun restart: the survivor is torn down too and trains again 12 s after the kill
    restart = sorted(_steps("rank-0", [*every, 15.0, 16.0]) + _steps("rank-1", every), key=lambda e: e["t"])
    stall, why = survivor_stall(restart, {"rank-1", "node-1"}, t_inject=3.5, t_recovered=15.0)
    assert stall == pytest.approx(11.0) and why is None  # a 12 s gap less the 1 s step
    # torchft-like: one step in flight ends after the kill, then the survivor waits out its
    # 5 s timeout and goes on alone
    dropped = _steps("rank-0", [*every, 3.9, 9.0, 10.0, 11.0])
    assert survivor_stall(dropped, {"rank-1"}, t_inject=3.5, t_recovered=20.0)[0] == pytest.approx(4.1)
    # a normal pause long after the recovery is not the fault's
    late = _steps("rank-0", [*every, 4.0, 5.0, 30.0])
    assert survivor_stall(late, {"rank-1"}, t_inject=3.5, t_recovered=4.5)[0] == pytest.approx(0.0)
    assert survivor_stall(_steps("rank-1", every), {"rank-1"}, 3.5, None) == (
        None, "no survivor: every rank that trained before the fault was hit by it")
    assert survivor_stall(_steps("rank-0", every), {"rank-1"}, 3.5, None)[0] is None  # never trained again


def _journal(name: str, *, recovery: float | None, stall: float, outcome: str = "pass", faults: int = 1) -> RunRecord:
    fired = [{"fault_id": f"f0#{i}", "fired": True, "t_inject": 10.0 * i, "detection_s": 0.5,
              "recovery_s": recovery, "survivor_stall_s": stall, "lost_steps": 3} for i in range(faults)]
    journal = {"schema_version": 2, "scenario": {"name": name}, "status": "completed", "repeat_index": 0,
               "wall_s": 60.0, "plan": [{"fault_id": f"f0#{i}", "type": "kill_rank"} for i in range(faults)],
               "metrics": {"goodput": 0.5, "restart_count": faults, "wall_s": 60.0, "faults": fired},
               "verdict": {"passed": outcome != "xfail", "checks": [
                   {"name": "recovery_s", "ok": outcome != "xfail", "reason": "f0: recovery 20 s > target 1 s"}]}}
    if outcome == "xfail":
        journal["scenario"]["expect"] = {"fail": "a known finding", "issue": "https://example.org/1"}
    return RunRecord.from_dict(journal)


def test_one_table_per_fault_with_the_reference_first_and_ratios(tmp_path: Path) -> None:
    root = _layout(tmp_path / "stacks", {"alpha": ["kill-rank", "freeze-rank"], "torchrun": ["kill-rank"]})
    matrix = load_stacks(str(root))
    journals = [_journal("kill-rank--torchrun", recovery=20.0, stall=19.0),
                _journal("kill-rank--alpha", recovery=5.0, stall=4.75, outcome="xfail"),
                _journal("freeze-rank--alpha", recovery=None, stall=1.0)]
    (kill, kill_headers, kill_rows), (freeze, _, freeze_rows) = stack_tables(matrix, journals)
    assert (kill, freeze) == ("kill-rank", "freeze-rank")
    assert kill_headers == ["metric", "torchrun (reference)", "alpha"]
    rows = {row[0]: row[1:] for row in kill_rows}
    assert rows["recovery"] == ["20.0 s", "5.00 s (0.25×)"]
    assert rows["survivor stall"] == ["19.0 s", "4.75 s (0.25×)"]
    assert rows["goodput"] == ["50.0%", "50.0%"] and rows["lost steps"] == ["3", "3"]
    assert rows["verdict"] == ["PASS", "XFAIL (a known finding (https://example.org/1))"]
    freeze_by = {row[0]: row[1:] for row in freeze_rows}
    assert freeze_by["recovery"] == ["n/a", "—"]  # torchrun has no freeze-rank here
    md, html = write_stacks(str(tmp_path), matrix, journals)
    text = Path(md).read_text()
    assert "## kill-rank" in text and "| recovery | 20.0 s | 5.00 s (0.25×) |" in text
    assert 'id="stacks-kill-rank"' in Path(html).read_text()


def test_sustained_table_counts_failures_and_reports_efficiency(tmp_path: Path) -> None:
    root = _layout(tmp_path / "stacks", {"torchrun/sustained": ["kill-rank"]}, trigger="poisson: {mtbf_s: 30}")
    matrix = load_stacks(str(root), sustained=True)
    [(_, _, rows)] = stack_tables(matrix, [_journal("kill-rank--torchrun", recovery=12.0, stall=11.0, faults=4)],
                                  sustained=True)
    by = {row[0]: row[1] for row in rows}
    assert by["failures injected"] == "4/4" and by["recovered"] == "4/4"
    assert by["lost steps (all failures)"] == "12" and by["training efficiency (goodput)"] == "50.0%"
    assert by["recovery (median)"] == "12.0 s"


class _Restarting:
    """A cluster whose rank 1 has no process for the first ``down`` resolutions (the job
    restarting from the previous failure)."""

    def __init__(self, down: int) -> None:
        self.down = down

    def resolve(self, target: dict) -> Any:
        from chaos.model.targets import ResolvedTarget, TargetUnavailable

        if self.down > 0:
            self.down -= 1
            raise TargetUnavailable("rank 1 has no live process at injection time")
        return ResolvedTarget(ranks=(1,), pids={1: 4242})


class _Context:
    def __init__(self) -> None:
        self.emitted: list[tuple[str, dict]] = []

    def emit(self, kind: str, **fields: Any) -> None:
        self.emitted.append((kind, fields))


def test_a_repeated_failure_due_during_a_restart_waits_for_its_target_and_keeps_its_order(tmp_path: Path) -> None:
    from chaos.runfiles.rollback import FaultJournal
    from chaos.runner.run import _Runner
    from chaos.scenario.load import parse_scenario

    scenario = parse_scenario(
        {"name": "sustained", "workload": {"harness": {"model": {"name": "mlp"}, "steps": 1000}},
         "topology": {"nodes": 2, "ranks_per_node": 1},
         "faults": [{"type": "kill_rank", "target": {"rank": 1}, "trigger": {"poisson": {"mtbf_s": 5, "max_faults": 2}}}]},
        "sustained.yaml")
    runner = _Runner(scenario, str(tmp_path / "run"), 0, True, None)
    runner.cluster, runner.ctx = _Restarting(down=2), _Context()
    runner.fault_journal = FaultJournal(str(tmp_path / "faults.jsonl"))
    first, second = runner.states
    for st in runner.states:
        st.planned.fault.inject = lambda ctx: {"pids": [4242]}
    runner.intake.t_first_step = -1e9  # both occurrences are long due
    assert runner._due(first) and not runner._due(second)  # in order
    runner._inject(first)
    runner._inject(first)
    assert not first.fired and first.deferred_since is not None and runner.status == "running"
    assert not runner._due(second)
    runner._inject(first)  # rank 1 lives again
    assert first.fired and first.record["deferred_s"] >= 0 and runner.tool_errors == []
    assert runner._due(second)
    runner._inject(second)
    assert second.fired and "deferred_s" not in second.record
    assert [fields["fault"] for kind, fields in runner.ctx.emitted] == ["f0-kill_rank#1", "f0-kill_rank#2"]


def test_a_single_fault_with_no_live_target_is_still_a_tool_error(tmp_path: Path) -> None:
    from chaos.runfiles.rollback import FaultJournal
    from chaos.runner.run import _Runner
    from chaos.scenario.load import parse_scenario

    scenario = parse_scenario(
        {"name": "once", "workload": {"harness": {"model": {"name": "mlp"}, "steps": 100}},
         "topology": {"nodes": 2, "ranks_per_node": 1},
         "faults": [{"type": "kill_rank", "target": {"rank": 1}, "trigger": {"at_time": 5}}]}, "once.yaml")
    runner = _Runner(scenario, str(tmp_path / "run"), 0, True, None)
    runner.cluster, runner.ctx = _Restarting(down=1), _Context()
    runner.fault_journal = FaultJournal(str(tmp_path / "faults.jsonl"))
    (state,) = runner.states
    runner._inject(state)
    assert state.fired and runner.status == "tool_error" and "no live process" in runner.tool_errors[0]
