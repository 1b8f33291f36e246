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


# -- --from-stacks: one row per recovery design -------------------------------------------


@pytest.fixture
def stacks(tmp_path: Path) -> Path:
    """A bench-stacks report as it is laid out: <out>/<fault>--<stack>/<repeat>/journal.json."""
    root = tmp_path / "stacks"
    for i, (det, rec) in enumerate([(0.5, 20.0), (0.7, 24.0), (0.6, 22.0)]):  # a restart, a rollback
        write_journal(root / "kill-rank--torchrun" / str(i), [{"type": "kill_rank", "detection_s": det,
                                                               "recovery_s": rec, "lost_steps": 12}])
    for i, (det, rec) in enumerate([(0.2, 3.0), (0.4, 5.0)]):  # the survivors train on
        write_journal(root / "kill-rank--torchft" / str(i), [{"type": "kill_rank", "detection_s": det,
                                                              "recovery_s": rec, "lost_steps": 0}])
    write_journal(root / "kill-rank--torchft" / "baseline", [])
    write_journal(root / "unrelated" / "0", [{"type": "kill_rank", "detection_s": 9.0, "recovery_s": 90.0}])
    return root


STACKS_CONFIG = (
    "name: designs\n"
    "job: {devices: 16384, devices_per_node: 8, days: 7}\n"
    "class_defaults: {detection_s: 60, restart_s: 300}\n"
    "checkpoint: {interval_s: 1800, blocking_s: 5}\n"
    "classes:\n"
    "  - {name: crash, rate_per_device_hour: 3.0e-5, fault_types: [kill_rank]}\n"
    "  - {name: cable, rate_per_node_hour: 1.0e-5}\n")


def test_each_stack_is_costed_with_its_own_figures_on_the_same_failures(stacks: Path, tmp_path: Path):
    config = tmp_path / "cfg.yaml"
    config.write_text(STACKS_CONFIG)
    outcome = run_simulation(str(config), from_stacks=str(stacks), trials=200)
    rows = {row["design"]: row for row in outcome.designs}
    assert list(rows) == ["torchft", "torchrun"]  # by name; the unnamed journal is not a design
    ft, tr = rows["torchft"], rows["torchrun"]
    assert tr["runs"]["samples"] == 3 and ft["runs"]["journals"] == 3 and ft["runs"]["samples"] == 2
    assert tr["figures"]["detection_s"] == pytest.approx(0.6) and tr["figures"]["detection_range"] == (0.5, 0.7)
    assert tr["figures"]["restart_range"] == pytest.approx((19.5, 23.3))
    assert tr["figures"]["rollback"] and not ft["figures"]["rollback"]
    crash = {r: {c["name"]: c for c in rows[r]["summary"]["classes"]}["crash"] for r in rows}
    assert crash["torchft"]["lost_work_s"] == 0.0 and "no rollback" in crash["torchft"]["sources"]["lost_work"]
    assert crash["torchrun"]["lost_work_s"] is None  # rolled back: the model simulates it
    # The same failures drawn for both: the design that neither stops long nor rolls back keeps more.
    assert (ft["summary"]["interruptions"]["unplanned"]["mean"]
            == tr["summary"]["interruptions"]["unplanned"]["mean"])
    assert ft["summary"]["ettr"]["mean"] > tr["summary"]["ettr"]["mean"]
    # The config as written stays the reference summary (its own defaults: slower than both).
    assert outcome.summary["ettr"]["mean"] < tr["summary"]["ettr"]["mean"]


def test_the_designs_table_is_printed_with_the_measured_spread(stacks: Path, tmp_path: Path):
    from click.testing import CliRunner

    from chaos.cli import cli

    config = tmp_path / "cfg.yaml"
    config.write_text(STACKS_CONFIG)
    result = CliRunner().invoke(cli, ["simulate", str(config), "--from-stacks", str(stacks), "--trials", "100",
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "per recovery design (--from-stacks" in result.output
    assert "torchrun  3 (kill_rank)  0.60 [0.50-0.70]" in result.output
    assert "kill_rank: none" in result.output and "kill_rank: rollback" in result.output
    data = json.loads((tmp_path / "out" / "designs.json").read_text())
    assert [d["design"] for d in data["from_stacks"]["designs"]] == ["torchft", "torchrun"]
    assert "## Per recovery design" in (tmp_path / "out" / "designs.md").read_text()


def test_from_stacks_refuses_what_it_cannot_use(stacks: Path, tmp_path: Path):
    config = tmp_path / "cfg.yaml"
    config.write_text(STACKS_CONFIG)
    with pytest.raises(ScaleInputError, match="--from-stacks: not with --from-runs"):
        run_simulation(str(config), from_stacks=str(stacks), from_runs=str(stacks))
    with pytest.raises(ScaleInputError, match=r"no journal of a scenario named <fault>--<stack>; 1 other"):
        run_simulation(str(config), from_stacks=str(stacks / "unrelated"))
    with pytest.raises(ScaleInputError, match="no such directory"):
        run_simulation(str(config), from_stacks=str(tmp_path / "none"))
