"""Accelerate as the system under test (workload kind ``accelerate``): its own loop, run per
rank by torchrun, reporting through ``chaos.adapters.accelerate``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration._stacks import BATCH, assert_adapter_changes_nothing, run_kill_rank

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_a_killed_accelerate_rank_is_detected_resumed_by_load_state_and_judged(tmp_path: Path) -> None:
    journal = run_kill_rank("accelerate", tmp_path, data_exactly_once=False)
    metrics = journal["metrics"]
    # The data the adapter reported: every step of both ranks, the same samples as the twin's
    # (bitwise digest above) but under other epochs. The restarted process's loader counts its
    # passes from 0 again (save_state keeps no epoch for a map-style loader), so the resumed
    # epochs are labelled as the first ones: harmless for this unshuffled loader, the finding
    # of kill-mid-epoch-data.yaml for a shuffled one. Resumed at an epoch start R (one epoch
    # per 5-step interval, R <= 15 of 30), the relabelled epochs are R steps' worth.
    resumed = metrics["faults"][0]["resumed_from"]
    assert metrics["data_samples"] == 30 * 2 * BATCH, metrics["data_epochs"]
    assert metrics["data_lost"] == metrics["data_duplicated"] == resumed * 2 * BATCH, metrics["data_epochs"]
    # Freshness judged by format (chaos.ckptformat.hf): every save_state folder read back
    # as it was saved holds the twin's state at its step.
    assert metrics["stale_checkpoints"] == 0 and metrics["checked_checkpoints"] >= 2, metrics


@pytest.mark.timeout(120)
def test_the_instrumented_loop_reports_without_changing_training(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert_adapter_changes_nothing("accelerate", tmp_path, monkeypatch, saves=[(5, "step_5"), (10, "step_10")])
