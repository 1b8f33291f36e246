"""Storage faults and the crash-point sweep on a user's own ``command`` workload: a plain DDP
script of the test's own, saving with ``torch.save`` into the checkpoint directory the
workload declares (``$TRAINCHAOS_CKPT_DIR``, ``{ckpt_dir}``), with the FUSE fault layer
mounted over it. EIO on its writes reaches its saves (the layer counts the hits; the script
surfaces the failures; a later save succeeds), and ``run --crash-points`` loses power at
durability boundaries of one of its saves and audits each crash image by the torch.save format:
a save that fsyncs before its rename survives every power loss, one that does not leaves its
checkpoints torn; a save straight to the final name (no fsync, no rename: no boundary at all)
gets process-crash points, and its torn file is flagged. Nothing is left mounted after any."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from chaos.runfiles.events import read_events
from chaos.storage.control import read_json
from tests.integration._support import (
    assert_no_storage_left,
    cli_env,
    run_trainchaos,
    write_ddp_torch_save_script,
)

pytestmark = [pytest.mark.integration, pytest.mark.fuse]

def _scenario(tmp_path, name: str, args: str, steps: int, every: int, **extra) -> str:
    script = write_ddp_torch_save_script(tmp_path)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "seed": 5,
        "workload": {"command": f"python {script} --ckpt {{ckpt_dir}} --declared --steps {steps} --every {every} "
                                f"{args}".strip(),
                     "steps": steps, "checkpoint_dir": "ckpt", "checkpoint_every_steps": every},
        "topology": {"nodes": 1, "ranks_per_node": 2},
        "timeout_s": 120, **extra,
    }))
    return str(path)


@pytest.mark.timeout(240)
def test_eio_on_a_commands_own_torch_save_hits_its_saves_and_a_later_save_succeeds(tmp_path):
    """EIO on every write to the declared checkpoint directory for 1.5 s from step 8: the
    saves in that window fail (the layer counts its hits on them), the script reports them,
    and a save after the window lands in the run's ``ckpt`` directory."""
    scenario = _scenario(tmp_path, "command-eio", "--sleep 0.1", steps=30, every=5, faults=[
        {"type": "io_error", "target": {"rank": 0}, "trigger": {"at_step": 8},
         "params": {"tier": "shared", "errno": "EIO", "ops": ["write"], "duration_s": 1.5}}],
        targets={"failed_saves": {"min": 1}})
    out = tmp_path / "reports"
    proc = run_trainchaos(["run", scenario, "--out", str(out)], env=cli_env(tmp_path / "state"), timeout=220)
    journal = json.loads((out / "command-eio" / "0" / "journal.json").read_text())
    assert_no_storage_left(journal["run_id"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert journal["status"] == "completed", journal["error"]
    run_dir = journal["run_dir"]
    # The layer was over the declared directory and its rule failed writes there.
    hits = (read_json(os.path.join(run_dir, "storage", "shared", "state.json")) or {}).get("hits", {})
    assert hits.get("f0-io_error", 0) >= 1, hits
    events = read_events(os.path.join(run_dir, "events"))
    failed = [e for e in events if e["kind"] == "ckpt_save_failed"]
    assert failed and journal["metrics"]["failed_saves"] == len(failed), failed
    assert all(e["error"] for e in failed)
    injected = next(e for e in events if e["kind"] == "fault_injected")
    reverted = next(e for e in events if e["kind"] == "fault_reverted")
    assert all(injected["t"] <= e["t"] <= reverted["t"] + 1 for e in failed), "a save failed outside the window"
    later = [e for e in events if e["kind"] == "ckpt_save_end" and e["t"] > reverted["t"]]
    assert later, "no save succeeded after the fault"
    assert {os.path.dirname(e["path"]) for e in later} == {os.path.join(run_dir, "ckpt")}
    assert os.path.getsize(later[-1]["path"]) > 0
    assert journal["verdict"]["passed"], journal["verdict"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("fsync", "points"), [(True, "1,2"), (False, "1")], ids=["fsync", "no-fsync"])
def test_the_crash_point_sweep_of_a_commands_torch_save(tmp_path, fsync, points):
    """The save of step 20 (the second, by the declared cadence of 10): with an fsync before
    its rename a power loss at either boundary (one of each kind: the fsync, the rename)
    resumes from a complete checkpoint on the twin's weights; without it, a power loss after
    the rename leaves every checkpoint torn in the crash image and the restart starts over."""
    scenario = _scenario(tmp_path, "command-crash", "--fsync" if fsync else "", steps=30, every=10)
    out = tmp_path / "sweep"
    argv = ["run", "--crash-points", scenario, "--out", str(out), "--crash-after", points]
    proc = run_trainchaos(argv, env=cli_env(tmp_path / "state"), timeout=580)
    output = proc.stdout + proc.stderr
    sweep = json.loads((out / "command-crash" / "crash_points.json").read_text())
    for result in sweep["results"]:
        run_id = json.loads((Path(result["run_dir"]) / "journal.json").read_text())["run_id"]
        assert_no_storage_left(run_id)
    assert sweep["save_step"] == 20 and sweep["twin_status"] == sweep["trace_status"] == "completed", output
    boundaries = [(b["op"], b["path"]) for b in sweep["boundaries"]]
    rename = ("rename", "step-20.pt.tmp -> step-20.pt")
    assert boundaries == ([("fsync", "step-20.pt.tmp"), rename] if fsync else [rename]), boundaries
    results = {r["after"]: r for r in sweep["results"]}
    if fsync:
        assert proc.returncode == 0, output
        assert {k: r["outcomes"] for k, r in results.items()} == {1: ["ok"], 2: ["ok"]}, output
        # Audited by the torch.save format: after the fsync the step-20 file reads whole, but
        # as step-20.pt.tmp, which the script's loader never takes (nor the audit: a name of a
        # write in progress); only once renamed is it complete and loaded.
        assert {k: (r["complete"], r["torn"], r["resumed_from"]) for k, r in results.items()} == {
            1: ([10], {}, 10), 2: ([10, 20], {}, 20)}, output
        assert "2/2 boundaries ok" in proc.stdout
    else:
        assert proc.returncode == 1, output
        (result,) = results.values()
        assert result["after"] == 1 and result["resumed_from"] == 0, result
        # step 10 was reported saved long before, and is lost with step 20
        assert result["outcomes"] == ["torn", "lost_saved", "lost_interval"], result
        assert result["complete"] == [] and sorted(map(int, result["torn"])) == [10, 20], result
        assert "torn under a finished name: step 10, step 20" in proc.stdout


@pytest.mark.timeout(400)
def test_a_save_with_no_fsync_and_no_rename_gets_process_crash_points_and_its_torn_file_is_flagged(tmp_path):
    """``torch.save`` straight to ``step-20.pt``: no durability boundary at all (the power
    model has nothing to sweep), two file operations (its create and its close). A process
    crash before the create resumes from step 10, fine; one half-way through its bytes leaves
    a torn step-20.pt under its finished name (the script skips it: no loaded_torn)."""
    scenario = _scenario(tmp_path, "command-process", "--direct", steps=30, every=10)
    out = tmp_path / "sweep"
    argv = ["run", "--crash-points", scenario, "--out", str(out), "--crash-model", "process",
            "--crash-after", "b1,t2"]
    proc = run_trainchaos(argv, env=cli_env(tmp_path / "state"), timeout=380)
    output = proc.stdout + proc.stderr
    sweep = json.loads((out / "command-process" / "crash_points.json").read_text())
    for result in sweep["results"]:
        run_id = json.loads((Path(result["run_dir"]) / "journal.json").read_text())["run_id"]
        assert_no_storage_left(run_id)
    assert sweep["model"] == "process" and sweep["boundaries"] == [], output
    assert [(o["seq"], o["op"], o["path"]) for o in sweep["ops"]] == [
        (1, "create", "step-20.pt"), (2, "close", "step-20.pt")], output
    assert proc.returncode == 1, output
    results = {r["point"]: r for r in sweep["results"]}
    assert {p: (r["model"], r["outcomes"], r["resumed_from"]) for p, r in results.items()} == {
        "b1": ("process", ["ok"], 10), "t2": ("process", ["torn"], 10)}, output
    assert list(map(int, results["t2"]["torn"])) == [20] and results["t2"]["complete"] == [10], results["t2"]
    assert "1/2 crash points ok; problems at t2" in proc.stdout
