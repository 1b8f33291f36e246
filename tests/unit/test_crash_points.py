"""The durability sweep's parts (issue 22 item 3): the layer counts the boundaries of one save
and freezes at one; a power loss there leaves the image a sweep audits; the classifier."""

from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

from chaos.errors import ScenarioError
from chaos.faults.storage.crash import save_globs
from chaos.model.scenario import Workload as WorkloadSpec
from chaos.runfiles.record import RunRecord
from chaos.runner.crashsweep import classify, own_ops, parse_points, process_points
from chaos.storage.crashpoints import CrashPoint
from chaos.storage.faultfs import FaultFS
from chaos.storage.rules import Caller
from chaos.workload.base import CheckpointAudit
from chaos.workload.harness import HarnessWorkload


@pytest.fixture
def fs(tmp_path):
    backing = tmp_path / "tier"
    backing.mkdir()
    fd = os.open(backing, os.O_RDONLY | os.O_DIRECTORY)
    layer = FaultFS(fd, lambda: Caller(rank=0, node=0), track_unfsynced=True)
    yield layer
    layer.shutdown()
    os.close(fd)


def _save(fs: FaultFS, step: int, fsync: bool = True) -> None:
    """A checkpoint save as the harness does it: tmp dir, file, fsync, rename, dir fsync."""
    tmp, final = f"/.tmp-step-{step:08d}-1", f"/step-{step:08d}"
    fs.mkdir(tmp, 0o755)
    fh = fs.create(f"{tmp}/state.pt", 0o644, os.O_WRONLY)
    fs.write(f"{tmp}/state.pt", b"S" * 64, 0, fh)
    if fsync:
        fs.fsync(f"{tmp}/state.pt", 0, fh)
    fs.release(f"{tmp}/state.pt", fh)
    fs.rename(tmp, final)
    dh = fs.opendir("/")
    fs.fsyncdir("/", 0, dh)
    fs.releasedir("/", dh)


def test_the_trace_counts_the_boundaries_of_one_save_only(fs):
    events: list[tuple[str, dict]] = []
    fs.arm_crash_point({"save": "*step-00000020*", "after": -1}, lambda kind, **f: events.append((kind, f)))
    for step in (10, 20, 30):
        _save(fs, step)
    assert [(f["seq"], f["op"], f["path"]) for _, f in events] == [
        (1, "fsync", ".tmp-step-00000020-1/state.pt"),
        (2, "rename", ".tmp-step-00000020-1 -> step-00000020"),
        (3, "fsync", "."),
    ]


def _file_save(fs: FaultFS, step: int) -> None:
    """A plain script's torch.save: a tmp file, written, renamed into place (no fsync)."""
    tmp, final = f"/step-{step}.pt.tmp", f"/step-{step}.pt"
    fh = fs.create(tmp, 0o644, os.O_WRONLY)
    fs.write(tmp, b"S" * 64, 0, fh)
    fs.release(tmp, fh)
    fs.rename(tmp, final)


def test_the_trace_of_a_scripts_file_save_ends_where_its_next_save_begins(fs):
    from chaos.faults.storage.crash import save_globs

    events: list[tuple[str, dict]] = []
    fs.arm_crash_point({"save": save_globs(20), "after": -1}, lambda kind, **f: events.append((kind, f)))
    for step in (10, 20, 30, 200):
        _file_save(fs, step)
    # Only the save of step 20: not step-200's, not the next save's rename.
    assert [(f["seq"], f["op"], f["path"]) for _, f in events] == [
        (1, "rename", "step-20.pt.tmp -> step-20.pt")]


def test_a_frozen_layer_keeps_the_state_after_boundary_k_and_thaws_on_the_power_loss(fs, tmp_path):
    events: list[tuple[str, dict]] = []
    fs.arm_crash_point({"save": "*step-00000020*", "after": 1, "image_dir": str(tmp_path / "image")},
                       lambda kind, **f: events.append((kind, f)))
    _save(fs, 10)
    failed: list[BaseException] = []

    def writer() -> None:
        try:
            _save(fs, 20, fsync=True)
        except OSError as exc:
            failed.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    deadline = time.monotonic() + 5
    while not events and time.monotonic() < deadline:
        time.sleep(0.01)
    assert events[0][0] == "crash_point" and events[0][1]["after"] == 1
    time.sleep(0.1)
    # Frozen after the file's fsync: the rename never happened.
    assert thread.is_alive() and not (tmp_path / "tier" / "step-00000020").exists()
    fs.drop_unfsynced()  # the power loss: nothing unfsynced to drop here, then the thaw
    thread.join(5)
    assert failed and "lost power" in str(failed[0])  # the frozen rename fails: its caller died
    image = tmp_path / "image"
    assert (image / "step-00000010" / "state.pt").read_bytes() == b"S" * 64
    assert (image / ".tmp-step-00000020-1" / "state.pt").read_bytes() == b"S" * 64
    assert not (image / "step-00000020").exists()
    shutil.rmtree(tmp_path / "tier" / ".tmp-step-00000020-1")  # the restart clears it first
    _save(fs, 20)  # the restarted job saves again: disarmed, it goes through
    assert (tmp_path / "tier" / "step-00000020").is_dir()


def test_after_zero_freezes_before_the_first_boundary():
    events: list[str] = []
    crash = CrashPoint({"save": "*step-00000020*", "after": 0}, lambda kind, **f: events.append(kind))
    assert not crash.before("mkdir", ".tmp-step-00000020-1")
    assert not crash.before("write", ".tmp-step-00000020-1/state.pt")
    assert crash.before("fsync", ".tmp-step-00000020-1/state.pt") and crash.frozen
    assert events == ["crash_point"]


def _harness_save(directory, step: int, *, bug: bool) -> None:
    import torch

    from harness.checkpoint import MODEL, STEP, CheckpointManager

    with CheckpointManager(str(directory), keep=3, mode="sync", every_steps=10, every_seconds=0,
                           is_writer=True, pointer_before_fsync=bug) as mgr:
        mgr.save(step, {MODEL: torch.nn.Linear(2, 2).state_dict(), STEP: step})


def test_the_harness_audit_sees_a_dangling_pointer_and_a_torn_checkpoint(tmp_path):
    _harness_save(tmp_path, 10, bug=False)
    _harness_save(tmp_path, 20, bug=False)
    workload = HarnessWorkload(WorkloadSpec(harness={}))
    audit = workload.audit_checkpoints(str(tmp_path))
    assert audit == CheckpointAudit(complete=(10, 20), torn={}, pointer=20) and not audit.dangling
    (tmp_path / "step-00000020" / "MANIFEST.json").write_bytes(b"")  # what a lost fsync leaves
    audit = workload.audit_checkpoints(str(tmp_path))
    assert audit.complete == (10,) and 20 in audit.torn and audit.dangling


def _ev(t: float, kind: str, **f) -> dict:
    return {"t": t, "kind": kind, "src": f.pop("src", "rank-0"), "incarnation": f.pop("incarnation", 0), **f}


_RUN = [_ev(1, "ckpt_save_end", step=10), *(_ev(1 + s / 100, "step_end", step=s) for s in range(11, 21)),
        _ev(2, "crash_point", after=3)]


def _journal(**metrics) -> RunRecord:
    return RunRecord.from_dict({"schema_version": 2, "scenario": {"name": "crash"}, "status": "completed",
                                "metrics": {"final_digest": "d", "stale_checkpoints": 0, **metrics}})


def test_classify_a_clean_fall_back_is_ok_and_a_dangling_pointer_is_not():
    restart = [_ev(3, "rank_start", incarnation=1), _ev(3.5, "ckpt_load", step=10, incarnation=1)]
    good = CheckpointAudit(complete=(10,), pointer=10)
    assert classify(_journal(), _RUN + restart, good, 20, "d")[0] == ["ok"]
    dangling = CheckpointAudit(complete=(10,), torn={20: "no MANIFEST.json"}, pointer=20)
    outcomes, detail, resumed = classify(_journal(), _RUN + restart, dangling, 20, "d")
    assert outcomes == ["dangling_pointer", "torn"] and resumed == 10
    assert "LATEST names step 20, which is not complete (no MANIFEST.json)" in detail


def test_classify_losing_a_reported_save_or_the_twins_result():
    saved = [*_RUN[:-1], _ev(1.95, "ckpt_save_end", step=20), _RUN[-1]]
    restart = [_ev(3, "rank_start", incarnation=1), _ev(3.5, "ckpt_load", step=10, incarnation=1)]
    outcomes, _, _ = classify(_journal(final_digest="x"), saved + restart, CheckpointAudit(complete=(10,)), 20, "d")
    assert outcomes == ["lost_saved", "wrong_result"]
    assert classify(_journal(), _RUN[:-1], None, 20, "d")[0] == ["not_reached"]


def test_classify_a_restart_that_passes_over_a_complete_newer_checkpoint_lost_it():
    """Lightning resumes from last.ckpt: a crash after step-20.ckpt is whole and before
    last.ckpt names it resumes from step 10 though step 20 was durable (ckpt-chaos's
    LOST_WORK), whether or not the job reported the save before it was killed."""
    restart = [_ev(3, "rank_start", incarnation=1), _ev(3.5, "ckpt_load", step=10, incarnation=1)]
    outcomes, detail, _ = classify(_journal(), _RUN + restart, CheckpointAudit(complete=(10, 20), pointer=10), 20, "d")
    assert outcomes == ["lost_saved"] and "step 20 was complete in the crash image" in detail
    resumed_20 = [_ev(3, "rank_start", incarnation=1), _ev(3.5, "ckpt_load", step=20, incarnation=1)]
    assert classify(_journal(), _RUN + resumed_20, CheckpointAudit(complete=(10, 20)), 20, "d")[0] == ["ok"]


def test_the_sweep_refuses_what_it_cannot_sweep_before_starting_anything(tmp_path):
    from click.testing import CliRunner

    from chaos.cli import cli

    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nworkload: {harness: {steps: 30, checkpoint: {every_steps: 20}}}\n"
                        "topology: {nodes: 2, ranks_per_node: 1}\nfaults: []\n")
    result = CliRunner().invoke(cli, ["run", "--crash-points", str(scenario), "--out", str(tmp_path / "o")])
    assert isinstance(result.exception, ScenarioError) and result.exception.exit_code == 2
    assert "s.yaml: workload.harness.checkpoint.every_steps" in str(result.exception)
    assert "--crash-save-step" in str(result.exception)
    assert not (tmp_path / "o").exists()
    result = CliRunner().invoke(cli, ["run", "--crash-save-step", "20", str(scenario)])
    assert result.exit_code == 2 and "needs --crash-points" in result.output


@pytest.mark.parametrize(("workload", "where", "fragment"), [
    ("{command: python t.py, steps: 30}", "s.yaml: workload.checkpoint_every_steps",
     "declare how often the job saves (workload.checkpoint_every_steps), or give --crash-save-step N"),
    ("{command: python t.py, steps: 30, checkpoint_every_steps: 20}", "s.yaml: workload.checkpoint_every_steps",
     "2 x 20, must come before the last step"),
    ("{command: python t.py, checkpoint_every_steps: 10}", "s.yaml: workload.checkpoint_every_steps",
     "which is not declared"),
])
def test_a_commands_sweep_needs_a_declared_cadence_or_a_save_step_in_dry_run_and_run_alike(
        tmp_path, workload, where, fragment):
    from click.testing import CliRunner

    from chaos.cli import cli

    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"name: s\nworkload: {workload}\ntopology: {{nodes: 1, ranks_per_node: 2}}\n")
    for dry in (["--dry-run"], []):
        result = CliRunner().invoke(cli, ["run", "--crash-points", *dry, str(scenario), "--out", str(tmp_path / "o")])
        assert isinstance(result.exception, ScenarioError) and result.exception.exit_code == 2, result.output
        assert where in str(result.exception) and fragment in str(result.exception), str(result.exception)
        assert not (tmp_path / "o").exists()


def test_a_commands_declared_cadence_chooses_its_second_save(tmp_path):
    from click.testing import CliRunner

    from chaos.cli import cli

    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nworkload: {command: python t.py, steps: 30, checkpoint_every_steps: 10}\n"
                        "topology: {nodes: 1, ranks_per_node: 2}\n")
    result = CliRunner().invoke(cli, ["run", "--crash-points", "--dry-run", str(scenario)])
    assert result.exit_code == 0, result.output
    assert "s: a trace of the save of step 20 (the fault-free twin too)" in result.output
    result = CliRunner().invoke(cli, ["run", "--crash-points", "--crash-save-step", "10", "--dry-run", str(scenario)])
    assert "a trace of the save of step 10" in result.output


def test_a_narrowed_sweep_says_how_many_of_the_power_losses_it_ran():
    from chaos.runner.crashsweep import BoundaryOutcome, SweepResult, sweep_table

    trace = [{"seq": k, "op": "fsync", "path": f"f{k}"} for k in range(1, 9)]
    outcome = {0: ["ok"], 3: ["torn"], 4: ["dangling_pointer", "torn"], 7: ["ok"], 12: ["not_reached"]}
    result = SweepResult("s", 20, trace, [BoundaryOutcome(k, "fsync", f"f{k}", o, "") for k, o in outcome.items()],
                         1.0, "completed", "completed")
    table = sweep_table(result)
    assert "8 boundaries, 5 of 9 power losses" in table[0]
    assert table[-1] == "2/5 boundaries ok; problems after boundaries 3, 4, 12"


def test_crash_after_takes_boundary_numbers_and_only_with_the_sweep(tmp_path):
    from click.testing import CliRunner

    from chaos.cli import cli

    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nworkload: {harness: {steps: 30, checkpoint: {every_steps: 10}}}\n"
                        "topology: {nodes: 2, ranks_per_node: 1}\nfaults: []\n")
    result = CliRunner().invoke(cli, ["run", "--crash-points", "--crash-after", "0,x", str(scenario)])
    assert result.exit_code == 2 and "--crash-after '0,x': give boundary numbers" in result.output
    result = CliRunner().invoke(cli, ["run", "--crash-after", "1", str(scenario)])
    assert result.exit_code == 2 and "--crash-after needs --crash-points" in result.output
    result = CliRunner().invoke(cli, ["run", "--crash-points", "--crash-after", "4,0,4", "--dry-run", str(scenario)])
    assert result.exit_code == 0, result.output
    assert "then one power loss (lose_unfsynced) after each of its durability boundaries 0, 4" in result.output


def test_each_crash_run_arms_the_boundary_and_loses_power_with_the_storage_familys_types():
    """The sweep names no fault type (the storage family's spec says which, FamilySpec.
    crash_sweep); each crash run's scenario, built from them, validates."""
    from pathlib import Path

    from chaos.faults.family import crash_sweep
    from chaos.runner.crashsweep import _arm, _power_loss, _variant
    from chaos.scenario.load import load_suite

    repo = Path(__file__).resolve().parents[2]
    (scenario,) = load_suite([str(repo / "scenarios" / "checkers" / "crash-points-pointer-before-fsync.yaml")])
    run = _variant(scenario, "crash-03", [_arm(20, 3), _power_loss()])
    arm, loss = run.faults
    sweep = crash_sweep()
    assert (arm.type, arm.params["after"], arm.params["save_step"]) == (sweep.arm_type, 3, 20)
    assert loss.type == sweep.power_loss_type and loss.trigger.event == sweep.event
    assert arm.target == loss.target == {"node": 0}


# -- the process model: every file operation of a save, and a torn file --------------------

def _pointer_first_save(fs: FaultFS, step: int) -> None:
    """The classic bugs: the "latest" pointer written before the data, the data written under
    its final name, no fsync, no rename."""
    for name, data in (("latest", str(step).encode()), (f"step-{step}.pt", b"D" * 100)):
        fh = fs.create(f"/{name}", 0o644, os.O_WRONLY | os.O_TRUNC)
        fs.write(f"/{name}", data, 0, fh)
        fs.flush(f"/{name}", fh)
        fs.release(f"/{name}", fh)


def test_the_process_trace_looks_back_to_a_pointer_written_before_the_data(fs):
    """No boundary at all, yet four file operations: the pointer's create and close (after
    step 10's last operation, so this save's), the data file's create and close."""
    events: list[tuple[str, dict]] = []
    fs.arm_crash_point({"save": save_globs(20), "after": -1, "trace_ops": True, "prev": save_globs(10)},
                       lambda kind, **f: events.append((kind, f)))
    for step in (10, 20, 30):
        _pointer_first_save(fs, step)
    assert [kind for kind, _ in events] == ["storage_op"] * 6
    traced = [{k: f[k] for k in ("seq", "op", "path", "bytes", "written_before", "own", "opened")} for _, f in events]
    assert [o["opened"] for o in traced[:4]] == [None, 1, None, 3]  # each close: the create of its file
    # the next save's pointer, written before step-30.pt opens the next window, is its own
    ops = own_ops(traced, look_back=True)
    assert [o["path"] for o in traced[4:]] == ["latest", "latest"] and ops == traced[:4]
    assert [(o["op"], o["path"], o["bytes"]) for o in ops] == [
        ("create", "latest", 0), ("close", "latest", 2), ("create", "step-20.pt", 0), ("close", "step-20.pt", 100)]
    labels = [(p.label, p.when, p.path, p.cut) for p in process_points(ops)]
    assert [p.opened for p in process_points(ops) if p.when == "torn"] == [1, 3]
    # a1 = b2's files but for the bytes between them; a2 = b3 (nothing written between)
    assert labels == [("b1", "before", "latest", 0), ("a1", "after", "latest", 0),
                      ("t2", "torn", "latest", 1), ("b2", "before", "latest", 0),
                      ("b3", "before", "step-20.pt", 0), ("a3", "after", "step-20.pt", 0),
                      ("t4", "torn", "step-20.pt", 50), ("b4", "before", "step-20.pt", 0),
                      ("a4", "after", "step-20.pt", 0)]


def _frozen_state(fs: FaultFS, spec: dict, tmp_path) -> tuple[dict, dict[str, bytes]]:
    """Run three pointer-first saves with ``spec`` armed; the crash_point event and the files
    as the process crash left them (the page cache kept: nothing dropped)."""
    events: list[tuple[str, dict]] = []
    fs.arm_crash_point({"save": save_globs(20), "prev": save_globs(10), "image_dir": str(tmp_path / "image"),
                        "model": "process", **spec}, lambda kind, **f: events.append((kind, f)))

    def writer() -> None:
        try:
            for step in (10, 20, 30):
                _pointer_first_save(fs, step)
        except OSError:
            pass  # the killed writer's operation that waited through the crash

    thread = threading.Thread(target=writer)
    thread.start()
    deadline = time.monotonic() + 10
    while not fs.crash.frozen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fs.crash.frozen, "the layer never froze"
    fs.process_crashed()
    thread.join(10)
    image = tmp_path / "image"
    files = {p.name: p.read_bytes() for p in image.iterdir()}
    return events[-1][1], files


@pytest.mark.parametrize(("spec", "files"), [
    ({"op": 1, "when": "before"}, {"latest": b"10", "step-10.pt": b"D" * 100}),
    ({"op": 1, "when": "after"}, {"latest": b"", "step-10.pt": b"D" * 100}),
    ({"op": 4, "when": "torn", "path": "step-20.pt", "cut": 50},
     {"latest": b"20", "step-10.pt": b"D" * 100, "step-20.pt": b"D" * 50}),
    ({"op": 2, "when": "torn", "path": "a-name-drawn-at-random", "opened": 1, "cut": 1},
     {"latest": b"2", "step-10.pt": b"D" * 100}),
    ({"op": 4, "when": "after"}, {"latest": b"20", "step-10.pt": b"D" * 100, "step-20.pt": b"D" * 100}),
], ids=["before-pointer", "after-pointer-emptied", "torn-data", "torn-by-its-create", "after-data"])
def test_a_process_crash_point_freezes_at_its_operation_and_keeps_every_write(fs, tmp_path, spec, files):
    crash, image = _frozen_state(fs, spec, tmp_path)
    assert crash["model"] == "process" and crash["after"] == spec["op"]
    assert image == files
    # Unfsynced, yet kept: a process crash drops nothing; the layer thawed for the restart.
    assert fs.tracker.pending() > 0 and not fs.crash.frozen


def test_the_power_model_finds_nothing_in_a_save_without_fsync_or_rename(fs):
    events: list[tuple[str, dict]] = []
    fs.arm_crash_point({"save": save_globs(20), "after": -1}, lambda kind, **f: events.append((kind, f)))
    for step in (10, 20):
        _pointer_first_save(fs, step)
    assert events == []


def test_process_points_on_the_command_line_and_the_model_they_need(tmp_path):
    from click.testing import CliRunner

    from chaos.cli import cli

    assert parse_points("0,3,b1,a2,t4") == [0, 3, "b1", "a2", "t4"]
    for bad in ("x1", "b0", "b", "1.5"):
        with pytest.raises(ValueError):
            parse_points(bad)
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nworkload: {harness: {steps: 30, checkpoint: {every_steps: 10}}}\n"
                        "topology: {nodes: 1, ranks_per_node: 2}\nfaults: []\n")
    run = ["run", "--crash-points", "--dry-run", "--no-preflight", str(scenario)]
    result = CliRunner().invoke(cli, run + ["--crash-model", "process"])
    assert result.exit_code == 0, result.output
    assert ("a trace of the save of step 20 (the fault-free twin too), then one process crash (process_crash) "
            "before and after each "
            "file operation of it and half-way through each file it writes") in result.output
    result = CliRunner().invoke(cli, run + ["--crash-model", "both", "--crash-after", "2,t3"])
    assert result.exit_code == 0, result.output
    assert "one power loss (lose_unfsynced) after each of its durability boundaries 2; one process crash " \
           "(process_crash) at its points t3" in result.output
    result = CliRunner().invoke(cli, run + ["--crash-after", "b1"])
    assert isinstance(result.exception, ScenarioError)
    assert "--crash-after: b1: not a point of --crash-model power" in str(result.exception)
    result = CliRunner().invoke(cli, ["run", "--crash-model", "process", str(scenario)])
    assert result.exit_code == 2 and "--crash-model needs --crash-points" in result.output


def test_each_process_crash_run_arms_its_point_and_crashes_the_process_not_the_node():
    from chaos.faults.family import crash_sweep
    from chaos.runner.crashsweep import SweepPoint, _arm_point, _crash

    sweep = crash_sweep()
    assert sweep is not None and sweep.process_crash_type == "process_crash"
    arm = _arm_point(20, SweepPoint("process", "t4", 4, "torn", "close", "step-20.pt", 50), 10)
    assert arm["type"] == sweep.arm_type and arm["params"] == {
        "tier": "shared", "save_step": 20, "after": -1, "model": "process", "op": 4, "when": "torn",
        "prev_step": 10, "path": "step-20.pt", "cut": 50, "opened": 0}
    crash = _crash("process")
    assert (crash["type"], crash["trigger"]) == ("process_crash", {"after_event": {"event": sweep.event}})
    assert _crash("power")["type"] == sweep.power_loss_type


def test_a_sweep_of_both_models_places_no_power_loss_in_a_save_without_boundaries():
    from chaos.runner.crashsweep import _points

    ops = [{"seq": 1, "op": "create", "path": "step-20.pt", "bytes": 0, "written_before": 0},
           {"seq": 2, "op": "close", "path": "step-20.pt", "bytes": 10, "written_before": 10}]
    assert [p.label for p in _points([], ops, "both", None)] == ["b1", "a1", "t2", "b2", "a2"]
    assert [p.label for p in _points([], ops, "power", None)] == ["0"]  # as ever: reported not_reached
    boundaries = [{"seq": 1, "op": "rename", "path": "a -> b"}]
    assert [(p.model, p.label) for p in _points(boundaries, ops, "both", [1, "t2"])] == [
        ("power", "1"), ("process", "t2")]


def test_a_save_with_no_boundary_freezes_where_the_next_save_begins():
    """DeepSpeed's save_checkpoint fsyncs and renames nothing: "before its first boundary"
    lasts until the next tag's folder is made, and the power loss lands there."""
    from chaos.faults.storage.crash import save_globs

    events: list[str] = []
    crash = CrashPoint({"save": save_globs(10), "after": 0}, lambda kind, **f: events.append(kind))
    assert not crash.before("mkdir", "global_step10")
    assert not crash.before("create", "global_step10/zero_pp_rank_0_mp_rank_00_model_states.pt")
    assert not crash.before("create", "latest")
    assert crash.before("mkdir", "global_step15") and crash.frozen
    assert events == ["crash_point"]


def test_deepspeeds_tag_of_a_step_is_its_save_and_another_steps_is_not():
    from fnmatch import fnmatchcase

    from chaos.faults.storage.crash import save_globs

    def in_save(path: str) -> bool:
        return any(fnmatchcase(path, glob) for glob in save_globs(20))

    assert in_save("ckpt/global_step20") and in_save("ckpt/global_step20/mp_rank_00_model_states.pt")
    assert not in_save("ckpt/global_step200") and not in_save("ckpt/global_step2")


def test_the_hf_trainers_and_lightnings_default_names_are_their_save_and_open_the_next():
    """The HF Trainer writes checkpoint-20/ and Lightning's default file is
    epoch=3-step=20.ckpt: neither carries ``step-20``, and without its own glob the sweep of
    such a job found no save at all."""
    from fnmatch import fnmatchcase

    from chaos.faults.storage.crash import save_globs

    def in_save(path: str) -> bool:
        return any(fnmatchcase(path, glob) for glob in save_globs(20))

    assert in_save("ckpt/checkpoint-20") and in_save("ckpt/checkpoint-20/model.safetensors")
    assert in_save("ckpt/epoch=3-step=20.ckpt")
    assert not in_save("ckpt/checkpoint-200") and not in_save("ckpt/epoch=39-step=200.ckpt")
    events: list[str] = []
    crash = CrashPoint({"save": save_globs(20), "after": 0}, lambda kind, **f: events.append(kind))
    assert not crash.before("mkdir", "checkpoint-20")
    assert not crash.before("create", "checkpoint-20/trainer_state.json")
    assert crash.before("mkdir", "checkpoint-25") and crash.frozen
    crash = CrashPoint({"save": save_globs(20), "after": 0}, lambda kind, **f: None)
    assert not crash.before("create", "epoch=3-step=20.ckpt") and not crash.before("create", "last.ckpt")
    assert crash.before("create", "epoch=4-step=25.ckpt") and crash.frozen
