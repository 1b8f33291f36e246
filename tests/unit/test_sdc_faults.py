"""The silent-corruption fault types: what the probe is told, the checks a scenario gets
before anything runs, and checkpoint bit rot applied to a file and reverted."""

from __future__ import annotations

import os

import pytest

from chaos.errors import ScenarioError
from chaos.faults.base import known_types
from chaos.faults.sdc.faults import CheckpointBitRot
from chaos.runner.plan import make_plan, probe_instructions
from chaos.scenario.load import parse_scenario


def _scenario(*faults: dict, harness: dict | None = None, command: str | None = None):
    workload = {"command": command} if command else {"harness": harness or {"steps": 60, "model": {"name": "mlp"}}}
    return parse_scenario({"name": "sdc", "seed": 4, "workload": workload,
                           "topology": {"nodes": 2, "ranks_per_node": 1}, "faults": list(faults)}, "sdc.yaml")


def _flip(**params) -> dict:
    return {"type": "bitflip", "target": {"rank": 1}, "trigger": {"at_step": 20}, "params": params}


def test_the_new_types_declare_mechanism_and_fidelity():
    types = known_types()
    for name in ("bitflip", "checkpoint_bitrot"):
        assert types[name].failure_class == "corruption"
        assert types[name].fidelity and types[name].describe_mechanism()
    assert types["bitflip"].in_process and not types["checkpoint_bitrot"].in_process


def test_the_probe_is_told_where_and_gets_a_seed_of_its_own():
    sc = _scenario(_flip(tensor="mlp.0.weight"),
                   _flip(tensor="grad:mlp.0.weight", grad_phase="after_allreduce"),
                   _flip(tensor="grad:mlp.0.weight", grad_phase="before_allreduce"))
    orders = probe_instructions(make_plan(sc, 4))
    assert [o["point"] for o in orders] == ["step_begin", "after_backward", "step_begin"]
    assert all(o["action"] == "bitflip" and o["ranks"] == [1] for o in orders)
    seeds = [o["seed"] for o in orders]
    assert len(set(seeds)) == 3 and seeds == [o["seed"] for o in probe_instructions(make_plan(sc, 4))]
    assert seeds != [o["seed"] for o in probe_instructions(make_plan(sc, 5))]


@pytest.mark.parametrize(("params", "where", "fragment"), [
    ({"tensor": "act:mlp.9"}, "tensor", "no module 'mlp.9' in the model; did you mean 'act:mlp.2'? "
     "valid: modules (act:MODULE): tok_emb, mlp, mlp.{0-2}"),
    ({"tensor": "optim:mlp.0.weight:exp_avgg"}, "tensor", "optimizer state 'exp_avgg' does not exist for "
     "mlp.0.weight; did you mean 'exp_avg'? known: exp_avg, exp_avg_sq, step"),
    ({"tensor": "mlp.0.bias", "element": 1000}, "element", "element 1000 is outside mlp.0.bias (384 elements"),
    ({"tensor": "mlp.0.weight", "duration_steps": 3}, "duration_steps", "only for mode stuck_at or mercurial"),
    ({"tensor": "mlp.0.weight", "stuck_value": 1}, "stuck_value", "only for mode stuck_at"),
    ({"tensor": "mlp.0.weight", "grad_phase": "before_allreduce"}, "grad_phase", "only for a gradient"),
    ({"tensor": "mlp.0.weight", "bits": 33}, "bits", "33 bits: at most the element's width, 32"),
    ({"tensor": "mlp.0.bias", "element": 383, "bit": 31, "bits": 2}, "element",
     "element 383 is outside mlp.0.bias (384 elements: 0-383; the flip spans 2 elements from it)"),
    ({"tensor": "mlp.0.bias", "element": 380, "burst": 5}, "element", "the flip spans 5 elements"),
    ({"tensor": "mlp.0.weight", "mode": "stuck_at", "duration_steps": 2, "burst": 2}, "burst",
     "only for mode once or mercurial"),
    ({"tensor": "gemm_output:tok_emb"}, "tensor", "no linear layer 'tok_emb'"),
])
def test_bitflip_params_are_checked_against_the_harness_model(params, where, fragment):
    with pytest.raises(ScenarioError) as info:
        _scenario(_flip(**params))
    text = str(info.value)
    assert f"faults[0].params.{where}: " in text and fragment in text, text


def test_a_commands_tensor_names_wait_for_the_run():
    sc = _scenario(_flip(tensor="my.layer.weight", bit=31), command="python train.py")
    assert sc.faults[0].params["tensor"] == "my.layer.weight"


def _checkpoint(run_dir, step: int, payload: bytes) -> str:
    directory = os.path.join(run_dir, "checkpoints", f"step-{step:08d}")
    os.makedirs(directory)
    with open(os.path.join(directory, "MANIFEST.json"), "w") as fh:
        fh.write("{}")
    path = os.path.join(directory, "state.pt")
    with open(path, "wb") as fh:
        fh.write(payload)
    return path


class _Ctx:
    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir


def test_bitrot_flips_one_bit_of_the_newest_checkpoint_and_reverts_it(tmp_path):
    _checkpoint(str(tmp_path), 10, b"\x00" * 64)
    newest = _checkpoint(str(tmp_path), 20, b"\x00" * 64)
    os.makedirs(tmp_path / "checkpoints" / "step-00000030")  # incomplete: no manifest
    fault = CheckpointBitRot(fault_id="f0", target=None, params={"path": "checkpoints", "offset": None,
                                                                  "bit": None}, seed=9)
    record = fault.inject(_Ctx(str(tmp_path)))
    assert record["path"] == newest
    data = open(newest, "rb").read()
    assert data[record["offset"]] == 1 << record["bit"] and sum(data) == 1 << record["bit"]
    again = CheckpointBitRot(fault_id="f0", target=None, params=dict(fault.params), seed=9)
    assert again._file(str(tmp_path)) == newest
    CheckpointBitRot.revert_record(record)
    CheckpointBitRot.revert_record(record)  # idempotent
    assert open(newest, "rb").read() == b"\x00" * 64


def test_bitrot_at_a_given_offset_and_bit(tmp_path):
    path = _checkpoint(str(tmp_path), 10, b"\xff" * 8)
    fault = CheckpointBitRot(fault_id="f0", target=None, params={"path": path, "offset": 3, "bit": 0})
    record = fault.inject(_Ctx(str(tmp_path)))
    assert open(path, "rb").read() == b"\xff\xff\xff\xfe" + b"\xff" * 4
    assert (record["byte_before"], record["byte_after"]) == (0xFF, 0xFE)
    with pytest.raises(ValueError, match="beyond the end"):
        CheckpointBitRot(fault_id="f1", target=None, params={"path": path, "offset": 99, "bit": 0}).inject(
            _Ctx(str(tmp_path)))
