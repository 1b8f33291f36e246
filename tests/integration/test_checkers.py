"""The checkpoint checkers against real runs of the harness (issue 22): a deliberately broken
checkpointer makes exactly its checker fail, and says which step it really saved."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.integration._support import REPO, TRAINCHAOS, cli_env

CHECKERS = REPO / "scenarios" / "checkers"

pytestmark = [pytest.mark.integration]


@pytest.mark.timeout(240)
def test_a_late_async_snapshot_fails_the_freshness_checker_and_only_it(tmp_path):
    out = tmp_path / "reports"
    proc = subprocess.run([*TRAINCHAOS, "run", str(CHECKERS / "late-snapshot-async-save.yaml"), "--out", str(out)],
                          env=cli_env(tmp_path / "state"), capture_output=True, text=True, timeout=220)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # an expected failure (expect: fail)
    assert "XFAIL" in proc.stdout
    journal = json.loads((out / "late-snapshot-async-save" / "0" / "journal.json").read_text())
    assert journal["status"] == "completed"
    metrics = journal["metrics"]
    # Every save but the final one (step 30, which has no later step to race) is stale by
    # exactly one step: the checker read them as they were saved (keep-3 pruned step 10).
    assert metrics["checked_checkpoints"] == 3 and metrics["unchecked_checkpoints"] == 0
    assert [(i["step"], i["holds_step"]) for i in metrics["stale_checkpoint_list"]] == [(10, 11), (20, 21)]
    # Nothing else is wrong: no checkpoint was ever loaded, the final weights are the twin's.
    assert metrics["digest_match"] is True
    failed = [c for c in journal["verdict"]["checks"] if not c["ok"]]
    assert [c["name"] for c in failed] == ["stale_checkpoints"], failed
    assert "step 10 holds step 11's state" in failed[0]["reason"]
    page = (out / "late-snapshot-async-save" / "0" / "report.html").read_text()
    assert "STALE checkpoint: step 20 holds step 21" in page


@pytest.mark.fuse
@pytest.mark.timeout(600)
def test_the_crash_point_sweep_reports_a_pointer_written_before_fsync(tmp_path):
    """One power loss at each durability boundary of the save of step 20, with the LATEST
    pointer replaced before the checkpoint's files are fsynced: the sweep lists every
    boundary and reports the dangling pointer exactly where the pointer is ahead of the data."""
    out = tmp_path / "sweep"
    proc = subprocess.run([*TRAINCHAOS, "run", "--crash-points", str(CHECKERS / "crash-points-pointer-before-fsync.yaml"),
                           "--out", str(out)], env=cli_env(tmp_path / "state"), capture_output=True, text=True,
                          timeout=580)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    sweep = json.loads((out / "crash-points-pointer-before-fsync" / "crash_points.json").read_text())
    assert sweep["twin_status"] == sweep["trace_status"] == "completed"
    assert [(b["op"], b["path"].split(" -> ")[-1].split("/")[-1]) for b in sweep["boundaries"]] == [
        ("rename", "step-00000020"), ("fsync", "."),             # the directory, unfsynced files and all
        ("fsync", ".tmp-LATEST-" + sweep["boundaries"][2]["path"].rsplit("-", 1)[1]), ("rename", "LATEST"),
        ("fsync", "."),                                           # the pointer, durable: ahead of the data
        ("fsync", "MANIFEST.json"), ("fsync", "state.pt"), ("fsync", "step-00000020")]
    outcomes = {r["after"]: r["outcomes"] for r in sweep["results"]}
    assert list(outcomes) == list(range(9)), "one power loss per boundary, and one before the first"
    assert outcomes[0] == ["ok"] and outcomes[7] == ["ok"] and outcomes[8] == ["ok"]
    assert all(outcomes[k] == ["torn"] for k in (1, 2, 3))
    assert all(outcomes[k] == ["dangling_pointer", "torn"] for k in (4, 5, 6))
    assert sweep["problems"] == [1, 2, 3, 4, 5, 6]
    # The harness's own load verifies: even with the pointer dangling it resumed from step 10,
    # and every run ended on the twin's weights with fresh checkpoints.
    assert {r["resumed_from"] for r in sweep["results"] if r["after"] < 7} == {10}
    assert "LATEST names step 20, which is not complete" in proc.stdout
    assert "3/9 boundaries ok; problems after boundaries 1, 2, 3, 4, 5, 6" in proc.stdout
