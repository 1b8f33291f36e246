"""benchmarks/sdc_escape.py: how a trial's per-step record becomes each detector's verdict
(the study runs for minutes on real ranks; its judging is checked here on made-up records)."""

from __future__ import annotations

import importlib.util
import pathlib

_PATH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "sdc_escape.py"
_spec = importlib.util.spec_from_file_location("sdc_escape", _PATH)
escape = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(escape)

FLIP, LAST = 23, 60


def _trial(kind: str = "weight", final_equal: bool = False, **steps: list[int]) -> dict:
    record = {"kind": kind, "bit": 0, "bit_class": "low (bit 0)", "final_equal": final_equal}
    for name in escape.COLUMNS + escape.FP_COLUMNS:
        record[name] = steps.get(name, [])
    return record


def test_a_weight_flip_the_updates_round_away_escapes_a_sparse_digest_not_the_fingerprint():
    # rank 1's flipped weight differs before and after the updates of steps 23-27, then the
    # replicas agree again, every one of them off the fault-free trajectory
    trial = _trial(pre_params=list(range(23, 28)), post_params=list(range(23, 27)))
    found = {d: escape.detection_step(trial, d, FLIP, LAST) for d in escape.DETECTORS}
    assert found["digest/1"] == 23 and found["digest/2"] == 24 and found["digest/5"] == 25
    assert found["digest/10"] is None  # step 30: the replicas agree again
    assert found["fingerprint:params"] == 23 and found["fingerprint:update"] == 23


def test_optimizer_state_is_compared_every_step_with_update_and_on_checkpoint_steps_with_params():
    trial = _trial(kind="exp_avg", pre_optim=list(range(23, 35)))
    assert escape.detection_step(trial, "fingerprint:update", FLIP, LAST) == 23
    assert escape.detection_step(trial, "fingerprint:params", FLIP, LAST) == 30
    assert escape.detection_step(trial, "digest/1", FLIP, LAST) is None
    healed = _trial(kind="exp_avg", final_equal=True, pre_optim=[23, 24])
    assert escape.detection_step(healed, "fingerprint:params", FLIP, LAST) is None


def test_the_gradient_norms_are_compared_every_step_by_every_variant():
    trial = _trial(kind="grad", norm=[23])
    assert all(escape.detection_step(trial, d, FLIP, LAST) == 23 for d in escape.DETECTORS)


def test_outcomes_add_up_per_cell_and_the_checksum_guarantee_is_checked_at_first_divergence():
    records = [
        _trial(pre_params=list(range(23, 28)), post_params=list(range(23, 27)),
               fp_params=list(range(23, 28))),                                      # escapes digest/10
        _trial(kind="exp_avg", final_equal=True, pre_optim=[23], fp_optim=[23]),   # heals
        {**_trial(kind="control", final_equal=True), "bit_class": None},
    ]
    result = escape.summarize(records, FLIP, LAST)
    assert (result["controls"], result["controls_equal_to_reference"]) == (1, 1)
    assert result["fingerprint_first_divergence_misses"] == 0
    weight = next(c for c in result["cells"] if c["kind"] == "weight")
    assert weight["n"] == 1 and weight["digest/10"]["escaped_pct"] == 100.0
    assert weight["fingerprint:params"]["detected_pct"] == 100.0
    optim = next(c for c in result["cells"] if c["kind"] == "exp_avg")
    assert optim["fingerprint:params"]["healed_pct"] == 100.0
    assert optim["fingerprint:update"]["detected_pct"] == 100.0
    for cell in result["cells"]:
        for d in escape.DETECTORS:
            v = cell[d]
            assert v["detected_pct"] + v["escaped_pct"] + v["healed_pct"] == 100.0
    records[0]["fp_params"] = [24, 25]  # a checksum that missed the first differing step
    assert escape.summarize(records, FLIP, LAST)["fingerprint_first_divergence_misses"] == 1
    assert "| weight | low (bit 0) | 1 |" in escape.markdown(result)
