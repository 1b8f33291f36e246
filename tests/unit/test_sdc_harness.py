"""The harness's silent-corruption detectors: each verdict from the evidence every rank
gathers (who is blamed, and from which step checkpoints are suspect), the golden self-test,
checkpoint checksums and quarantine, and the switches."""

from __future__ import annotations

import math
import os

import pytest
import torch
from torch import nn

from chaos.probe.bitflip_bits import flip_
from harness.checkpoint import QUARANTINE_DIR, CheckpointManager
from harness.config import DetectConfig, HarnessConfig
from harness.config_load import config_from_args, config_to_args
from harness.sdc import (
    DIGEST_AFTER_UPDATE,
    DIGEST_BEFORE_UPDATE,
    DIGEST_WORDS,
    ROW,
    GoldenSelfTest,
    RobustSpike,
    SdcMonitor,
    bits_checksum,
    digest_words,
    param_digest,
    update_fingerprint,
    words_of,
)


def _monitor(world: int = 2, start_step: int = 0, **detect) -> SdcMonitor:
    return SdcMonitor(DetectConfig(**detect), 0, world, nn.Linear(2, 2), start_step)


def _row(loss: float = 2.0, norm: float = 1.0, golden: float = 0.0, digest: tuple | None = None,
         fingerprint: tuple | None = None) -> list[float]:
    """``fingerprint``: 6 words (parameters, gradients, optimizer state); the coverage is
    "everything the update reads" when the last four are set, else "parameters"."""
    row = [loss, norm, golden, 1.0 if digest else 0.0, *(digest or (0.0,) * 4), 0.0]
    if fingerprint:
        row += [2.0 if any(fingerprint[2:]) else 1.0, *fingerprint]
    else:
        row += [0.0] * 7
    row.append(0.0)  # host time (harness.slowrank)
    assert len(row) == ROW
    return row


def _warm(monitor: SdcMonitor, values: int = 30) -> None:
    for i in range(values):
        monitor.loss_spikes.add(2.0 + 0.01 * (i % 5))
        monitor.norm_spikes.add(1.0 + 0.01 * (i % 3))


# --------------------------------------------------------------------------- verdicts


def test_a_non_finite_local_loss_on_one_rank_names_that_rank():
    (det,) = _monitor()._judge(7, [_row(), _row(loss=math.nan)], math.nan, True)
    assert (det.detector, det.suspect, det.clean_before) == ("nonfinite", "rank-1", 7)
    # one rank alone: its own computation is the only one there is (issue 23: every topology)
    (det,) = _monitor(world=1)._judge(7, [_row(loss=math.nan)], math.nan, True)
    assert det.suspect == "rank-0" and "on the only rank" in det.reason


def test_overflow_everywhere_after_the_allreduce_is_blamed_on_the_odd_local_loss():
    monitor = _monitor()
    _warm(monitor)
    (det,) = monitor._judge(9, [_row(norm=math.inf), _row(loss=1e30, norm=math.inf)], 5e29, True)
    assert det.suspect == "rank-1" and "odd one out" in det.reason
    (det,) = monitor._judge(9, [_row(norm=math.inf), _row(norm=math.inf)], 2.0, True)
    assert det.suspect is None and "names no rank" in det.reason


def test_a_flipped_attention_weight_is_blamed_on_the_rank_whose_own_gradients_overflowed():
    """Issue 23: 3 nodes x 2 ranks, the top exponent bit of an attention weight on rank 2.
    Its loss stays finite (softmax saturates) but its own gradients are NaN, and the
    all-reduce makes every rank's gradient norm NaN; the local gradients the all-gather
    brought every rank (before the average) still say whose backward it was."""
    from harness.dist import GradientGather

    world = 6
    local = GradientGather()
    clean = [torch.ones(4) * (r + 1) for r in range(world)]
    local.keep(0, clean)
    local.keep(1, [*(torch.ones(2) for _ in range(2)), torch.tensor([math.nan, 1.0]),
                   *(torch.ones(2) for _ in range(3))])
    monitor = SdcMonitor(DetectConfig(), 0, world, nn.Linear(2, 2), 0, gather=local)
    _warm(monitor)
    rows = [_row(loss=2.0 + 0.01 * r, norm=math.nan) for r in range(world)]
    (det,) = monitor._judge(50, rows, 2.02, True)
    assert (det.detector, det.suspect, det.clean_before) == ("nonfinite", "rank-2", 50)
    assert "rank 2's own gradients, before the all-reduce" in det.reason
    # An overflow only (a gradient flipped before the all-reduce: 3e35, finite) counts too:
    # the norm of that rank's own gradients is inf, as the guard's own norm would say.
    local.keep(0, [*clean[:1], clean[1] * 3e35, *clean[2:]])
    assert monitor._judge(50, rows, 2.02, True)[0].suspect == "rank-1"
    # Two ranks' own gradients non-finite: the evidence names no one.
    local.keep(0, [clean[0] * math.inf, clean[1] * 3e35, *clean[2:]])
    assert monitor._judge(50, rows, 2.02, True)[0].suspect is None
    # Bucket 0 starts a new backward: nothing of the last one is kept beside it.
    local.keep(0, clean)
    assert local.local_norms() == [float(torch.linalg.vector_norm(t)) for t in clean]


def test_two_replicas_that_differ_cannot_say_which_is_wrong_three_can():
    a, b = (1.0, 2.0, 3.0, 4.0), (1.0, 2.0, 3.0, 5.0)
    monitor = _monitor(world=2, start_step=20)
    (det,) = monitor._judge(30, [_row(digest=a), _row(digest=b)], 2.0, True)
    assert (det.detector, det.suspect, det.clean_before) == ("digest", None, 21)
    (det,) = _monitor(world=3)._judge(30, [_row(digest=a), _row(digest=b), _row(digest=a)], 2.0, True)
    assert det.suspect == "rank-1" and "rank 1 differs from the majority" in det.reason


def test_an_agreeing_digest_moves_the_step_the_next_rollback_may_keep():
    monitor = _monitor(world=2)
    assert monitor._judge(10, [_row(digest=(1.0,) * 4)] * 2, 2.0, True) == []
    (det,) = monitor._judge(20, [_row(digest=(1.0,) * 4), _row(digest=(2.0,) * 4)], 2.0, True)
    assert det.clean_before == 11


def test_gradients_that_differ_after_the_allreduce_are_a_replica_mismatch_every_step():
    (det,) = _monitor(world=3)._judge(5, [_row(norm=1.0), _row(norm=1.5), _row(norm=1.0)], 2.0, True)
    assert (det.detector, det.suspect, det.clean_before) == ("digest", "rank-1", 5)


def test_a_flip_of_any_single_bit_changes_the_exact_checksum():
    torch.manual_seed(0)
    tensors = [torch.randn(7, 5), torch.randn(3).double(), torch.randn(4).half(), torch.randn(6).bfloat16()]
    reference = bits_checksum(tensors)
    assert bits_checksum([t.clone() for t in tensors]) == reference
    for tensor in tensors:
        width = tensor.element_size() * 8
        for bit in range(width):
            for index in (0, tensor.numel() - 1):
                flip_(tensor, index, bit)
                assert bits_checksum(tensors) != reference, (tensor.dtype, bit, index)
                flip_(tensor, index, bit)
    assert bits_checksum(tensors) == reference
    # a non-contiguous view is read in its logical order, like the tensor it equals
    weight = torch.randn(4, 6)
    assert bits_checksum([weight.t()]) == bits_checksum([weight.t().contiguous()])


def test_the_checksum_kept_across_steps_sees_what_the_one_off_sees(monkeypatch):
    """The fingerprint's checksum of every step reads large tensors where they lie and copies
    the small ones into a buffer it keeps: which tensor goes where must not change the sum,
    and a flip in either kind, or a tensor swapped for another, must show."""
    import harness.sdc_checksum as checksum

    torch.manual_seed(0)
    tensors = [torch.randn(300, 100), torch.randn(3).double(), torch.randn(5).half(), torch.randn(7),
               torch.randn(40_000)[1:33_001], torch.randn(20_000)]
    reference = bits_checksum(tensors)
    for in_place_from in (8, 1 << 40):  # everything whole in place; everything copied
        monkeypatch.setattr(checksum, "_SUMMED_IN_PLACE", in_place_from)
        assert bits_checksum(tensors) == reference
    kept = checksum.BitsChecksum()
    assert kept(tensors) == kept(tensors) == reference
    for tensor, index in ((tensors[0], 7), (tensors[3], 0), (tensors[2], 4)):
        flip_(tensor, index, 0)
        assert kept(tensors) != reference and kept(tensors) == bits_checksum(tensors)
        flip_(tensor, index, 0)
    assert kept(tensors) == reference
    tensors[5] = tensors[5].clone()  # swapped, equal bits
    assert kept(tensors) == reference
    tensors[5][0] += 1
    assert kept(tensors) == bits_checksum(tensors) != reference


@pytest.mark.parametrize("width", [6, 5])
def test_parameters_in_one_buffer_are_checksummed_and_hashed_as_one(width):
    """The harness's parameters tile one buffer (harness.model.flatten_parameters): the
    checksum and the digest read it in one pass, and must say what they say of the same
    tensors scattered -- a flip in the buffer included, and a parameter moved out of it.
    ``width`` 5: tensors of odd sizes (not whole 64-bit words), checksummed the usual way."""
    import harness.sdc_checksum as checksum
    from harness.model import flatten_parameters

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, width), nn.LayerNorm(width), nn.Linear(width, 4))
    scattered = [p.detach().clone() for p in model.parameters()]  # separate tensors, equal bits
    digest = param_digest(model)
    assert flatten_parameters(model) is not None
    params = list(model.parameters())
    kept, digests = checksum.BitsChecksum(), checksum.ParamDigest(model)
    assert kept(params) == bits_checksum(scattered) and digests() == digest
    assert len(digests._views) == 1  # one pass
    assert (len(kept._direct) == 1 and not kept._packed) == (width % 2 == 0)
    for param, index, bit in ((params[0], 0, 0), (params[3], 4, 31), (params[5], 2, 17)):
        flip_(param.data, index, bit)
        assert kept(params) != bits_checksum(scattered) and digests() != digest
        assert kept(params) == bits_checksum([p.detach().clone() for p in params])
        flip_(param.data, index, bit)
    assert kept(params) == bits_checksum(scattered) and digests() == digest
    params[2].data = params[2].data.clone()  # out of the buffer: a gap where it was
    params[2].data[0] += 1
    assert kept(params) == bits_checksum([p.detach().clone() for p in params]) != bits_checksum(scattered)
    assert digests() == param_digest(model) != digest and len(digests._views) == len(params)


def test_the_spike_window_kept_sorted_scores_as_sorting_it_each_time():
    import random

    def score(values, value):  # the definition: median and MAD of the window, sorted afresh
        ordered = sorted(values)
        median = ordered[len(ordered) // 2]
        mad = sorted(abs(v - median) for v in ordered)[len(ordered) // 2]
        return (value - median) / max(1.4826 * mad, 1e-3 * abs(median), 1e-12)

    rng = random.Random(1)
    for window in (20, 21, 50):
        spike = RobustSpike(window, threshold=6.0)
        for _ in range(600):
            value = rng.choice([rng.random(), rng.gauss(0, 1e6), float(rng.randint(0, 3)), math.nan, 1e300])
            if len(spike.values) >= 20 and math.isfinite(value):
                assert spike.score(value) == score(spike.values, value)
            spike.add(value)
        assert len(spike.values) == window


def test_checksum_words_are_exact_in_float64():
    for value in (0, 1, (1 << 64) - 1, 0x8000_0000_0000_0001, 123456789 << 30):
        high, low = words_of(value)
        assert int(high) << 32 | int(low) == value and float(int(high)) == high
    assert update_fingerprint([torch.ones(2)])[1:] == (0, 0)


def test_replicas_whose_update_inputs_differ_are_seen_at_that_step():
    a, b = (1.0, 2.0, 0.0, 0.0, 0.0, 0.0), (1.0, 3.0, 0.0, 0.0, 0.0, 0.0)
    full, full_optim = (1.0, 2.0, 7.0, 7.0, 5.0, 5.0), (1.0, 2.0, 7.0, 7.0, 5.0, 6.0)
    monitor = _monitor(world=2, start_step=10, digest_every=0)
    assert monitor._judge(23, [_row(fingerprint=a), _row(fingerprint=a)], 2.0, True) == []
    (det,) = monitor._judge(24, [_row(fingerprint=a), _row(fingerprint=b)], 2.0, True)
    assert (det.detector, det.step, det.suspect) == ("fingerprint", 24, None)
    assert "parameters differ bitwise before the update of step 24" in det.reason
    # parameters alone vouch for nothing checkpointed: an optimizer state flipped since the
    # state loaded at start may be in a checkpoint before it moved a parameter
    assert det.clean_before == 11
    # a step that ends in a checkpoint compares everything the update reads: its checkpoint
    # is clean, and so the next rollback keeps it
    assert monitor._judge(30, [_row(fingerprint=full), _row(fingerprint=full)], 2.0, True) == []
    (det,) = monitor._judge(33, [_row(fingerprint=a), _row(fingerprint=b)], 2.0, True)
    assert det.clean_before == 31
    # the optimizer state differs while the parameters agree: seen on a checkpoint step
    (det,) = monitor._judge(40, [_row(fingerprint=full), _row(fingerprint=full_optim)], 2.0, True)
    assert det.clean_before == 31 and "replicas' optimizer state differ" in det.reason
    monitor = _monitor(world=3, fingerprint="update")
    assert monitor._judge(8, [_row(fingerprint=full)] * 3, 2.0, True) == []
    (det,) = monitor._judge(9, [_row(fingerprint=full), _row(fingerprint=full), _row(fingerprint=full_optim)],
                            2.0, True)
    assert (det.suspect, det.clean_before) == ("rank-2", 9)
    # a rank that sent no fingerprint this step (a caller that skipped it): no verdict
    assert _monitor(world=2)._judge(9, [_row(fingerprint=a), _row()], 2.0, True) == []
    assert _monitor(world=2, fingerprint="off")._judge(9, [_row(fingerprint=a), _row(fingerprint=b)],
                                                       2.0, True) == []


def test_the_fingerprint_covers_what_its_mode_names(one_rank_group):
    model = nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    seen = {}
    for mode, verify in (("params", False), ("params", True), ("update", False)):
        monitor = SdcMonitor(DetectConfig(fingerprint=mode), 0, 1, model, 0)
        monitor.fingerprint(optimizer, verify)
        seen[mode, verify] = list(monitor._fingerprint)
        monitor.end_step(1, torch.tensor(1.0), 1.0, verify=verify)
        assert monitor._fingerprint is None and monitor.detector_seconds()["fingerprint"] >= 0
    params, full = seen["params", False], seen["update", False]
    assert params[0] == 1.0 and params[3:] == [0.0] * 4
    assert full[0] == 2.0 and full[1:3] == params[1:3] and full[3:5] != [0.0, 0.0] and full[5:] != [0.0, 0.0]
    assert seen["params", True] == full  # a step that ends in a checkpoint: all of it
    # the parameter views are made once: they must follow in-place updates and swapped storage
    monitor = SdcMonitor(DetectConfig(), 0, 1, model, 0)
    for change in (lambda: optimizer.step(), lambda: setattr(model.weight, "data", model.weight.data + 1.0),
                   lambda: setattr(model.bias, "data", torch.zeros(4)[::2])):
        change()
        monitor.fingerprint(optimizer)
        assert monitor._fingerprint[1:3] == words_of(bits_checksum(model.parameters()))
    off = SdcMonitor(DetectConfig(fingerprint="off"), 0, 1, model, 0)
    off.fingerprint(optimizer)
    assert off._fingerprint is None


def test_a_failed_golden_self_test_names_its_rank_and_rolls_back_to_the_last_pass():
    monitor = _monitor(world=2, start_step=0)
    assert monitor._judge(50, [_row(golden=1.0), _row(golden=1.0)], 2.0, True) == []
    (det,) = monitor._judge(100, [_row(golden=1.0), _row(golden=-1.0)], 2.0, True)
    assert (det.detector, det.suspect, det.clean_before) == ("golden", "rank-1", 51)


def test_spikes_need_history_and_a_loss_spike_of_one_rank_names_it():
    monitor = _monitor()
    assert monitor._judge(3, [_row(loss=500.0), _row()], 251.0, True) == []  # no history yet
    _warm(monitor)
    (det,) = monitor._judge(40, [_row(), _row(loss=500.0)], 251.0, True)
    assert (det.detector, det.suspect) == ("spike", "rank-1")
    (det,) = monitor._judge(41, [_row(norm=1e6), _row(norm=1e6)], 2.0, True)
    assert (det.detector, det.suspect) == ("spike", None) and "gradient-norm" in det.reason


def test_switched_off_detectors_stay_silent():
    monitor = _monitor(nonfinite=False, spike=False, digest_every=0, fingerprint="off")
    _warm(monitor)
    table = [_row(loss=math.nan, norm=1e9, digest=(1.0,) * 4, fingerprint=(1.0,) * 6),
             _row(norm=2.0, digest=(2.0,) * 4, fingerprint=(2.0,) * 6)]
    assert monitor._judge(10, table, math.nan, True) == []


def test_robust_spike_floors_the_scale_of_a_flat_window():
    spike = RobustSpike(window=50, threshold=25)
    for _ in range(30):
        spike.add(2.0)
    assert not spike.is_spike(2.01)  # within 0.1 % of a flat window: noise, not a spike
    assert spike.is_spike(2.5)
    spike.add(math.inf)
    assert len(spike.values) == 30


# --------------------------------------------------------------------------- golden


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(5, 4)
        self.out = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(x))


def test_golden_self_test_tests_the_arithmetic_not_the_training_weights():
    torch.manual_seed(0)
    model, initial = _Tiny(), _Tiny()
    golden = GoldenSelfTest(model, initial, torch.arange(20) % 5, seq_len=4)
    with torch.no_grad():
        model.out.weight.mul_(3.0)  # training moved the weights: irrelevant to the self-test
    assert golden.passes()
    handle = model.emb.register_forward_hook(lambda m, i, out: out * (1 + 2 ** -20))
    assert not golden.passes()  # arithmetic that went wrong on this rank
    handle.remove()
    assert golden.passes()


# --------------------------------------------------------------------------- one rank, for real


def test_end_step_returns_the_loss_and_records_what_a_checkpoint_was_verified_with(one_rank_group):
    model = nn.Linear(2, 2)
    monitor = SdcMonitor(DetectConfig(digest_every=10), 0, 1, model, 0)
    assert monitor.end_step(5, torch.tensor(2.5), 1.0, verify=True) == 2.5
    record = monitor.checkpoint_record(5)
    assert record["param_sha256"] == param_digest(model).hex() and record["checks"]["digest"] == 5
    assert monitor.checkpoint_record(6).get("param_sha256") is None
    assert math.isnan(monitor.end_step(6, torch.tensor(math.nan), 1.0, verify=False))
    assert monitor.detection is not None and monitor.detection.detector == "nonfinite"
    assert set(monitor.detector_seconds()) >= {"digest", "judge"}


def test_a_verdict_the_replay_reaches_again_is_reported_not_rolled_back(one_rank_group):
    monitor = SdcMonitor(DetectConfig(), 0, 1, nn.Linear(2, 2), 0, replayed=[("nonfinite", 6)])
    monitor.end_step(6, torch.tensor(math.inf), 1.0, verify=False)
    assert monitor.detection is None and [d.detector for d in monitor.reproduced] == ["nonfinite"]
    monitor.end_step(7, torch.tensor(math.inf), 1.0, verify=False)
    assert monitor.detection is not None and monitor.detection.step == 7


def test_all_detectors_off_falls_back_to_a_plain_loss_allreduce(one_rank_group):
    cfg = DetectConfig(nonfinite=False, spike=False, digest_every=0, golden_every=0, fingerprint="off")
    monitor = SdcMonitor(cfg, 0, 1, nn.Linear(2, 2), 0)
    assert not monitor.active and not monitor.needs_grad_norm
    assert monitor.end_step(1, torch.tensor(3.0), None, verify=True) == 3.0


# --------------------------------------------------------------------------- checkpoints


def _manager(directory, emitted: list | None = None, **kwargs) -> CheckpointManager:
    def emit(kind, **fields):
        if emitted is not None:
            emitted.append((kind, fields))

    return CheckpointManager(str(directory), keep=5, mode="sync", every_steps=10, every_seconds=0,
                             is_writer=True, emit=emit, **kwargs)


def _state(step: int) -> dict:
    return {"step": step, "w": torch.arange(256, dtype=torch.float32) + step}


def _rot(directory, step: int, value: float) -> None:
    path = os.path.join(directory, f"step-{step:08d}", "state.pt")
    data = bytearray(open(path, "rb").read())
    needle = torch.tensor([value], dtype=torch.float32).numpy().tobytes()
    offset = bytes(data).index(needle)
    data[offset] ^= 1
    with open(path, "wb") as fh:
        fh.write(data)


def test_a_rotten_checkpoint_is_reported_as_corruption_and_skipped(tmp_path):
    emitted: list = []
    manager = _manager(tmp_path, emitted)
    manager.save(10, _state(10), verified={"step": 10, "param_sha256": "ab"})
    manager.save(20, _state(20))
    _rot(tmp_path, 20, 150.0)
    state, info = manager.load()
    assert info.step == 10 and "sha256 mismatch" in info.skipped[0][1]
    detected = [f for kind, f in emitted if kind == "detected"]
    assert detected and detected[0]["detector"] == "ckpt_checksum" and detected[0]["failure_class"] == "corruption"
    manifest = open(os.path.join(tmp_path, "step-00000010", "MANIFEST.json")).read()
    assert '"param_sha256": "ab"' in manifest


def test_without_checksums_the_rotten_bytes_are_loaded_silently(tmp_path):
    manager = _manager(tmp_path, verify_checksum=False)
    manager.save(20, _state(20))
    _rot(tmp_path, 20, 150.0)
    state, info = manager.load()
    assert info.step == 20 and state["w"][130].item() != 150.0


def test_a_checkpoint_whose_file_reads_back_other_bytes_is_refused_on_save(tmp_path, monkeypatch):
    import io

    import harness.ckpt_writer as writer

    real_open = open

    def rotten_on_the_way(path, mode="r", *args, **kwargs):  # the file system returns one bit off
        f = real_open(path, mode, *args, **kwargs)
        if mode == "rb" and str(path).endswith(writer.STATE_FILE):
            data = bytearray(f.read())
            f.close()
            data[len(data) // 2] ^= 1
            return io.BytesIO(bytes(data))
        return f

    monkeypatch.setattr(writer, "open", rotten_on_the_way, raising=False)
    options = {"verified": None, "durable": False, "fsync_enabled": False, "fault_point": None}
    with pytest.raises(writer.CheckpointError, match="reads back different bytes than were written"):
        writer.write_files(str(tmp_path), 10, _state(10), verify_checksum=True, **options)
    assert writer.write_files(str(tmp_path), 10, _state(10), verify_checksum=False, **options)["step"] == 10


def test_quarantine_takes_suspect_checkpoints_out_of_reach_and_logs_why(tmp_path):
    manager = _manager(tmp_path)
    for step in (10, 20, 30):
        manager.save(step, _state(step))
    assert manager.quarantine(21, {"detector": "digest", "step": 33}) == [30]
    assert manager.load()[1].step == 20
    assert len(os.listdir(tmp_path / QUARANTINE_DIR)) == 2  # the checkpoint and the log
    (record,) = manager.rollback_records()
    assert (record["detector"], record["from_step"], record["quarantined"]) == ("digest", 21, [30])


# --------------------------------------------------------------------------- switches


def test_detectors_that_are_on_by_default_can_be_switched_off_from_the_command_line():
    cfg = config_from_args(["--no-detect-spike", "--detect-digest-every", "0", "--detect-fingerprint", "off"])
    assert cfg.detect.spike is False and cfg.detect.nonfinite is True and cfg.detect.digest_every == 0
    assert cfg.detect.fingerprint == "off" and HarnessConfig().detect.fingerprint == "params"
    assert config_from_args(config_to_args(cfg)) == cfg
    assert config_from_args(config_to_args(HarnessConfig())) == HarnessConfig()


def test_the_evidence_rides_on_the_gradient_gather_and_only_late_steps_add_a_collective(one_rank_group, monkeypatch):
    """Issue 25.4: the rows travel with the gradient all-gather DDP does anyway; a collective of
    their own only on steps that need evidence from after the update (a checkpoint). A periodic
    digest rides with the fingerprint: of the parameters the update is about to read."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from harness.dist import GradientGather, deterministic_allreduce_hook

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    ddp = DistributedDataParallel(model)
    gather = GradientGather()
    ddp.register_comm_hook(gather, deterministic_allreduce_hook)
    opt = torch.optim.AdamW(model.parameters())
    monitor = SdcMonitor(DetectConfig(digest_every=3), 0, 1, model, 0, gather=gather)
    reduces = []
    real = dist.all_reduce
    monkeypatch.setattr(dist, "all_reduce", lambda t, *a, **k: (reduces.append(t.numel()), real(t, *a, **k))[1])
    for step in (1, 2, 3, 4):
        loss = ddp(torch.ones(2, 3)).sum()
        opt.zero_grad()
        digest_before = param_digest(model)
        monitor.before_backward(step, loss.detach(), verify=step == 4, stop=step == 2, host_s=lambda: 0.25)
        loss.backward()
        norm = monitor.grad_norm(model)
        monitor.fingerprint(opt, verify=step == 4)
        opt.step()
        global_loss = monitor.end_step(step, loss.detach(), norm, verify=step == 4, stop=False, host_s=0.25)
        assert global_loss == float(loss) and monitor.detection is None
        assert monitor.stop_votes == ([0] if step == 2 else []) and monitor.host_times == [0.25]
        if step < 4:
            assert not reduces  # the rows came with the gradients, the digest of step 3 too
            # the averaged gradient's norm, taken in the hook, is the one the guard judges
            assert norm == pytest.approx(float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])))
        if step == 3:
            # the digest of the parameters step 3's update read: it vouches for step 2's state
            assert gather.rows[0][4:4 + DIGEST_WORDS].tolist() == digest_words(digest_before)
            assert monitor.last_pass["digest"] == 2 and monitor.checkpoint_record(3).get("param_sha256") is None
    assert reduces == [ROW]  # step 4 ends in a checkpoint: the full row after the update
    assert monitor.last_pass["digest"] == 4
    assert monitor.checkpoint_record(4)["param_sha256"] == param_digest(model).hex()
    # a non-finite gradient is judged from what came with the gather, at its own step
    loss = ddp(torch.ones(2, 3)).sum() * math.inf
    monitor.before_backward(4, loss.detach(), verify=False)
    loss.backward()
    monitor.end_step(4, loss.detach(), monitor.grad_norm(model), verify=False)
    assert monitor.detection is not None and monitor.detection.detector == "nonfinite" and len(reduces) == 1


def test_a_digest_taken_before_the_update_blames_the_steps_after_the_state_it_vouched_for():
    monitor = _monitor(digest_every=10)
    before = _row(digest=(7.0, 7.0, 7.0, 7.0))
    before[3] = DIGEST_BEFORE_UPDATE
    assert monitor._judge(10, [before, list(before)], 2.0, False) == []
    assert monitor.last_pass["digest"] == 9  # what step 10's update read: the state after step 9
    other = list(before)
    other[4] = 8.0
    (det,) = monitor._judge(20, [before, other], 2.0, False)
    assert (det.detector, det.clean_before) == ("digest", 10)
    after = _row(digest=(7.0, 7.0, 7.0, 7.0))
    assert after[3] == DIGEST_AFTER_UPDATE and monitor._judge(30, [after, list(after)], 2.0, False) == []
    assert monitor.last_pass["digest"] == 30


class _Bucket:
    """What the comm hook reads of DDP's GradBucket."""

    def __init__(self, values: list[float]) -> None:
        self._buffer = torch.tensor(values)

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def index(self) -> int:
        return 0

    def is_last(self) -> bool:
        return True


def test_a_gather_that_failed_fails_the_backward_instead_of_averaging_stale_buffers(monkeypatch):
    """A peer killed mid-step fails the gradient all-gather. ``Future.then`` runs its callback
    on a failed future too and completes the child with what the callback returns: unless
    the hook waits on the gather, DDP got an "average" of uninitialised buffers and the rows
    it carried, and the corruption detectors blamed a mismatch where a peer had crashed
    (a false SDC verdict in a kill_rank run)."""
    import torch.distributed as dist

    from harness.dist import GradientGather, deterministic_allreduce_hook

    class FailedGather:
        def get_future(self) -> torch.futures.Future:
            future = torch.futures.Future()
            future.set_exception(RuntimeError("Connection closed by peer [127.0.0.1]:4242"))
            return future

    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(dist, "all_gather", lambda outputs, send, group=None, async_op=False: FailedGather())
    gather = GradientGather(group=object())
    gather.send(lambda: torch.tensor([1.0, 2.0], dtype=torch.float64))
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        deterministic_allreduce_hook(gather, _Bucket([0.5, 0.25])).wait()
    assert gather.rows is None  # no evidence row of a step that did not happen
