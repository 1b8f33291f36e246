"""Lightning as the system under test (workload kind ``lightning``): its own Trainer script,
run per rank by torchrun, reporting through ``chaos.adapters.lightning``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration._stacks import assert_adapter_changes_nothing, run_kill_rank

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_a_killed_lightning_rank_is_detected_resumed_from_last_ckpt_and_judged(tmp_path: Path) -> None:
    metrics = run_kill_rank("lightning", tmp_path)["metrics"]
    # Freshness judged by the Lightning format (chaos.ckptformat.lightning): every .ckpt
    # read back as it was saved holds the twin's state at its global_step.
    assert metrics["stale_checkpoints"] == 0 and metrics["checked_checkpoints"] >= 2, metrics


@pytest.mark.timeout(120)
def test_the_callback_reports_without_changing_training(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # ModelCheckpoint every 5 steps writes its step file and last.ckpt: each is reported.
    assert_adapter_changes_nothing("lightning", tmp_path, monkeypatch, saves=[
        (5, "epoch=0-step=5.ckpt"), (5, "last.ckpt"), (10, "epoch=1-step=10.ckpt"), (10, "last.ckpt")])
