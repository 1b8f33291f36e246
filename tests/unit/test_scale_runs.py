"""``--from-runs``: journals -> per-fault-type medians -> per-class figures of the model.

The journals here are written in the shape ``trainchaos run`` writes them (the fields the
reader uses, as in a real ``journal.json``); the integration test reads real ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaos.scale.issues import ScaleInputError
from chaos.scale.runs import read_runs
from chaos.scale.simulate import run_simulation


def write_journal(run_dir: Path, faults: list[dict[str, Any]], productive_s: float = 9.5,
                  final_step: int = 150) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    metric_faults = [{
        "fault_id": f"f{i}-{f['type']}", "type": f["type"], "fired": True,
        "detection_s": f.get("detection_s"), "recovery_s": f.get("recovery_s"),
        "lost_steps": f.get("lost_steps"), "restarted": True,
    } for i, f in enumerate(faults)]
    journal = {
        "schema_version": 2, "format": 1, "scenario": {"name": run_dir.parent.name}, "run_dir": str(run_dir),
        "status": "completed", "faults": [],
        "metrics": {"productive_s": productive_s, "final_step": final_step, "faults": metric_faults},
    }
    path = run_dir / "journal.json"
    path.write_text(json.dumps(journal))
    return path


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "reports"
    write_journal(root / "kill-rank" / "0", [{"type": "kill_rank", "detection_s": 0.02, "recovery_s": 6.0, "lost_steps": 10}])
    write_journal(root / "kill-rank" / "1", [{"type": "kill_rank", "detection_s": 0.04, "recovery_s": 7.0, "lost_steps": 12}])
    write_journal(root / "kill-rank" / "2", [{"type": "kill_rank", "detection_s": 0.03, "recovery_s": 9.0, "lost_steps": 14}])
    write_journal(root / "kill-rank" / "baseline", [])
    write_journal(root / "device-error" / "0", [{"type": "device_error", "detection_s": 0.5, "recovery_s": 8.5, "lost_steps": 5}],
                  productive_s=12.0, final_step=120)
    write_journal(root / "hang" / "0", [{"type": "hang_rank", "detection_s": None, "recovery_s": None}])
    (root / "broken" / "0").mkdir(parents=True)
    (root / "broken" / "0" / "journal.json").write_text("{not json")
    return root


def test_medians_per_fault_type_and_per_class(runs: Path):
    found = read_runs(str(runs))
    assert found.journals == 6 and len(found.unreadable) == 1
    assert found.fault_types == {"kill_rank", "device_error"}
    assert found.unusable == {"hang_rank": 1}
    kill = found.for_types(["kill_rank"])
    assert kill is not None and kill.n == 3
    assert kill.detection_s == pytest.approx(0.03)
    assert kill.restart_s == pytest.approx(7.0 - 0.04)  # median of recovery - detection per run
    assert kill.lost_work_s == pytest.approx(12 * 9.5 / 150)  # lost steps x the run's step time
    both = found.for_types(["device_error", "kill_rank"])
    assert both is not None and both.n == 4 and both.fault_types == ("device_error", "kill_rank")
    assert found.for_types(["kill_node"]) is None


def test_a_directory_without_measurements_is_bad_input(tmp_path: Path):
    with pytest.raises(ScaleInputError, match="no such directory"):
        read_runs(str(tmp_path / "nothing"))
    write_journal(tmp_path / "r" / "baseline", [])
    with pytest.raises(ScaleInputError, match=r"--from-runs: no detected fault in any journal.json under it \(1 journal"):
        read_runs(str(tmp_path / "r"))


def test_measured_figures_feed_the_model_and_the_rest_come_from_defaults(runs: Path, tmp_path: Path):
    config = tmp_path / "cfg.yaml"
    config.write_text(
        "name: measured\n"
        "job: {devices: 1024, days: 7}\n"
        "class_defaults: {detection_s: 60, restart_s: 300}\n"
        "checkpoint: {interval_s: 600, blocking_s: 5}\n"
        "classes:\n"
        "  - {name: faulty_gpu, rate_per_device_hour: 1.0e-5}\n"                  # Llama 3 mapping
        "  - {name: crash, rate_per_device_hour: 1.0e-5, fault_types: [kill_rank], lost_work: measured}\n"
        "  - {name: cable, rate_per_node_hour: 1.0e-5}\n"                          # no mapping
        "  - {name: typed, rate_per_node_hour: 1.0e-5, detection_s: 9, fault_types: [kill_rank]}\n")
    outcome = run_simulation(str(config), from_runs=str(runs), trials=50, search=False)
    by_name = {c["name"]: c for c in outcome.summary["classes"]}
    gpu = by_name["faulty_gpu"]  # device_error + kill_rank pooled: 4 samples
    assert gpu["detection_s"] == pytest.approx((0.03 + 0.04) / 2)
    assert gpu["sources"]["detection_s"] == "measured (median of 4: device_error, kill_rank)"
    crash = by_name["crash"]
    assert crash["restart_s"] == pytest.approx(6.96) and crash["lost_work_s"] == pytest.approx(12 * 9.5 / 150)
    assert by_name["cable"]["detection_s"] == 60 and by_name["cable"]["sources"]["restart_s"] == "class_defaults"
    typed = by_name["typed"]  # a figure written on the class wins over the measurement
    assert typed["detection_s"] == 9 and typed["sources"] == {
        "detection_s": "config", "restart_s": "measured (median of 3: kill_rank)",
        "lost_work": "rollback (simulated)"}
    assert outcome.runs is not None and outcome.runs["unusable"] == {"hang_rank": 1}
