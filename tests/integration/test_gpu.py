"""The real device faults of scenarios/gpu/, run for real on a CUDA device (docs/gpu.md):
marked gpu, skipped where torch sees no CUDA device. What each must show besides timing: who
noticed, whom it blamed and as what, and that the job trained on from its checkpoint. The
device check (benchmarks/gpu_check.sh) runs every scenario of scenarios/gpu/ with its targets;
these are the ones whose attribution is the point."""

from __future__ import annotations

import os

import pytest

from chaos.runfiles.events import read_events
from chaos.runner.run import run_scenario_once
from chaos.scenario.load import load_scenario
from chaos.util.procs import find_run_processes

pytestmark = [pytest.mark.integration, pytest.mark.gpu]
GPU = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "scenarios", "gpu")


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("name", "suspect", "failure_class", "said", "resumed_from"), [
    # a poisoned context kills the rank, blamed as a device error
    ("context-poison", "rank-0", "device", "device-side assert", 10),
    # the device's allocator refused: oom, not a crash or a device fault
    ("cuda-oom", "rank-0", "oom", "out of memory", 10),
    # a kernel that does not return: the heartbeat answers, the progress watchdog names it
    ("kernel-hang", "rank-1", "stalled", "", 10),
])
def test_a_real_device_fault_is_noticed_blamed_and_recovered_from(
        name: str, suspect: str, failure_class: str, said: str, resumed_from: int, tmp_path, state_dir) -> None:
    scenario = load_scenario(os.path.join(GPU, f"{name}.yaml"))
    journal = run_scenario_once(scenario, str(tmp_path / name), scenario.seed).to_dict()
    assert not find_run_processes(journal["run_id"]), "processes of the run left behind"
    assert journal["status"] == "completed", journal["error"]
    (fault,) = journal["faults"]
    (metrics,) = journal["metrics"]["faults"]
    assert fault["step_at_inject"] == 15
    events = read_events(os.path.join(journal["run_dir"], "events"))
    first = next(e for e in events if e["kind"] == "detected" and e["t"] >= fault["t_inject"])
    assert (first["suspect"], first["failure_class"]) == (suspect, failure_class), first
    assert said in first["reason"]
    assert metrics["resumed_from"] == resumed_from
