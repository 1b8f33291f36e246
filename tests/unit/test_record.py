"""chaos.runfiles.record: the run record's one constructor, writer and loader, and its versions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator

from chaos.cli import cli
from chaos.metrics import FaultRecord
from chaos.runfiles.record import (
    SCHEMA_VERSION,
    MetricsRecord,
    RunRecord,
    RunRecordError,
    RunStart,
    Verdict,
    build_run_record,
    fault_outcome,
    load_run_record,
    load_run_start,
    run_record_json_schema,
    write_run_record,
    write_run_start,
)
from chaos.runfiles.rundir import RunDir
from chaos.runner.aborted import write_aborted_record

V1_RUN = Path(__file__).parent / "data" / "run_v1"
"""A run directory's ``journal.json`` and ``run.json`` as trainchaos 0.1.0 wrote them, before
``schema_version`` (a docker game-day job, no faults planned by the run itself): the journal
is refused, the start record still read."""


def _start(tmp_path: Path, **over) -> RunStart:
    data = {
        "run_id": "trainchaos-0123456789", "seed": 7, "plan_seed": 7, "with_faults": True,
        "scenario": {"name": "kill-rank", "path": "scenarios/smoke/kill.yaml", "seed": 7,
                     "topology": {"nodes": 2, "ranks_per_node": 2}, "workload": {"harness": {"steps": 50}},
                     "targets": {"detection_s": {"max": 2}},
                     "faults": [{"type": "kill_rank", "target": {"rank": 3}, "trigger": {"at_step": 20}}]},
        "plan": [{"fault_id": "f0-kill_rank", "type": "kill_rank", "target": {"rank": 3},
                  "planned_target": {"ranks": [3], "nodes": [1]}, "trigger": {"at_step": 20},
                  "offset_s": None, "fires": True, "params": {"signal": "SIGKILL"}}],
        "started_at": "2026-12-01T10:00:00+00:00", "t_start": 1000.0, "steps_target": 50,
        "world_size": 4, "timeout_s": 120.0, "backend": {"name": "local", "options": {}},
        "repeat_index": 1, "baseline": {"digest": "abc", "wall_s": 9.0, "run_dir": "/r/baseline",
                                        "status": "completed"},
    }
    data.update(over)
    start = RunStart.model_validate(data)
    write_run_start(str(tmp_path), start)
    return start


def _fault() -> FaultRecord:
    return FaultRecord(fault_id="f0-kill_rank", type="kill_rank", failure_class="crash",
                       target_srcs=["rank-3"], t_inject=1005.0, planned_step=20)


def _finished(tmp_path: Path, status: str = "completed", **over) -> RunRecord:
    return build_run_record(
        _start(tmp_path), run_dir=str(tmp_path), status=status, t_end=1030.25,
        faults=[fault_outcome(_fault(), step_at_inject=21, precision="next_step", mechanism="injector",
                              details={"pid": 4242})],
        metrics=MetricsRecord.model_validate(
            {"detection_s": 0.3, "wall_s": 30.25, "faults": [{"fault_id": "f0-kill_rank", "detection_s": 0.3}]}),
        verdict=Verdict.model_validate({"passed": True, "checks": [{"name": "detection_s", "ok": True, "value": 0.3,
                                        "bound": {"max": 2}, "reason": "detection_s 0.3 s <= 2 s"}]}),
        versions={"trainchaos": "0.1.0", "torch": "2.13.0", "python": "3.11.7", "platform": "Linux"},
        ended_at="2026-12-01T10:00:30+00:00", **over)


def _validator() -> Draft202012Validator:
    return Draft202012Validator(run_record_json_schema())


def test_round_trip_keeps_every_key_and_value(tmp_path):
    record = _finished(tmp_path)
    path = write_run_record(str(tmp_path), record)
    assert path == RunDir(str(tmp_path)).run_record
    on_disk = json.loads(Path(path).read_text())
    # Every key of the record is written (nothing left to a reader's default) ...
    assert set(on_disk) == set(RunRecord.model_fields)
    assert set(on_disk["faults"][0]) >= {"fault_id", "t_inject", "precision", "details", "error", "resolved_target"}
    # ... with today's keys and values, which reports and CI scripts read.
    assert on_disk["schema_version"] == SCHEMA_VERSION and on_disk["format"] == 1
    assert on_disk["status"] == "completed" and on_disk["wall_s"] == 30.25
    assert on_disk["repeat_index"] == 1 and on_disk["baseline"]["digest"] == "abc"
    assert on_disk["faults"][0]["step_at_inject"] == 21 and on_disk["faults"][0]["details"] == {"pid": 4242}
    assert on_disk["metrics"]["faults"][0]["detection_s"] == 0.3
    loaded = load_run_record(str(tmp_path))
    assert loaded == record
    assert loaded.to_dict() == on_disk


def test_a_journal_of_the_pre_release_is_refused_with_its_location(tmp_path):
    v1 = json.loads((V1_RUN / "journal.json").read_text())
    assert "schema_version" not in v1
    # 0.1.0 had no users to keep: its journal is not upgraded but refused, naming the file and
    # the key, as bad input (exit 2).
    with pytest.raises(RunRecordError, match=r"run_v1/journal.json: schema_version: missing") as err:
        load_run_record(str(V1_RUN / "journal.json"))
    assert err.value.exit_code == 2 and "0.1.0" in str(err.value)


@pytest.mark.parametrize(("journal", "match"), [
    ({"schema_version": SCHEMA_VERSION + 1, "status": "completed", "scenario": {"name": "x"}},
     rf"journal.json: schema_version: {SCHEMA_VERSION + 1} is newer than this trainchaos reads "
     rf"\({SCHEMA_VERSION}\); upgrade trainchaos"),
    ({"schema_version": "two", "status": "completed", "scenario": {"name": "x"}},
     r"journal.json: schema_version: 'two' is not a run record version"),
    ({"format": 2, "status": "completed", "scenario": {"name": "x"}},
     r"journal.json: schema_version: missing"),
    ({"schema_version": SCHEMA_VERSION - 1, "status": "completed", "scenario": {"name": "x"}},
     r"journal.json: schema_version: 1 is not a run record version this trainchaos reads"),
    ({"schema_version": SCHEMA_VERSION, "status": "exploded", "scenario": {"name": "x"}, "faults": [{"fault_id": "f0", "type": "t", "t_inject": "soon"}]},
     r"journal.json: status: Input should be 'completed'.*; faults\[0\]\.t_inject: Input should be a valid number"),
    ([1, 2], r"journal.json: not a run record"),
])
def test_a_journal_this_version_cannot_read_is_a_located_error(tmp_path, journal, match):
    (tmp_path / "journal.json").write_text(json.dumps(journal))
    with pytest.raises(RunRecordError, match=match) as err:
        load_run_record(str(tmp_path))
    assert str(err.value).startswith(str(tmp_path / "journal.json"))
    assert err.value.exit_code == 2


def test_aborted_and_tool_error_records_come_from_the_one_constructor(tmp_path):
    run_dir = tmp_path / "aborted"
    _start(run_dir)
    # The fault journal and the events a killed controller leaves behind.
    Path(RunDir(str(run_dir)).fault_journal).write_text(json.dumps(
        {"op": "apply", "fault_id": "f0-kill_rank", "type": "kill_rank", "t": 1005.0,
         "target": {"ranks": [3], "nodes": [1]}}) + "\n")
    events = Path(RunDir(str(run_dir)).events)
    events.mkdir()
    (events / "rank-0.0.jsonl").write_text("".join(json.dumps(e) + "\n" for e in (
        {"t": 1001.0, "src": "rank-0", "incarnation": 0, "kind": "step_end", "step": 1},
        {"t": 1012.5, "src": "rank-0", "incarnation": 0, "kind": "step_end", "step": 30})))
    path = write_aborted_record(str(run_dir), "the controller was gone")
    assert path == RunDir(str(run_dir)).run_record
    aborted = json.loads(Path(path).read_text())
    assert aborted["status"] == "aborted" and aborted["verdict"] is None and aborted["ended_at"] is None
    assert aborted["wall_s"] == 12.5 and aborted["repeat_index"] == 1  # from run.json
    assert aborted["faults"][0]["target_srcs"] == ["rank-3", "node-1"]
    assert aborted["journal_written_by"].startswith("trainchaos cleanup at ")
    assert write_aborted_record(str(run_dir), "again") is None, "a run's own record is never replaced"

    tool_error = build_run_record(
        _start(tmp_path / "tool"), run_dir=str(tmp_path / "tool"), status="tool_error", t_end=1001.0,
        faults=[], metrics=None, verdict=None, versions={"trainchaos": "0.1.0"}, error="f0: inject failed",
        tool_errors=["f0: inject failed"], traceback="Traceback ...").to_dict()
    finished = _finished(tmp_path / "done").to_dict()
    assert set(aborted) == set(tool_error) == set(finished) == set(RunRecord.model_fields)
    for record in (aborted, tool_error, finished):
        assert not list(_validator().iter_errors(record)), record["status"]


def test_an_aborted_record_counts_an_armed_fault_only_once_its_applied_followed(tmp_path):
    run_dir = tmp_path / "aborted"
    _start(run_dir)
    # Two faults journaled ahead of their time (chaos.runner.lifecycle.arm); the controller was
    # killed after the first was injected and before the second was due.
    Path(RunDir(str(run_dir)).fault_journal).write_text("".join(json.dumps(r) + "\n" for r in (
        {"op": "apply", "fault_id": "f0#1", "type": "hang_rank", "t": 1004.0, "target": {"rank": 1}, "armed": 1005.0},
        {"op": "apply", "fault_id": "f0#2", "type": "hang_rank", "t": 1004.1, "target": {"rank": 1}, "armed": 1007.0},
        {"op": "applied", "fault_id": "f0#1", "t": 1005.01, "details": {"stopped_pids": [42]},
         "target": {"ranks": [1], "nodes": [0], "pids": {"1": 42}}, "t_inject": 1005.002})))
    Path(RunDir(str(run_dir)).events).mkdir()
    aborted = json.loads(Path(write_aborted_record(str(run_dir), "gone")).read_text())
    assert [(f["fault_id"], f["t_inject"], f["target_srcs"]) for f in aborted["faults"]] == [
        ("f0#1", 1005.002, ["rank-1", "node-0"])]


def test_aborted_record_from_a_previous_version_run_json(tmp_path):
    run_dir = tmp_path / "0"
    run_dir.mkdir()
    shutil.copy(V1_RUN / "run.json", run_dir / "run.json")
    assert load_run_start(str(run_dir)).repeat_index == 0  # not in a v1 run.json
    path = write_aborted_record(str(run_dir), "gone")
    record = load_run_record(path)
    assert record.status == "aborted" and record.run_id == json.loads((V1_RUN / "run.json").read_text())["run_id"]
    assert not list(_validator().iter_errors(record.to_dict()))


def test_a_malformed_run_json_is_an_error_not_a_silent_skip(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "x"}))
    with pytest.raises(RunRecordError, match=r"run.json: scenario: Field required"):
        write_aborted_record(str(tmp_path), "gone")
    assert write_aborted_record(str(tmp_path / "nothing"), "gone") is None  # no run.json: nothing to do


def test_schema_command_prints_the_record_schema(tmp_path):
    result = CliRunner().invoke(cli, ["schema", "--journal"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.output)
    assert schema["$id"] == "urn:trainchaos:run-record"
    validator = Draft202012Validator(schema)
    assert not list(validator.iter_errors(_finished(tmp_path).to_dict()))
    # It describes this version: a journal of the previous one lacks its new keys, and a
    # status no run has is refused.
    v1 = json.loads((V1_RUN / "journal.json").read_text())
    assert {e.message for e in validator.iter_errors(v1)} >= {"'schema_version' is a required property"}
    assert list(validator.iter_errors({**_finished(tmp_path).to_dict(), "status": "exploded"}))
    both = CliRunner().invoke(cli, ["schema", "--journal", "--markdown"])
    assert both.exit_code == 2 and "exclude each other" in both.output


def test_the_metrics_section_is_typed_with_the_engines_fields_in_their_order():
    from dataclasses import fields

    from chaos.metrics import FaultMetrics, RunMetrics
    from chaos.runfiles.record import FaultMetricsRecord

    # The journal's keys are the engine's dataclass fields in order (family values after):
    # the record's models must declare the same, or a rewritten journal reorders its keys.
    for model, engine in ((MetricsRecord, RunMetrics), (FaultMetricsRecord, FaultMetrics)):
        assert list(model.model_fields) == [f.name for f in fields(engine) if f.name != "family_values"]


def test_metrics_read_as_attributes_keep_their_json_and_a_familys_own_keys(tmp_path):
    # In the engine's order, as a run writes them.
    data = {"goodput": 0.5, "faults": [{"fault_id": "f0", "detection_s": 0.25, "lost_steps": 4, "toy_heal_s": 1.5}],
            "recovery_s": 3, "healthy": True, "toy_alarms": 2}
    metrics = MetricsRecord.model_validate(data)
    assert metrics.recovery_s == 3 and metrics.faults[0].detection_s == 0.25 and metrics.digest_match is None
    assert metrics.toy_alarms == 2 and metrics.faults[0].toy_heal_s == 1.5  # a family's, as attributes
    assert metrics.by_fault()["f0"].lost_steps == 4 and metrics.has("goodput") and not metrics.has("catchup_s")
    record = RunRecord.from_dict({"schema_version": SCHEMA_VERSION, "scenario": {"name": "s"}, "status": "completed",
                                  "metrics": data})
    written = json.loads(Path(write_run_record(str(tmp_path), record)).read_text())["metrics"]
    # Keys as loaded (none padded), an int still an int, the family's keys after the fields.
    assert json.dumps(written) == json.dumps(data)
    assert load_run_record(str(tmp_path)).metrics == metrics


def test_judge_returns_the_records_own_verdict():
    import chaos.runner.verdict
    from chaos.metrics import RunInfo, compute_metrics
    from chaos.model.scenario import Bound, Targets

    assert chaos.runner.verdict.Verdict is Verdict  # one verdict type, not three
    metrics = compute_metrics([], [], RunInfo("completed", 0.0, 10.0, 5, 1))
    verdict = chaos.runner.verdict.judge(Targets(recovery_s=Bound(max=1)), metrics)
    assert isinstance(verdict, Verdict) and verdict.passed is False
    record = RunRecord.from_dict({"schema_version": SCHEMA_VERSION, "scenario": {"name": "s"}, "status": "completed",
                                  "verdict": verdict.model_dump()})
    assert record.verdict == verdict and record.outcome == "fail" and record.reasons() == verdict.reasons()
