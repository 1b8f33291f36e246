"""Checkpoint freshness for a user's own command (chaos.ckptformat): a plain DDP script that
saves with ``torch.save`` and reports each save's path through the probe is judged, not left
``unknown``: an honest one passes through a rank kill and its restart; one that writes the
weights of the next step under the step it claims (NeMo-RL #3312's pattern) fails it, and
only it, naming the step each checkpoint really holds."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.integration._support import cli_env, run_trainchaos, write_ddp_torch_save_script

pytestmark = [pytest.mark.integration]

def _run(tmp_path, name: str, args: str, faults: list[dict]) -> tuple[int, dict, str]:
    script = write_ddp_torch_save_script(tmp_path)
    scenario = tmp_path / f"{name}.yaml"
    scenario.write_text(yaml.safe_dump({
        "name": name, "seed": 3,
        "workload": {"command": f"python {script} --ckpt {tmp_path / 'ckpt'} --per-run --steps 20 --every 5 "
                                f"{args}".strip(), "steps": 20},
        "topology": {"nodes": 1, "ranks_per_node": 2},
        "baseline": True,
        "faults": faults,
        "targets": {"stale_checkpoints": {"max": 0}, "final_state": "matches_baseline"},
        "timeout_s": 120,
    }))
    out = tmp_path / "reports"
    proc = run_trainchaos(["run", str(scenario), "--out", str(out)], env=cli_env(tmp_path / "state"), timeout=230)
    journal = json.loads((out / name / "0" / "journal.json").read_text())
    return proc.returncode, journal, proc.stdout + proc.stderr


@pytest.mark.timeout(240)
def test_a_command_saving_with_torch_save_is_judged_fresh_through_a_restart(tmp_path):
    code, journal, output = _run(tmp_path, "user-ckpt-fresh", "",
                                 [{"type": "kill_rank", "target": {"rank": 1}, "trigger": {"at_step": 12}}])
    assert code == 0, output
    metrics = journal["metrics"]
    assert journal["status"] == "completed", journal["error"]
    assert [r["resumed_from"] for r in metrics["restarts"]] == [10], metrics["restarts"]  # it loaded one
    # Read by the torch.save format: 5 and 10 before the kill, 15 and 20 after the resume.
    assert metrics["stale_checkpoints"] == 0
    assert metrics["checked_checkpoints"] == 4 and metrics["unchecked_checkpoints"] == 0, metrics
    assert all(c["ok"] for c in journal["verdict"]["checks"]), journal["verdict"]


@pytest.mark.timeout(240)
def test_a_command_saving_the_next_steps_weights_fails_freshness_and_only_it_from_the_twin_on(tmp_path):
    code, journal, output = _run(tmp_path, "user-ckpt-late", "--late", [])
    assert code == 1, output  # a target missed
    metrics = journal["metrics"]
    assert metrics["checked_checkpoints"] == 4, metrics
    assert [(i["step"], i["holds_step"]) for i in metrics["stale_checkpoint_list"]] == [(5, 6), (10, 11), (15, 16)]
    assert metrics["digest_match"] is True  # nothing was loaded: the final weights are the twin's
    # The twin saves the same way, fault-free: the job's own bug before any fault comes first,
    # then the faulted run's (issue 42: the twin is judged too).
    failed = [c for c in journal["verdict"]["checks"] if not c["ok"]]
    assert [(c["name"], c["twin"]) for c in failed] == [("stale_checkpoints", True), ("stale_checkpoints", False)], failed
    assert failed[0]["reason"].startswith("fault-free twin: stale checkpoints 3 > target 0"), failed[0]
