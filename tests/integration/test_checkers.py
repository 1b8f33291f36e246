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
