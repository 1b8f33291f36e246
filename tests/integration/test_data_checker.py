"""The exactly-once data checker and the reload checker on real runs (docs/checkers.md):
the bundled harness, a rank killed mid-run, through the real ``trainchaos run``.

* The harness restores its data position with the model: every checker passes, against the
  fault-free twin (every sample trained once by the surviving training, the restart resumed
  from the newest durable checkpoint with finite weights and the twin's loss).
* The same run with ``data_restore_position: false`` (the test aid that stands for a
  dataloader whose position is not restored, torchft #58/#186): the data checker fails
  with the samples lost and duplicated, and no other checker does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.util.procs import find_run_processes
from tests.integration._support import cli_env, run_trainchaos

pytestmark = pytest.mark.integration

STEPS, CKPT, KILL, GB = 30, 10, 15, 8

CHECKERS = {"data", "reload_nonfinite", "reload_loss_dev", "silent_rollback_steps"}


def _scenario(name: str, restore: bool) -> str:
    return f"""\
name: {name}
seed: 5
baseline: true
workload:
  harness: {{steps: {STEPS}, global_batch: {GB}, model: {{name: mlp}}, data_restore_position: {str(restore).lower()},
             checkpoint: {{every_steps: {CKPT}, mode: sync}}}}
topology: {{nodes: 2, ranks_per_node: 1}}
faults:
  - type: kill_rank
    target: {{rank: 1}}
    trigger: {{at_step: {KILL}}}
targets:
  data: exactly_once
  reload_nonfinite: {{max: 0}}
  reload_loss_dev: {{max: 0.05}}
  silent_rollback_steps: {{max: 0}}
timeout_s: 150
"""


@pytest.mark.timeout(420)
def test_the_data_checker_passes_the_harness_and_fails_a_sampler_that_forgets_its_position(tmp_path: Path) -> None:
    for name, restore in (("good", True), ("forgets", False)):
        (tmp_path / f"{name}.yaml").write_text(_scenario(name, restore))
    env = cli_env(tmp_path / "state")
    result = run_trainchaos(["run", str(tmp_path / "good.yaml"), str(tmp_path / "forgets.yaml"),
                             "--out", str(tmp_path / "out")],
                            env=env, cwd=tmp_path, timeout=400)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output  # the broken one misses its data target
    journals = {name: json.loads((tmp_path / "out" / name / "0" / "journal.json").read_text())
                for name in ("good", "forgets")}
    for journal in journals.values():
        assert journal["status"] == "completed", output
        assert not find_run_processes(journal["run_id"])
        m = journal["metrics"]
        assert [r["resumed_from"] for r in m["restarts"]] == [CKPT], m["restarts"]

    good = journals["good"]
    m = good["metrics"]
    assert (m["data_samples"], m["data_lost"], m["data_duplicated"], m["data_rolled_back_only"]) == (STEPS * GB, 0, 0, 0)
    assert m["silent_rollback_steps"] == 0 and m["reload_nonfinite"] == 0
    assert m["reload_loss_dev"] == 0.0 and m["reload_loss_steps"] == [CKPT + 1]  # deterministic: the twin's loss
    assert good["verdict"]["passed"], good["verdict"]

    bad = journals["forgets"]
    m = bad["metrics"]
    # Resumed at step 10 from batch 0: batches 0-9 trained twice, batches 20-29 never.
    assert (m["data_lost"], m["data_duplicated"]) == (CKPT * GB, CKPT * GB), m["data_epochs"]
    failed = {c["name"] for c in bad["verdict"]["checks"] if not c["ok"]}
    assert failed == {"data"}, bad["verdict"]["checks"]
    assert {c["name"] for c in bad["verdict"]["checks"]} >= CHECKERS
    reason = next(c["reason"] for c in bad["verdict"]["checks"] if c["name"] == "data")
    assert reason.startswith(f"data exactly_once: {CKPT * GB} samples lost"), reason
