"""``scenarios/scale/llama3.yaml`` reproduces the published case: 419 unexpected interruptions
in 54 days on 16,384 GPUs, split as Table 5 of the Llama 3 paper, at more than 90 % ETTR."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.scale.llama3 import LLAMA3_CLASSES, LLAMA3_SOURCE, LLAMA3_UNEXPECTED
from chaos.scale.simulate import run_simulation

REPO = Path(__file__).resolve().parents[2]
LLAMA3 = REPO / "scenarios" / "scale" / "llama3.yaml"


def test_the_table_adds_up_to_the_published_total():
    assert len(LLAMA3_CLASSES) == 18
    assert sum(c.count for c in LLAMA3_CLASSES) == LLAMA3_UNEXPECTED == 419
    assert "arXiv:2407.21783" in LLAMA3_SOURCE and "Table 5" in LLAMA3_SOURCE


def test_each_class_is_measured_by_the_fault_types_that_say_they_stand_for_it():
    """The ``--from-runs`` mapping (docs/scale.md's table) comes from the types' own
    ``stands_for``: the types that stand for a class fully first, then those that show it
    another way (a faulty GPU that kills the process at once; a crash in a checkpoint)."""
    gpu = ("gpu_hbm3_memory", "gpu_sram_memory", "gpu_system_processor", "gpu_thermal_interface_sensor")
    host = ("host_maintenance", "ssd", "power_supply", "server_chassis", "io_expansion_board", "cpu",
            "system_memory")
    expected = {"faulty_gpu": ("device_error", "kill_rank"), "software_bug": ("kill_rank", "crash_during_checkpoint"),
                "dependency": ("kill_rank",), "silent_data_corruption": (),
                **dict.fromkeys(gpu, ("device_error",)), **dict.fromkeys(host, ("kill_node",)),
                **dict.fromkeys(("network_switch_cable", "nic", "nccl_watchdog_timeouts"), ("hang_rank",))}
    assert {c.name: c.fault_types for c in LLAMA3_CLASSES} == expected


@pytest.fixture(scope="module")
def llama3() -> dict:
    return run_simulation(str(LLAMA3), trials=1000, search=False).summary


def test_interruptions_within_ten_percent_of_419(llama3):
    total = llama3["interruptions"]["unplanned"]
    assert total["mean"] == pytest.approx(419, rel=0.10)
    assert abs(total["mean"] - 419) < 3 * llama3["interruptions"]["poisson_se"]
    assert llama3["interruptions"]["planned"]["mean"] == 47


def test_the_split_by_class_matches_the_tables_shares(llama3):
    table = {c.label: c.count / 419 for c in LLAMA3_CLASSES}
    simulated = {c["label"]: c["share"] for c in llama3["classes"]}
    assert simulated.keys() == table.keys()
    for label, share in table.items():
        assert simulated[label] == pytest.approx(share, abs=0.01), label


def test_ettr_is_reported_with_its_interval_and_is_above_90_percent(llama3):
    ettr = llama3["ettr"]
    assert ettr["ci_low"] < ettr["mean"] < ettr["ci_high"]
    assert ettr["p5"] < ettr["ci_low"] and ettr["ci_high"] < ettr["p95"]
    assert 0.90 < ettr["mean"] < 0.95  # "higher than 90% effective training time"
    lost = llama3["lost_gpu_h"]
    assert lost["total"]["mean"] == pytest.approx((1 - ettr["mean"]) * 16_384 * 54 * 24, rel=1e-6)
