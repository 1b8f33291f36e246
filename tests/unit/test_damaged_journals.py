"""The controller's own files damaged: a torn or garbage line in the fault journal, a garbage
entry in the live-run registry, a full disk under the controller's events and journal, two
controllers given one run directory. Whatever is damaged is named (file:line), what can be
read is still used, and nothing raises past a revert or prints a traceback."""

from __future__ import annotations

import errno
import json
import os
from dataclasses import asdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from chaos.cli import cli
from chaos.errors import EXIT_TOOL_FAILED, ToolError
from chaos.runfiles.journal_writer import JournalWriter
from chaos.runfiles.record import RunStart, load_run_record, write_run_start
from chaos.runfiles.resources import RunResources, scratch_base
from chaos.runfiles.rollback import (
    FaultJournal,
    active_runs,
    append_record,
    read_journal,
    register_run,
    registry_problems,
    state_dir,
)
from chaos.runfiles.rundir import RunDir, RunDirLock
from chaos.runner.aborted import write_aborted_record
from chaos.runner.cleanup import find_leftovers
from chaos.runner.output import ControllerEvents, describe_os_error
from chaos.runner.plan import make_plan
from chaos.scenario.load import parse_scenario

GARBAGE = b"\x00\x17garbage{{ not json\n"


def _journal_with_damage(path: Path) -> FaultJournal:
    """f0 applied and reverted, f1 applied and pending; garbage lines between and a torn end."""
    journal = FaultJournal(str(path))
    journal.apply("f0-container_pause", "container_pause", {"nodes": [0]})
    with open(path, "ab") as fh:
        fh.write(GARBAGE)                                            # line 2
        fh.write(b"[1, 2, 3]\n")                                     # line 3: JSON, no record
        fh.write(b'{"op": "apply", "type": "hang_rank"}\n')          # line 4: no fault_id
    journal.reverted("f0-container_pause")                           # line 5
    journal.apply("f1-container_pause", "container_pause", {"nodes": [1]})  # line 6
    with open(path, "ab") as fh:
        fh.write(b'{"t": 1, "op": "reverted", "fault_id": "f1-cont')  # line 7: torn, no newline
    return journal


def test_a_damaged_fault_journal_names_each_bad_line_and_keeps_every_good_record(tmp_path: Path) -> None:
    path = tmp_path / "fault_journal.jsonl"
    journal = _journal_with_damage(path)
    damaged = [str(d) for d in journal.damaged()]
    assert damaged == [f"{path}:2: not JSON: {GARBAGE[:60]!r}",
                       f"{path}:3: not a JSON object: b'[1, 2, 3]\\n'",
                       f"{path}:4: apply record without a fault_id",
                       f"{path}:7: torn (no end of line)"]
    assert [(r["op"], r["fault_id"]) for r in journal.records()] == [
        ("apply", "f0-container_pause"), ("reverted", "f0-container_pause"), ("apply", "f1-container_pause")]
    assert [f["fault_id"] for f in journal.pending()] == ["f1-container_pause"]


def test_a_record_appended_after_a_torn_line_starts_a_line_of_its_own(tmp_path: Path) -> None:
    """Glued to a torn line, a record would be lost with it: cleanup's ``reverted`` and the
    run's journal writer both start a new line first."""
    path = tmp_path / "fault_journal.jsonl"
    path.write_bytes(b'{"t": 1, "op": "apply", "fault_id": "f0-x", "type": "kill_rank"}\n{"t": 2, "op": "appl')
    append_record(str(path), {"op": "reverted", "fault_id": "f0-x", "error": None})
    writer = JournalWriter(str(path))
    path.write_bytes(path.read_bytes() + b"torn again")
    writer.wait(writer.append({"op": "apply", "fault_id": "f1-y", "type": "kill_rank"}))
    writer.close()
    records, damaged = read_journal(str(path))
    assert [(r["op"], r["fault_id"]) for r in records] == [("apply", "f0-x"), ("reverted", "f0-x"), ("apply", "f1-y")]
    torn = b'{"t": 2, "op": "appl\n'
    assert [(d.line, d.problem) for d in damaged] == [(2, f"not JSON: {torn!r}"), (4, f"not JSON: {b'torn again' + chr(10).encode()!r}")]


def _dead_run(tmp_path: Path, run_id: str) -> Path:
    run_dir = tmp_path / run_id
    RunResources(run_id, str(run_dir)).acquire(
        "scratch_dir", {"path": os.path.join(scratch_base(), run_id, "node-0")})
    (Path(state_dir()) / f"{run_id}.json").write_text(json.dumps(
        {"run_id": run_id, "run_dir": str(run_dir), "pid": os.getpid(), "controller": "999999999:1"}))
    return run_dir


def test_cleanup_reverts_what_a_damaged_journal_still_says_and_names_the_damage(
        tmp_path: Path, own_machine: Path) -> None:
    run_dir = _dead_run(tmp_path, "trainchaos-torn")
    path = Path(RunDir(str(run_dir)).fault_journal)
    _journal_with_damage(path)

    check = CliRunner().invoke(cli, ["cleanup", "--check"])
    assert check.exit_code == 1 and "1 fault(s) not reverted" in check.output
    assert f"  damaged fault journal line {path}:2: not JSON" in check.output
    assert f"  damaged fault journal line {path}:7: torn (no end of line)" in check.output

    result = CliRunner().invoke(cli, ["cleanup"])
    assert result.exit_code == 0 and result.exception is None, result.output
    assert "Traceback" not in result.output
    assert "trainchaos-torn: reverted f1-container_pause (container_pause)" in result.output
    assert f"trainchaos-torn: skipped a damaged line of the fault journal: {path}:4: apply record without" \
        in result.output
    assert "trainchaos-torn: released 1 resource(s)" in result.output
    assert FaultJournal(str(path)).pending() == [] and active_runs() == []
    assert find_leftovers() == []


def test_a_run_record_is_built_from_a_damaged_journal(tmp_path: Path) -> None:
    """What ``cleanup`` writes for a killed run reads the journal's good records only."""
    scenario = parse_scenario({"name": "torn", "seed": 1, "topology": {"nodes": 1, "ranks_per_node": 2},
                               "faults": [{"type": "kill_rank", "target": {"rank": 1},
                                           "trigger": {"at_step": 3}}]}, str(tmp_path / "torn.yaml"))
    rundir = RunDir.of(str(tmp_path / "run"))
    os.makedirs(rundir.events)
    data = asdict(scenario)
    data["faults"] = [asdict(f) for f in scenario.faults]
    write_run_start(rundir, RunStart.model_validate({
        "run_id": "trainchaos-torn", "scenario": data, "seed": 1, "plan_seed": 1,
        "plan": [p.to_dict() for p in make_plan(scenario, 1)], "with_faults": True,
        "started_at": "2026-12-06T00:00:00+00:00", "t_start": 1000.0, "steps_target": 20, "world_size": 2,
        "timeout_s": 60, "backend": {"name": "local", "options": {}}, "repeat_index": 0}))
    Path(rundir.events, "rank-0.i0.1.jsonl").write_text(
        '{"t": 1001, "src": "rank-0", "incarnation": 0, "kind": "step_end", "step": 1}\n42\n"x"\n{"kind": "no time"}\n')
    path = Path(rundir.fault_journal)
    path.write_bytes(b'{"t": 1001.5, "op": "apply", "fault_id": "f0-kill_rank", "type": "kill_rank", "target": 7}\n'
                     + GARBAGE
                     + b'{"t": 1002, "op": "apply", "fault_id": "f1-kill_rank", "type": "kill_rank", '
                       b'"target": {"ranks": [1]}}\n')
    assert write_aborted_record(rundir.path, "killed") == rundir.run_record
    record = load_run_record(rundir.run_record)
    assert record.status == "aborted" and [f.fault_id for f in record.faults] == ["f1-kill_rank"]


# ----------------------------------------------------------------------------- the live-run registry


def test_a_garbage_registry_entry_is_named_and_the_other_runs_are_still_cleaned(
        tmp_path: Path, own_machine: Path) -> None:
    _dead_run(tmp_path, "trainchaos-fine")
    garbage = Path(state_dir()) / "trainchaos-garbage.json"
    garbage.write_bytes(GARBAGE)
    no_dir = Path(state_dir()) / "trainchaos-nodir.json"
    no_dir.write_text('{"run_id": "trainchaos-nodir"}')
    assert [r["run_id"] for r in active_runs()] == ["trainchaos-fine"]
    assert registry_problems() == [f"{garbage}:1: damaged registry entry (not JSON: Expecting value: "
                                   "line 1 column 1 (char 0))",
                                   f"{no_dir}:1: damaged registry entry (not an object with a run_id and a run_dir)"]
    check = CliRunner().invoke(cli, ["cleanup", "--check"])
    assert check.exit_code == 1 and f"damaged registry entry {garbage}:1:" in check.output

    result = CliRunner().invoke(cli, ["cleanup"])
    assert result.exit_code == EXIT_TOOL_FAILED, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    assert "trainchaos-fine: released 1 resource(s)" in result.output
    assert f"FAILED: {garbage}:1: damaged registry entry" in result.output
    assert garbage.exists(), "a damaged entry is left for a person to look at"


def test_a_registry_entry_is_written_whole_or_not_at_all(tmp_path: Path, monkeypatch) -> None:
    """A full state directory: the entry is not there, rather than half there."""
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("chaos.util.fileio.os.fsync", full)
    with pytest.raises(OSError):
        register_run("trainchaos-full", str(tmp_path / "run"))
    assert os.listdir(state_dir()) == [] and registry_problems() == []


# ----------------------------------------------------------------------------- a full or failing disk


def _dev_full(path: Path) -> None:
    """``path`` as a file on a full disk: every write to /dev/full fails with ENOSPC."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to("/dev/full")


def test_the_controllers_events_on_a_full_disk_are_kept_as_a_failure_never_raised(tmp_path: Path) -> None:
    events = tmp_path / "events"
    _dev_full(events / f"injector.i0.{os.getpid()}.jsonl")
    stream = ControllerEvents(str(events), "injector", 0)
    stream.emit("job_stop", status="tool_error")  # from a teardown's finally: must not raise
    stream.emit("job_end", status="tool_error")
    stream.close()
    assert stream.failure is not None and stream.failure.errno == errno.ENOSPC
    assert describe_os_error(stream.failure) == \
        f"{events}/injector.i0.{os.getpid()}.jsonl: No space left on device (ENOSPC)"


def test_a_fault_journal_on_a_full_disk_fails_its_waiters_and_says_why(tmp_path: Path) -> None:
    path = tmp_path / "fault_journal.jsonl"
    _dev_full(path)
    writer = JournalWriter(str(path))
    seq = writer.append({"op": "apply", "fault_id": "f0-x", "type": "kill_rank"})  # never raises
    assert writer.failure is not None and writer.failure.errno == errno.ENOSPC
    with pytest.raises(OSError, match="No space left on device"):
        writer.wait(seq)
    assert describe_os_error(writer.failure, str(path)) == f"{path}: No space left on device (ENOSPC)"
    with pytest.raises(OSError):
        writer.close()


def test_describe_os_error_names_an_eio_and_its_file() -> None:
    exc = OSError(errno.EIO, os.strerror(errno.EIO), "/out/run/journal.json")
    assert describe_os_error(exc) == "/out/run/journal.json: Input/output error (EIO)"


# ----------------------------------------------------------------------------- one run directory, one controller


def test_a_second_controller_is_refused_the_run_directory_and_told_who_holds_it(tmp_path: Path) -> None:
    run_dir = str(tmp_path / "run")
    first = RunDirLock.acquire(run_dir, "trainchaos-first")
    Path(run_dir, "run.json").write_text("{}")
    with pytest.raises(ToolError, match=rf"{run_dir} is in use by another trainchaos controller "
                                        rf"\(pid {os.getpid()}, run trainchaos-first\)"):
        RunDirLock.acquire(run_dir, "trainchaos-second")
    assert Path(run_dir, "run.json").exists(), "the refused one touched nothing"
    first.release()
    RunDirLock.acquire(run_dir, "trainchaos-third").release()  # free once the first let go


def test_a_garbage_live_mark_counts_for_nothing_and_is_pruned(tmp_path: Path) -> None:
    from chaos.runfiles.rollback import live_dir, live_run_ids, prune_live_marks

    os.makedirs(live_dir(), exist_ok=True)
    for name, text in (("a.json", "[1, 2]"), ("b.json", "{torn"), ("c.json", "7")):
        Path(live_dir(), name).write_text(text)
    register_run("trainchaos-alive", str(tmp_path / "run"))
    assert live_run_ids() == {"trainchaos-alive"}
    assert prune_live_marks() == 3
    assert sorted(os.listdir(live_dir())) == ["trainchaos-alive.json"]
