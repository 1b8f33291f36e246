"""Lightning as the system under test (workload kind ``lightning``): its own Trainer script,
run per rank by torchrun, reporting through ``chaos.adapters.lightning``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration._stacks import run_kill_rank, train_with_and_without_adapter

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_a_killed_lightning_rank_is_detected_recovered_from_last_ckpt_and_judged(tmp_path: Path) -> None:
    journal = run_kill_rank("lightning", tmp_path)
    assert journal["metrics"]["faults"][0]["lost_steps"] < 5


@pytest.mark.timeout(120)
def test_the_lightning_callback_reports_without_changing_training(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    plain, adapted, events = train_with_and_without_adapter("lightning", tmp_path, monkeypatch)
    assert plain == adapted, "the callback changed what Lightning trained"
    assert [e["step"] for e in events if e["kind"] == "step_end"] == list(range(1, 13))
    # ModelCheckpoint every 5 steps writes its step file and last.ckpt, each reported
    saves = [(e["step"], Path(e["path"]).name) for e in events if e["kind"] == "ckpt_save_end"]
    assert saves == [(5, "epoch=0-step=5.ckpt"), (5, "last.ckpt"), (10, "epoch=1-step=10.ckpt"), (10, "last.ckpt")]
    assert all(e["bytes"] > 0 for e in events if e["kind"] == "ckpt_save_end")
    ends = [e for e in events if e["kind"] == "run_end"]
    assert [(e["step"], e["digest"], e["weights_finite"]) for e in ends] == [(12, adapted, True)]
