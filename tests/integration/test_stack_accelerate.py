"""Accelerate as the system under test (workload kind ``accelerate``): its own loop, run per
rank by torchrun, reporting through ``chaos.adapters.accelerate``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration._stacks import assert_adapter_changes_nothing, run_kill_rank

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_a_killed_accelerate_rank_is_detected_resumed_by_load_state_and_judged(tmp_path: Path) -> None:
    metrics = run_kill_rank("accelerate", tmp_path)["metrics"]
    # Freshness judged by format (chaos.ckptformat.hf): every save_state folder read back
    # as it was saved holds the twin's state at its step.
    assert metrics["stale_checkpoints"] == 0 and metrics["checked_checkpoints"] >= 2, metrics


@pytest.mark.timeout(120)
def test_the_instrumented_loop_reports_without_changing_training(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert_adapter_changes_nothing("accelerate", tmp_path, monkeypatch, saves=[(5, "step_5"), (10, "step_10")])
