"""Accelerate as the system under test (workload kind ``accelerate``): its own training loop,
run per rank by torchrun, reporting through ``chaos.adapters.accelerate``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration._stacks import run_kill_rank, train_with_and_without_adapter

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_a_killed_accelerate_rank_is_detected_recovered_with_load_state_and_judged(tmp_path: Path) -> None:
    journal = run_kill_rank("accelerate", tmp_path)
    assert journal["metrics"]["faults"][0]["lost_steps"] < 5


@pytest.mark.timeout(120)
def test_the_accelerate_adapter_reports_without_changing_training(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    plain, adapted, events = train_with_and_without_adapter("accelerate", tmp_path, monkeypatch)
    assert plain == adapted, "the adapter changed what Accelerate trained"
    steps = [e for e in events if e["kind"] == "step_end"]
    assert [e["step"] for e in steps] == list(range(1, 13))
    assert all(isinstance(e["loss"], float) for e in steps)
    saves = [(e["step"], Path(e["path"]).name) for e in events if e["kind"] == "ckpt_save_end"]
    assert saves == [(5, "step_5"), (10, "step_10")]
    assert all(e["bytes"] > 0 for e in events if e["kind"] == "ckpt_save_end")
    ends = [e for e in events if e["kind"] == "run_end"]
    assert [(e["step"], e["digest"], e["weights_finite"]) for e in ends] == [(12, adapted, True)]
