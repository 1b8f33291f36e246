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


def _first_detection(name: str, tmp_path) -> tuple[dict, dict, dict]:
    scenario = load_scenario(os.path.join(GPU, f"{name}.yaml"))
    journal = run_scenario_once(scenario, str(tmp_path / name), scenario.seed).to_dict()
    assert not find_run_processes(journal["run_id"]), "processes of the run left behind"
    assert journal["status"] == "completed", journal["error"]
    (fault,) = journal["faults"]
    (metrics,) = journal["metrics"]["faults"]
    events = read_events(os.path.join(journal["run_dir"], "events"))
    first = next(e for e in events if e["kind"] == "detected" and e["t"] >= fault["t_inject"])
    return fault, metrics, first


@pytest.mark.timeout(240)
def test_a_poisoned_cuda_context_kills_the_rank_blamed_as_a_device_error(tmp_path, state_dir):
    fault, metrics, first = _first_detection("context-poison", tmp_path)
    assert fault["step_at_inject"] == 15
    assert (first["suspect"], first["failure_class"]) == ("rank-0", "device"), first
    assert "device-side assert" in first["reason"]
    assert metrics["resumed_from"] == 10


@pytest.mark.timeout(240)
def test_a_device_out_of_memory_is_attributed_oom(tmp_path, state_dir):
    fault, metrics, first = _first_detection("cuda-oom", tmp_path)
    assert (first["suspect"], first["failure_class"]) == ("rank-0", "oom"), first
    assert "out of memory" in first["reason"]
    assert metrics["resumed_from"] == 10


@pytest.mark.timeout(240)
def test_a_kernel_that_does_not_return_is_found_by_the_progress_watchdog(tmp_path, state_dir):
    _fault, _metrics, first = _first_detection("kernel-hang", tmp_path)
    assert (first["suspect"], first["failure_class"]) == ("rank-1", "stalled"), first
