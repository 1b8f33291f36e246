"""Bit flips in live tensors: the bit arithmetic for every floating dtype and layout, tensor
names, and the probe's bitflip episodes (once, stuck_at, mercurial; parameters, gradients
before and after the all-reduce, optimizer state, activations) in one process."""

from __future__ import annotations

import json
import os

import pytest
import torch
from torch import nn

from chaos import probe as probe_mod
from chaos.probe import core as probe_core
from chaos.probe.bitflip_bits import (
    BitFlipError,
    bit_index,
    flip_,
    flip_positions,
    force_bit_,
    read_bit,
)
from chaos.probe.bitflip_names import check_name, compress_names, parse_spec, tensor_catalog
from chaos.runfiles.events import read_events

INT_OF = {torch.float32: torch.int32, torch.float64: torch.int64, torch.float16: torch.int16,
          torch.bfloat16: torch.int16}


# --------------------------------------------------------------------------- bits


@pytest.mark.parametrize(("dtype", "named", "expected"), [
    ("float32", "sign", 31), ("float32", "exponent", 30), ("float32", "mantissa_high", 22),
    ("float32", "mantissa_low", 0), ("bfloat16", "exponent", 14), ("bfloat16", "mantissa_high", 6),
    ("float16", "mantissa_high", 9), ("float64", "exponent", 62),
])
def test_named_bits_follow_each_dtype_layout(dtype, named, expected):
    assert bit_index(dtype, named) == expected


def test_a_bit_outside_the_dtype_names_its_layout():
    with pytest.raises(BitFlipError, match=r"bit 16 is outside bfloat16: bits 0-15 \(sign 15, exponent 7-14"):
        bit_index("bfloat16", 16)
    with pytest.raises(BitFlipError, match="only floating dtypes"):
        bit_index("int64", 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_flip_changes_exactly_one_bit_of_one_element_of_a_non_contiguous_tensor(dtype):
    base = torch.randn(6, 5).to(dtype)
    tensor = base.t()  # non-contiguous: strides (1, 5)
    assert not tensor.is_contiguous()
    before = tensor.clone()
    index = 7  # row-major in the logical (5, 6) shape: row 1, column 1
    bit = bit_index(str(dtype).removeprefix("torch."), "sign")
    old, new = flip_(tensor, index, bit)
    changed = (tensor.view(INT_OF[dtype]) != before.view(INT_OF[dtype])).nonzero().tolist()
    assert changed == [[1, 1]]
    assert new == -old
    xor = int(tensor[1, 1].view(INT_OF[dtype])) ^ int(before[1, 1].view(INT_OF[dtype]))
    assert xor & ((1 << tensor.element_size() * 8) - 1) == 1 << bit
    flip_(tensor, index, bit)
    assert torch.equal(tensor.view(INT_OF[dtype]), before.view(INT_OF[dtype]))


def test_exponent_flip_is_loud_and_mantissa_low_is_one_ulp():
    t = torch.tensor([0.02], dtype=torch.float32)
    _, loud = flip_(t.clone(), 0, bit_index("float32", "exponent"))
    assert loud > 1e36
    _, quiet = flip_(t.clone(), 0, 0)
    assert quiet != 0.02 and abs(quiet - 0.02) < 1e-8


def test_force_bit_sets_and_clears_and_reports_no_change_when_already_there():
    t = torch.tensor([1.0, 2.0])
    assert read_bit(t, 0, 31) == 0
    assert force_bit_(t, 0, 31, 1) == (1.0, -1.0)
    assert force_bit_(t, 0, 31, 1) == (-1.0, -1.0)
    assert force_bit_(t, 0, 31, 0) == (-1.0, 1.0)


def test_element_outside_the_tensor_is_an_error():
    with pytest.raises(BitFlipError, match=r"element 4 is outside the tensor \(4 elements, shape \[2, 2\]\)"):
        flip_(torch.zeros(2, 2), 4, 0)


# --------------------------------------------------------------------------- names


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(3, 3) for _ in range(3))
        self.head = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.relu(block(x))
        return self.head(x)


def test_names_fold_layer_indices():
    names = [f"blocks.{i}.{p}" for i in range(3) for p in ("weight", "bias")] + ["head.weight"]
    assert compress_names(names) == ["blocks.{0-2}.weight", "blocks.{0-2}.bias", "head.weight"]
    assert compress_names(["a.0.w", "a.2.w"]) == ["a.{0,2}.w"]


def test_catalog_covers_params_grads_optimizer_state_and_modules():
    net = _Net()
    opt = torch.optim.AdamW(net.parameters())
    net(torch.randn(2, 3)).sum().backward()
    opt.step()
    catalog = tensor_catalog(net, opt)
    assert catalog["head.weight"] == {"dtype": "float32", "numel": 6}
    assert "grad:blocks.1.bias" in catalog and "optim:head.weight:exp_avg_sq" in catalog
    assert "act:blocks.2" in catalog and "act:blocks" not in catalog  # a ModuleList never runs


def test_unknown_names_suggest_the_closest_and_list_the_valid_ones():
    catalog = tensor_catalog(_Net())
    with pytest.raises(BitFlipError, match=r"no parameter 'head.wieght' in the model; did you mean "
                                           r"'head.weight'\? valid: parameters .*blocks.\{0-2\}.weight"):
        check_name(parse_spec("head.wieght"), catalog)
    with pytest.raises(BitFlipError, match=r"no module 'blocks.7' .* modules \(act:MODULE\): blocks.\{0-2\}, head"):
        check_name(parse_spec("act:blocks.7"), catalog)
    with pytest.raises(BitFlipError, match="optim:PARAM:KEY"):
        parse_spec("optim:head.weight")


# --------------------------------------------------------------------------- episodes


def _probe(tmp_path, *faults: dict) -> probe_mod.Probe:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "probe_faults.json"
    path.write_text(json.dumps([{"id": f"f{i}", "type": "bitflip", "ranks": [0], "at_step": f.pop("at_step", 2),
                                 "action": "bitflip", "point": f.pop("point", "step_begin"), "seed": 5,
                                 "params": {"element": 0, "bit": "sign", "mode": "once", **f}}
                                for i, f in enumerate(faults)]))
    return probe_mod.Probe(str(tmp_path / "events"), "rank-0", 0, str(path))


def _events(tmp_path, pr: probe_mod.Probe, kind: str) -> list[dict]:
    pr.close()
    return [e for e in read_events(str(tmp_path / "events")) if e["kind"] == kind]


def _steps(pr: probe_mod.Probe, net: nn.Module, opt: torch.optim.Optimizer, steps: range) -> None:
    for step in steps:
        pr.fault_point("step_begin", step=step)
        opt.zero_grad()
        net(torch.ones(2, 3)).sum().backward()
        pr.fault_point("after_backward", step=step)
        opt.step()
        pr.step_end(step, 0.0)


def test_once_flips_a_parameter_at_its_step_and_never_again(tmp_path):
    net = _Net()
    pr = _probe(tmp_path, {"tensor": "head.weight", "at_step": 2})
    pr.watch(model=net)
    before = float(net.head.weight.detach()[0, 0])
    pr.fault_point("step_begin", step=1)
    assert float(net.head.weight.detach()[0, 0]) == before
    pr.fault_point("step_begin", step=2)
    assert float(net.head.weight.detach()[0, 0]) == -before
    pr.fault_point("step_begin", step=3)
    (flip,) = _events(tmp_path, pr, "sdc_flip")
    assert (flip["step"], flip["element"], flip["bit"], flip["after"]) == (2, 0, 31, -before)
    (injected,) = [e for e in read_events(str(tmp_path / "events")) if e["kind"] == "fault_injected"]
    assert injected["mechanism"] == "probe" and injected["tensor"] == "head.weight"


def test_stuck_at_forces_the_bit_for_its_duration_then_lets_go(tmp_path):
    net = _Net()
    pr = _probe(tmp_path, {"tensor": "head.bias", "mode": "stuck_at", "duration_steps": 3,
                           "stuck_value": 1, "at_step": 2})
    pr.watch(model=net)
    bias = net.head.bias
    for step in range(1, 7):
        with torch.no_grad():
            bias[0] = 0.5  # training keeps moving the value; the stuck bit comes back
        pr.fault_point("step_begin", step=step)
        assert read_bit(bias.detach(), 0, 31) == (1 if 2 <= step <= 4 else 0), step
    flips = _events(tmp_path, pr, "sdc_flip")
    assert [e["step"] for e in flips] == [2, 3, 4]
    reverted = [e for e in read_events(str(tmp_path / "events")) if e["kind"] == "fault_reverted"]
    assert [e["step"] for e in reverted] == [5]


def test_gradient_flip_before_the_allreduce_changes_what_backward_accumulates(tmp_path):
    net = _Net()
    reference = _Net()
    reference.load_state_dict(net.state_dict())
    pr = _probe(tmp_path, {"tensor": "grad:head.weight", "grad_phase": "before_allreduce", "at_step": 1})
    pr.watch(model=net)
    pr.fault_point("step_begin", step=1)
    net(torch.ones(2, 3)).sum().backward()
    reference(torch.ones(2, 3)).sum().backward()
    assert float(net.head.weight.grad[0, 0]) == -float(reference.head.weight.grad[0, 0])
    assert torch.equal(net.head.weight.grad.flatten()[1:], reference.head.weight.grad.flatten()[1:])
    # the hook is gone after its step
    pr.fault_point("step_begin", step=2)
    net.zero_grad()
    reference.zero_grad()
    net(torch.ones(2, 3)).sum().backward()
    reference(torch.ones(2, 3)).sum().backward()
    assert torch.equal(net.head.weight.grad, reference.head.weight.grad)


def test_gradient_flip_after_the_allreduce_and_optimizer_state(tmp_path):
    net = _Net()
    opt = torch.optim.AdamW(net.parameters())
    pr = _probe(tmp_path, {"tensor": "grad:head.bias", "point": "after_backward", "at_step": 1},
                {"tensor": "optim:head.bias:exp_avg", "at_step": 3})
    pr.watch(model=net, optimizer=opt)
    _steps(pr, net, opt, range(1, 4))
    flips = _events(tmp_path, pr, "sdc_flip")
    assert [(e["tensor"], e["step"]) for e in flips] == [("grad:head.bias", 1), ("optim:head.bias:exp_avg", 3)]


def test_mercurial_activation_flips_on_seeded_steps_in_every_forward_of_a_bad_step(tmp_path):
    def run(where):
        net = _Net()
        pr = _probe(where, {"tensor": "act:blocks.1", "mode": "mercurial", "flip_probability": 0.5,
                            "element": "random", "bit": "mantissa_high", "at_step": 1})
        pr.watch(model=net)
        for step in range(1, 13):
            pr.fault_point("step_begin", step=step)
            net(torch.ones(2, 3))
            net(torch.ones(2, 3))  # a second forward in the same step (a golden self-test)
        return [(e["step"], e["element"]) for e in _events(where, pr, "sdc_flip")]

    first, again = run(tmp_path / "a"), run(tmp_path / "b")
    assert first == again  # seeded: a rerun draws the same steps and elements
    steps = sorted({s for s, _ in first})
    assert 0 < len(steps) < 12
    assert all(sum(1 for s, _ in first if s == step) == 2 for step in steps)


def test_flip_positions_run_up_a_word_and_on_into_the_next_one():
    assert flip_positions(7, 27, 32, bits=4) == [(7, 27), (7, 28), (7, 29), (7, 30)]
    # past the top bit: the next element's lowest bits (the next word in memory)
    assert flip_positions(7, 30, 32, bits=4) == [(7, 30), (7, 31), (8, 0), (8, 1)]
    assert flip_positions(0, 3, 16, burst=3) == [(0, 3), (1, 3), (2, 3)]
    with pytest.raises(BitFlipError, match="between 1 and the element's width"):
        flip_positions(0, 0, 16, bits=17)


def test_multi_bit_and_burst_flips_change_exactly_their_bits(tmp_path):
    net = _Net()
    before = net.head.weight.detach().clone()
    pr = _probe(tmp_path, {"tensor": "head.weight", "element": 1, "bit": 30, "bits": 4, "at_step": 1},
                {"tensor": "blocks.0.weight", "element": 2, "bit": 0, "burst": 3, "at_step": 1})
    pr.watch(model=net)
    pr.fault_point("step_begin", step=1)
    changed = (before.view(torch.int32) ^ net.head.weight.detach().view(torch.int32)).flatten().tolist()
    assert changed == [0, (1 << 30) | -(1 << 31), 0b11, 0, 0, 0]
    flips = _events(tmp_path, pr, "sdc_flip")
    assert flips[0]["flips"] == [[1, 30], [1, 31], [2, 0], [2, 1]] and flips[0]["element"] == 1
    assert flips[1]["flips"] == [[2, 0], [3, 0], [4, 0]]
    injected = [e for e in read_events(str(tmp_path / "events")) if e["kind"] == "fault_injected"]
    assert (injected[0]["bits"], injected[1]["burst"]) == (4, 3)


def test_gemm_output_corrupts_one_linear_layers_matmul_result_in_the_forward(tmp_path):
    net = _Net()
    reference = _Net()
    reference.load_state_dict(net.state_dict())
    catalog = tensor_catalog(net)
    assert "gemm_output:blocks.1" in catalog and "gemm_output:blocks" not in catalog
    pr = _probe(tmp_path, {"tensor": "gemm_output:blocks.1", "element": 4, "bit": "exponent", "at_step": 1})
    pr.watch(model=net)
    pr.fault_point("step_begin", step=1)
    # observers after the fault's hook: what the layer's consumers get
    seen = []
    net.blocks[1].register_forward_hook(lambda m, i, out: seen.append(out.detach().clone()))
    reference.blocks[1].register_forward_hook(lambda m, i, out: seen.append(out.detach().clone()))
    net(torch.ones(2, 3))
    reference(torch.ones(2, 3))
    corrupted, clean = seen
    differs = (corrupted != clean).flatten().nonzero().flatten().tolist()
    assert differs == [4]
    (flip,) = _events(tmp_path, pr, "sdc_flip")
    assert (flip["tensor"], flip["element"], flip["bit"]) == ("gemm_output:blocks.1", 4, 30)
    with pytest.raises(BitFlipError, match=r"no linear layer 'blocks' .* linear layers \(gemm_output:MODULE\): "
                                           r"blocks.\{0-2\}, head"):
        check_name(parse_spec("gemm_output:blocks"), catalog)


def test_problems_are_reported_as_fault_errors_never_raised_into_training(tmp_path):
    net = _Net()
    pr = _probe(tmp_path, {"tensor": "head.wieght", "at_step": 1}, {"tensor": "head.weight", "bit": 40, "at_step": 1})
    pr.watch(model=net)
    pr.fault_point("step_begin", step=1)
    errors = _events(tmp_path, pr, "fault_error")
    assert "did you mean 'head.weight'" in errors[0]["error"] and "valid:" in errors[0]["error"]
    assert "bit 40 is outside float32" in errors[1]["error"]


def test_a_script_that_never_called_watch_gets_a_clear_fault_error(tmp_path):
    pr = _probe(tmp_path, {"tensor": "head.weight", "at_step": 1})
    pr.fault_point("step_begin", step=1)
    (error,) = _events(tmp_path, pr, "fault_error")
    assert "probe.watch(model=..., optimizer=...)" in error["error"]


# --------------------------------------------------------------------------- registry


def test_actions_are_a_registry_and_an_unknown_one_lists_the_known(tmp_path):
    assert {"bitflip", "device_error", "exit", "slowdown"} <= set(probe_mod.known_actions())
    seen = []

    @probe_mod.register_action("test-note")
    def _note(pr, fault, step, context):
        seen.append((fault["id"], step))

    path = tmp_path / "faults.json"
    path.write_text(json.dumps([{"id": "n", "action": "test-note", "point": "step_end", "at_step": 2},
                                {"id": "u", "action": "no-such", "point": "step_end", "at_step": 3}]))
    pr = probe_mod.Probe(str(tmp_path / "events"), "rank-0", 0, str(path))
    pr.step_end(2, 1.0)
    assert seen == [("n", 2)]
    with pytest.raises(ValueError, match="unknown in-process fault action 'no-such'; known: bitflip"):
        pr.step_end(3, 1.0)
    with pytest.raises(ValueError, match="registered twice"):
        probe_mod.register_action("test-note")(lambda *a: None)
    pr.close()
    probe_core._ACTIONS.pop("test-note")


def test_the_probe_module_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, chaos.probe; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "False"
