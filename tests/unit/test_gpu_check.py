"""The CUDA path's CPU side (docs/gpu.md): what validation refuses and accepts about devices,
where a rank trains, the host-side arithmetic a CUDA rank shares with CPU ranks, how the
harness attributes a device's OOM, what the device faults do on a host without CUDA, and the
device check's dry run. What needs a GPU is in test_gpu_device.py (marked gpu)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from chaos import probe
from chaos.errors import EXIT_BAD_INPUT
from chaos.faults.base import lookup
from chaos.probe import cuda as probe_cuda
from chaos.scenario.load import ScenarioError, parse_scenario
from chaos.workload import devices
from harness.config import ConfigError
from harness.config_load import config_from_mapping
from harness.device import place_model, rank_device
from harness.dist import completed_on
from harness.failures import FailureHandling
from harness.model import flatten_parameters
from harness.sdc_checksum import bits_checksum, device_checksum

REPO = Path(__file__).resolve().parents[2]
GPU_SCENARIOS = sorted((REPO / "scenarios" / "gpu").glob("*.yaml"))
NO_CUDA = "torch sees no CUDA device on this host: run it on a GPU host (docs/gpu.md)"


@pytest.fixture
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """This host has no CUDA device, whatever it has (the answer validation asks for)."""
    monkeypatch.setattr(devices, "cuda_missing", lambda: NO_CUDA)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def with_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Validation is told a CUDA device is here (nothing is run on it)."""
    monkeypatch.setattr(devices, "cuda_missing", lambda: None)


def _scenario(workload: dict[str, Any], faults: list[dict[str, Any]] | None = None, ranks: int = 1) -> Any:
    doc = {"name": "s", "workload": workload, "topology": {"nodes": 1, "ranks_per_node": ranks}}
    if faults:
        doc["faults"] = faults
    return parse_scenario(doc, "s.yaml")


def _refusal(workload: dict[str, Any], faults: list[dict[str, Any]] | None = None, ranks: int = 1) -> str:
    with pytest.raises(ScenarioError) as info:
        _scenario(workload, faults, ranks)
    assert info.value.exit_code == EXIT_BAD_INPUT
    return str(info.value)


# ------------------------------------------------------------------ validation


def test_a_harness_on_cuda_is_refused_where_there_is_none_at_the_key_that_asked(no_cuda: None) -> None:
    message = _refusal({"harness": {"device": "cuda", "steps": 10}})
    assert message == f"s.yaml: workload.harness.device: cuda: {NO_CUDA}"


def test_a_harness_on_cuda_validates_where_a_device_is(with_cuda: None) -> None:
    scenario = _scenario({"harness": {"device": "cuda", "steps": 10}})
    assert scenario.workload.harness == {"device": "cuda", "steps": 10}


def test_cpu_stays_the_default_and_asks_nothing_of_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    def asked() -> str:
        raise AssertionError("a CPU scenario asked whether CUDA is here")

    monkeypatch.setattr(devices, "cuda_missing", asked)
    _scenario({"harness": {"steps": 10}})


@pytest.mark.parametrize(("fault", "why"), [
    ({"type": "cuda_oom"}, "it allocates on the rank's GPU"),
    ({"type": "device_error", "params": {"on_device": True}}, "on_device: true faults a real kernel"),
    ({"type": "stall_loop", "params": {"mode": "device"}}, "mode device spins a kernel"),
])
def test_a_real_device_fault_on_a_cpu_rank_is_refused_at_its_type(fault: dict[str, Any], why: str) -> None:
    message = _refusal({"harness": {"steps": 10}},
                       [{**fault, "target": {"rank": 0}, "trigger": {"at_step": 5}}])
    assert f"s.yaml: faults[0].type: {fault['type']} needs rank 0 on a CUDA device ({why}" in message
    assert "set workload.harness.device: cuda" in message


def test_the_simulated_device_error_still_runs_on_cpu() -> None:
    _scenario({"harness": {"steps": 10}},
              [{"type": "device_error", "target": {"rank": 0}, "trigger": {"at_step": 5}}])


def test_a_device_fault_must_target_a_rank_that_cuda_ranks_puts_on_the_gpu(with_cuda: None) -> None:
    workload = {"harness": {"device": "cuda", "cuda_ranks": 1, "steps": 10}}
    oom = {"type": "cuda_oom", "trigger": {"at_step": 5}}
    message = _refusal(workload, [{**oom, "target": {"rank": 1}}], ranks=2)
    assert "faults[0].type: cuda_oom needs rank 1 on a CUDA device" in message
    assert "cuda_ranks is 1: only ranks 0-0 train on CUDA" in message
    _scenario(workload, [{**oom, "target": {"rank": 0}}], ranks=2)


@pytest.mark.parametrize(("options", "wrong"), [
    ({"cuda_ranks": 1}, "cuda_ranks needs device: cuda"),
    ({"device": "cuda", "cuda_ranks": -1}, "cuda_ranks must be >= 0"),
])
def test_cuda_ranks_is_checked_by_the_harness_config(options: dict[str, Any], wrong: str) -> None:
    with pytest.raises(ConfigError, match=wrong):
        config_from_mapping({"steps": 10, **options})


def test_megatron_is_refused_where_megatron_core_or_cuda_is_missing(no_cuda: None,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "megatron" else real_find_spec(name, *a))
    message = _refusal({"megatron": {"steps": 10}})
    assert ("s.yaml: workload.megatron: the megatron package is not installed in this Python; "
            "pip install 'trainchaos[megatron]'") in message
    assert f"s.yaml: workload.megatron: Megatron-Core's models allocate CUDA buffers: {NO_CUDA}" in message


def test_megatron_ranks_are_on_cuda_so_device_faults_are_not_refused_for_the_device(
        no_cuda: None, monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",  # megatron-core "installed"
                        lambda name, *a: object() if name == "megatron" else real_find_spec(name, *a))
    message = _refusal({"megatron": {"steps": 10}},
                       [{"type": "cuda_oom", "target": {"rank": 0}, "trigger": {"at_step": 5}}])
    assert "needs rank 0 on a CUDA device" not in message
    assert message.count("\n") == 0 and "workload.megatron: Megatron-Core's models" in message


def test_the_shipped_gpu_scenarios_are_refused_here_for_the_device_alone(no_cuda: None) -> None:
    assert len(GPU_SCENARIOS) >= 9
    for path in GPU_SCENARIOS:
        with pytest.raises(ScenarioError) as info:
            parse_scenario(yaml.safe_load(path.read_text(encoding="utf-8")), str(path))
        for line in str(info.value).splitlines():
            assert (": workload.harness.device: cuda: " in line or ": workload.megatron: " in line), line


def test_the_shipped_gpu_scenarios_validate_where_cuda_and_megatron_core_are(
        with_cuda: None, monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "megatron" else real_find_spec(name, *a))
    for path in GPU_SCENARIOS:
        parse_scenario(yaml.safe_load(path.read_text(encoding="utf-8")), str(path))


# ------------------------------------------------------------------ where a rank trains


def test_a_rank_trains_on_cpu_by_default_and_past_cuda_ranks() -> None:
    assert rank_device(config_from_mapping({"steps": 1}), 0, 0) == torch.device("cpu")
    beside = config_from_mapping({"steps": 1, "device": "cuda", "cuda_ranks": 1})
    assert rank_device(beside, 1, 1) == torch.device("cpu")  # asks nothing of CUDA


def test_a_cuda_rank_on_a_node_without_cuda_fails_named(no_cuda: None) -> None:
    with pytest.raises(RuntimeError, match="device: cuda, but torch sees no CUDA device on this node"):
        rank_device(config_from_mapping({"steps": 1, "device": "cuda"}), 0, 0)


def test_a_cpu_model_is_placed_as_it_is() -> None:
    model = torch.nn.Linear(3, 2)
    flatten_parameters(model)
    before = [p.data_ptr() for p in model.parameters()]
    assert place_model(model, torch.device("cpu")) is model
    assert [p.data_ptr() for p in model.parameters()] == before


def test_the_device_checksum_is_the_host_checksum_for_the_same_bits() -> None:
    """A CUDA rank's fingerprint is compared with CPU ranks' rows: the two sums must agree
    bit for bit, whatever the tensors' sizes, dtypes and alignment (computed here on host
    tensors: the arithmetic is the same torch ops on any device)."""
    torch.manual_seed(0)
    loose = [torch.randn(3), torch.randn(5, 4), torch.randn(7).half(), torch.randn(1000),
             torch.randn(33).double(), torch.randn(20_000), torch.randn(4, 6).t()]
    flat = torch.randn(3 + 8 + 5)
    views = [flat[:3], flat[3:11], flat[11:]]  # the middle one starts off a 64-bit word
    for group in (loose, views, loose + views, []):
        assert device_checksum(group) == bits_checksum(group)
    flipped = [t.clone() for t in views]
    flipped[1].view(torch.int32)[2] ^= 1 << 7
    assert device_checksum(flipped) != device_checksum(views)


def test_a_completed_future_holds_the_gathered_value_on_the_bucket_device() -> None:
    value = torch.arange(4.0)
    future = completed_on(torch.device("cpu"), value)
    assert future.done() and torch.equal(future.wait(), value)


# ------------------------------------------------------------------ attribution


class _Rank(FailureHandling):
    """The failure side of a rank: what classify reads of an exception needs no peer."""

    def __init__(self) -> None:
        self.peers, self.watchdog = [], None


@pytest.mark.parametrize(("error", "failure_class"), [
    (RuntimeError("CUDA out of memory. Tried to allocate 160.00 GiB. GPU 0 has a total capacity of 79.1 GiB"), "oom"),
    (type("OutOfMemoryError", (RuntimeError,), {})("allocator"), "oom"),
    (RuntimeError("CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported"),
     "device"),
    (RuntimeError("CUDA error: an illegal memory access was encountered"), "device"),
])
def test_the_harness_tells_a_device_oom_from_a_device_fault(error: Exception, failure_class: str) -> None:
    found, suspect, reason = _Rank().classify(error)
    assert (found, suspect) == (failure_class, probe.src()), reason


# ------------------------------------------------------------------ the device faults without a device


@pytest.mark.parametrize("fire", [
    lambda: probe_cuda.poison_context(),
    lambda: probe_cuda.exhaust_memory(None),
    lambda: probe_cuda.device_sleep(0.1),
    lambda: probe.STALL_MODES["device"](0.1),
])
def test_a_device_fault_in_a_rank_without_cuda_says_so(no_cuda: None, fire: Any) -> None:
    with pytest.raises(probe_cuda.NoCudaDevice, match="no CUDA device"):
        fire()


def test_the_device_fault_types_are_declared_for_the_engine() -> None:
    oom = lookup("cuda_oom")
    assert (oom.family, oom.failure_class, oom.in_process) == ("process", "oom", True)
    assert oom.device_needed({}) and "torch.cuda.OutOfMemoryError" in oom.fidelity
    assert lookup("device_error").device_needed({}) is None
    assert lookup("stall_loop").device_needed({"mode": "queue"}) is None


# ------------------------------------------------------------------ the device check


def test_the_device_check_dry_run_names_every_step_and_checks_the_scenarios(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(REPO)}
    done = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_check.sh"), "--dry-run", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    for step in ("scenarios", "sdc_bench", "megatron", "gpu_tests"):
        assert f"  {step} " in done.stdout
    for path in GPU_SCENARIOS:
        assert f"scenarios/gpu/{path.name}" in done.stdout
    assert ("refused as expected here (exit 2)" in done.stdout
            or "every scenario validates" in done.stdout), done.stdout
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing
