"""The metric catalogue is the one place a metric is described: every target of the schema
has a MetricSpec, every spec the reports show has its words, and a metric family registered
from outside the engine (here: a test family) shows up in the journal's metrics, the verdict,
the run's metrics table, JUnit, the suite tables and the regression gate without any other
edit."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.gate import compare_suites, load_suite_record, load_tolerances, render_markdown
from chaos.metrics import (
    FaultMetrics,
    FaultRecord,
    MetricFamily,
    MetricSpec,
    RunInfo,
    RunMetrics,
    Tolerance,
    compute_metrics,
    register_family,
)
from chaos.metrics.catalogue import CORE, gated, spec, specs, target_specs
from chaos.metrics.family import FaultContext, RunContext
from chaos.metrics.registry import families, unregister_family
from chaos.model.scenario import Bound, Targets
from chaos.report import render_junit, write_suite_report
from chaos.report.summary import metric_rows
from chaos.runfiles.record import FaultOutcome, MetricsRecord, RunRecord, ScenarioInfo
from chaos.runner.verdict import judge
from chaos.schema.targets_model import TargetsDoc

# Targets that are not a metric's bound: correctness, attribution, completion.
NOT_METRICS = {"final_state", "attribution", "completes", "data"}


def test_every_target_of_the_schema_is_a_metric_of_the_catalogue() -> None:
    keys = set(TargetsDoc.model_fields) - NOT_METRICS
    assert keys == {s.key for s in target_specs()}
    modes = {"loss_tolerance", "data_max_lost", "data_max_duplicated"}
    assert {f.name for f in dataclasses.fields(Targets)} - NOT_METRICS - modes == keys
    for s in target_specs():
        assert s.target_doc.strip(), f"{s.key}: a target needs its schema description"
        assert TargetsDoc.model_fields[s.key].description


def test_every_metric_the_reports_show_has_its_words() -> None:
    shown = [s for s in specs() if s.title or s.gated or s.target or s.figure_scale is not None]
    assert {"detection_s", "recovery_s", "goodput", "rejected_checkpoints", "sdc_detection_steps"} <= {
        s.key for s in shown}
    for s in shown:
        assert s.label, s.key
        if s.kind == "seconds":
            assert s.unit == "s", f"{s.key}: seconds are written with their unit"
    assert len({s.key for s in specs()}) == len(specs()), "a metric key is described twice"


def test_the_gate_follows_the_catalogue_in_its_order() -> None:
    assert [s.key for s in gated()] == ["detection_s", "recovery_s", "catchup_s", "lost_steps", "goodput",
                                        "false_detections", "wall_s",
                                        # the checkers (families data, freshness, reload), in module-name order
                                        "data_lost", "data_duplicated", "stale_checkpoints", "reload_nonfinite",
                                        "silent_rollback_steps"]
    assert spec("wall_s").tolerance == Tolerance(rel=0.5, abs=30.0, gate=False)


def test_the_families_register_without_the_engine_naming_them() -> None:
    names = [f.name for f in families()]
    assert {"network", "power", "sdc", "storage"} <= set(names)
    assert spec("rejected_checkpoints") in next(f for f in families() if f.name == "storage").specs


def test_a_journal_without_family_values_keeps_the_field_order() -> None:
    """The journal's metrics dict is the dataclasses' fields, in order, and nothing else."""
    fields = [f.name for f in dataclasses.fields(RunMetrics) if f.name != "family_values"]
    m = compute_metrics([], [FaultRecord("f0-kill_rank", "kill_rank", "crash", ["rank-0"], family="process")],
                        RunInfo("completed", 0.0, 1.0, 1, 1))
    data = m.to_dict()
    assert list(data) == fields
    assert list(data["faults"][0]) == [f.name for f in dataclasses.fields(FaultMetrics) if f.name != "family_values"]


# -- a family from outside the engine -------------------------------------------------------


def _toy_fault(ctx: FaultContext) -> dict[str, float]:
    """Seconds from the toy fault to the first ``toy_heal`` event (None: never healed)."""
    heal = next((e for e in ctx.timeline.events if e.get("kind") == "toy_heal" and e["t"] >= ctx.metrics.t_inject),
                None)
    return {"toy_heal_s": None if heal is None else heal["t"] - ctx.metrics.t_inject}


def _toy_run(ctx: RunContext) -> dict[str, int]:
    return {"toy_alarms": sum(1 for e in ctx.timeline.events if e.get("kind") == "toy_alarm")}


TOY = MetricFamily(
    "toy",
    specs=(
        MetricSpec("toy_heal_s", "toy heal", "seconds", "s", "fault", target="bound",
                   missing_reason=lambda fm: f"fault {fm.fault_id} never healed",
                   target_doc="Toy fault -> first toy_heal event, seconds."),
        MetricSpec("toy_alarms", "toy alarms", "count", tolerance=Tolerance(rel=0.0, abs=0), title="Toy alarms",
                   meaning="toy_alarm events", target="bound", target_doc="toy_alarm events of the run."),
    ),
    fault_metrics=_toy_fault,
    run_metrics=_toy_run,
)


@pytest.fixture
def toy() -> Iterator[MetricFamily]:
    register_family(TOY)
    try:
        yield TOY
    finally:
        unregister_family(TOY.name)
    assert spec("toy_alarms") is None


def _toy_run_metrics(alarms: int, heal_at: float | None = 3.0) -> RunMetrics:
    events = [{"t": float(t), "src": "rank-0", "kind": "step_end", "incarnation": 0, "step": t} for t in range(1, 6)]
    events += [{"t": 2.5 + i / 10, "src": "rank-0", "kind": "toy_alarm"} for i in range(alarms)]
    if heal_at is not None:
        events.append({"t": heal_at, "src": "rank-0", "kind": "toy_heal"})
    record = FaultRecord("f0-toy", "toy", "slow", ["rank-0"], t_inject=2.0, family="toy")
    return compute_metrics(events, [record], RunInfo("completed", 0.0, 5.5, 5, 1))


def _journal(m: RunMetrics, scenario: str = "toy-scenario", repeat: int = 0) -> RunRecord:
    verdict = judge(Targets.with_bounds({"toy_alarms": Bound(max=0), "toy_heal_s": Bound(max=0.5)}), m)
    return RunRecord(scenario=ScenarioInfo(name=scenario), repeat_index=repeat, status="completed",
                     run_dir=f"/r/suite/{scenario}/{repeat}", faults=[FaultOutcome(fault_id="f0-toy", type="toy")],
                     metrics=MetricsRecord.of(m), verdict=verdict, wall_s=5.5)


def test_a_registered_family_is_measured_and_judged(toy) -> None:
    m = _toy_run_metrics(alarms=2)
    assert m.toy_alarms == 2 and m.faults[0].toy_heal_s == pytest.approx(1.0)
    data = m.to_dict()
    assert data["toy_alarms"] == 2 and list(data)[-1] == "toy_alarms"  # after every engine field
    assert data["faults"][0]["toy_heal_s"] == pytest.approx(1.0)

    verdict = judge(Targets.with_bounds({"toy_alarms": Bound(max=0), "toy_heal_s": Bound(max=0.5)}), m)
    reasons = verdict.reasons()
    assert "toy alarms 2 > target 0" in reasons
    assert "f0-toy: toy heal 1.0 s > target 0.5 s" in reasons
    never = judge(Targets.with_bounds({"toy_heal_s": Bound(max=5)}), _toy_run_metrics(0, heal_at=None))
    assert never.reasons() == ["fault f0-toy never healed (target toy_heal_s <= 5 s)"]

    # The record (what the pytest plugin's results hold) reads it back, as an attribute.
    back = MetricsRecord.model_validate(data)
    assert back.toy_alarms == 2 and back.faults[0].toy_heal_s == pytest.approx(1.0)


def test_a_registered_family_shows_in_the_reports_and_the_gate(toy, tmp_path: Path) -> None:
    journal = _journal(_toy_run_metrics(alarms=2))
    assert ("Toy alarms", "2", "toy_alarm events") in metric_rows(journal)
    junit = render_junit([journal], "suite")
    assert "toy alarms: 2" in junit and "toy alarms 2 &gt; target 0" in junit

    base = tmp_path / "base"
    write_suite_report(str(base), [_journal(_toy_run_metrics(0), repeat=i) for i in range(2)], "suite")
    cur = tmp_path / "cur"
    write_suite_report(str(cur), [_journal(_toy_run_metrics(3), repeat=i) for i in range(2)], "suite")
    assert "toy_alarms" in (cur / "suite.md").read_text()
    comparison = compare_suites(load_suite_record(str(base)), load_suite_record(str(cur)), load_tolerances(None))
    [row] = [r for r in comparison.rows if r.metric == "toy_alarms"]
    assert row.result == "regression" and row.baseline == 0 and row.current == 3
    assert "toy-scenario toy_alarms" in render_markdown(comparison)


def test_core_specs_are_not_replaced_by_a_family() -> None:
    assert all(spec(s.key) is s for s in CORE)


def test_a_family_from_an_installed_package_comes_through_its_entry_point(monkeypatch) -> None:
    """Another package names its MetricFamily in the entry-point group; a broken one is logged
    and skipped, the built-in families stay."""
    from importlib.metadata import EntryPoint

    import chaos.util.registry
    from chaos.metrics import registry

    points = [EntryPoint("toy", f"{__name__}:TOY", registry.ENTRY_POINT_GROUP),
              EntryPoint("broken", "no_such_module_here:FAMILY", registry.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(chaos.util.registry, "entry_points",
                        lambda group: points if group == registry.ENTRY_POINT_GROUP else [])
    monkeypatch.setattr(registry.METRIC_FAMILIES, "items", {})
    monkeypatch.setattr(registry.METRIC_FAMILIES, "_entry_points_read", False)
    names = [f.name for f in families()]
    assert names[-1] == "toy" and {"network", "power", "sdc", "storage"} <= set(names)
    assert spec("toy_alarms") is TOY.specs[1] and spec("toy_alarms") in gated()
