"""Silent-data-corruption detectors: how the harness notices a flipped bit, and whom it blames.

Each detector is switched by a ``detect`` option and timed (``run_end.detector_s``):

``nonfinite``
    Every step: a non-finite local loss or gradient norm on any rank.
``spike``
    Every step: the global loss or the gradient norm far above the recent steps, as a
    robust z-score ``(x - median) / (1.4826 * MAD)`` over the last ``spike_window`` finite
    values (judged once 20 are there; only upward; a spike is not added to the window).
``digest``
    Every ``digest_every`` steps and before every checkpoint save: a sha256 of each rank's
    parameters. Data-parallel replicas must be bitwise equal (the harness's all-reduce is
    deterministic). Every step, for free: the gradient norms of all ranks, which are equal
    after the all-reduce unless a rank's gradients were changed after it.
``fingerprint``
    Every step, *before* the optimizer update (after every flip point of the step): an exact
    integer checksum of the bits of each rank's parameters (``params``) or of everything the
    update reads (``update``: parameters, gradients after the all-reduce, optimizer state),
    compared across replicas; on a step that ends in a checkpoint, everything the update
    reads whatever the mode, so no checkpoint is written of a replica that differs. Each
    tensor's elements are read as integers (their bit patterns) and summed without overflow,
    so one flipped bit anywhere changes the sum by +-2^k: a single flip in one replica is seen
    at the very step it is read, by construction, on every machine -- not left to the later
    updates' rounding, which can bring the replicas back into agreement (after the
    all-reduce has carried the flip's effect into every replica) before a periodic digest
    looks (docs/sdc.md has the measurements).
``golden``
    Every ``golden_every`` steps, on each rank: a fixed batch through forward and backward
    with the *initial* weights, compared bitwise with what the rank computed at start. It
    tests the rank's hardware, not the weights: only a rank whose arithmetic went wrong
    fails it, so it names the rank.
``ckpt_checksum``
    In ``harness.checkpoint``: checkpoint files read back and hashed after writing, and
    verified on load (a failed verification is reported as a detection).

One collective a step carries all the evidence: each rank contributes a row ``[local loss,
gradient norm, golden status, digest, fingerprint]`` and every rank judges the same gathered table, so
all ranks reach the same verdict at the same step without another round. That gather
replaces the all-reduce of the loss the step needs anyway (it is that all-reduce, over a
table where each rank fills its own row); the global loss is the sum of the local ones in
rank order.

Attribution: a verdict names the faulty rank when the evidence does -- the only rank whose
local loss (or gradient norm) is not finite, the only rank whose local loss spiked, the odd
one out of a replica vote with a strict majority (three replicas or more; two that differ
cannot say which is wrong), the rank whose golden self-test failed. Otherwise it names
nobody: a spike seen by every rank after the all-reduce says the job is corrupted, not where.

Rollback: a verdict carries ``clean_before``, the first step the corruption may have
touched -- the detection step for ``nonfinite`` and ``spike``, one after the last step a
periodic detector passed for the digest and the golden self-test, one after the last step
whose whole update input agreed for the fingerprint. Checkpoints of that step or later are quarantined
(``CheckpointManager.quarantine``) and the group restarts from the newest one left.
"""

from __future__ import annotations

import collections
import hashlib
import math
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from harness.config import DetectConfig
from harness.dist import GradientGather

__all__ = ["Detection", "GoldenSelfTest", "RobustSpike", "SdcMonitor", "bits_checksum", "grad_norm",
           "param_digest", "update_fingerprint", "words_of"]

ROW = 17
"""[local loss, gradient norm, golden status (0 not run, 1 pass, -1 fail), digest present,
digest words x4, stop vote, fingerprint present, fingerprint words x6, host seconds] per
rank, float64."""
STOP_COLUMN = 8
"""A rank's vote to stop after this step (harness.preempt): it rides on the evidence
collective, so agreeing on a stop step costs no collective of its own."""
HOST_COLUMN = 16
"""A rank's host time of the step (harness.slowrank), riding the same way; 0: not measured."""
_FINGERPRINT_COLUMN = 9
_FINGERPRINT_PARTS = ("parameters", "gradients", "optimizer state")
_PARAMS_ONLY, _FULL = 1.0, 2.0
"""What a row's fingerprint covers: the parameters, or everything the update reads."""
_DIGEST_WORDS = 4
_WORD_BYTES = 6  # 48-bit words: exact in a float64
_CHECKSUM_BITS = 64
_CHECKSUM_WORD_BITS = 32  # two 32-bit words per checksum: exact in a float64
GOLDEN_BATCH = 2
"""Sequences in the golden self-test's fixed batch."""
SPIKE_MIN_HISTORY = 20


@dataclass
class Detection:
    detector: str
    """nonfinite | spike | digest | golden"""
    step: int
    reason: str
    suspect_rank: int | None
    clean_before: int
    """First step the corruption may have touched: checkpoints of it or later are suspect."""
    also: list[str] = field(default_factory=list)
    """Other detectors that fired at the same step."""

    @property
    def suspect(self) -> str | None:
        return None if self.suspect_rank is None else f"rank-{self.suspect_rank}"


# --------------------------------------------------------------------------- measurements


def grad_norm(parameters: Iterable[nn.Parameter]) -> float:
    """The global 2-norm of the gradients (inf or nan when any gradient is not finite)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return 0.0
    return float(torch.nn.utils.get_total_norm(grads))


def param_digest(model: nn.Module) -> bytes:
    """sha256 over every parameter's bytes, in name order."""
    digest = hashlib.sha256()
    for _, param in sorted(model.named_parameters()):
        data = param.detach()
        if not data.is_contiguous():
            data = data.contiguous()
        digest.update(data.reshape(-1).view(torch.uint8).numpy())
    return digest.digest()


def bits_checksum(tensors: Iterable[torch.Tensor]) -> int:
    """The sum of the tensors' bit patterns read as signed integers, mod 2^64.

    Each element is viewed as 32-bit words (16-bit ones for half-precision dtypes) and the
    words are summed in int64: no overflow is possible below 2^32 words, and integer
    addition is exact in any order, so equal tensors give equal checksums on every machine,
    whatever its kernels. One flipped bit (bit k of a word) changes the sum by exactly
    +-2^k, never 0 mod 2^64: a single flip is always seen. Several flips can cancel (bit k
    set in one element and cleared in another); the sha256 digest before checkpoints covers
    that.
    """
    return _sum_words([_as_words(t) for t in tensors])


def _as_words(tensor: torch.Tensor) -> torch.Tensor:
    flat = tensor.detach().reshape(-1)
    return flat.view(torch.int32 if flat.element_size() >= 4 else torch.int16)


def _sum_words(words: list[torch.Tensor]) -> int:
    # One concatenation and one sum per word size: summing tensor by tensor costs a few
    # dispatches each, which for a model of many small tensors is most of the time.
    total = 0
    for dtype in (torch.int32, torch.int16):
        group = [w for w in words if w.dtype == dtype]
        if group:
            total += int(torch.cat(group).sum(dtype=torch.int64))
    return total % (1 << _CHECKSUM_BITS)


class _ParamWords:
    """Integer views of the parameters, made once: the optimizer and ``load_state_dict``
    write into the parameters in place, so the views keep seeing their bits. A parameter
    whose storage was swapped (``param.data = ...``) or that is not contiguous (its flat
    view would be a copy) is viewed afresh."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params
        self.words = [_as_words(p) for p in params]

    def checksum(self) -> int:
        for i, param in enumerate(self.params):
            if not param.is_contiguous() or self.words[i].data_ptr() != param.data_ptr():
                self.words[i] = _as_words(param)
        return _sum_words(self.words)


def update_fingerprint(params: Iterable[torch.Tensor], grads: Iterable[torch.Tensor] | None = None,
                       optim_state: Iterable[torch.Tensor] | None = None) -> tuple[int, int, int]:
    """(parameters, gradients, optimizer state) checksums (``bits_checksum``); a part not
    given is 0."""
    return (bits_checksum(params), bits_checksum(grads) if grads is not None else 0,
            bits_checksum(optim_state) if optim_state is not None else 0)


def words_of(checksum: int) -> list[float]:
    """A 64-bit checksum as two 32-bit words, each exact in a float64 (the evidence table)."""
    mask = (1 << _CHECKSUM_WORD_BITS) - 1
    return [float(checksum >> _CHECKSUM_WORD_BITS), float(checksum & mask)]


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's floating state (exp_avg, exp_avg_sq...), in a fixed order."""
    out = []
    for group in optimizer.param_groups:
        for param in group["params"]:
            for _key, value in sorted(optimizer.state.get(param, {}).items()):
                if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim() > 0:
                    out.append(value)
    return out


def _digest_words(digest: bytes) -> list[float]:
    return [float(int.from_bytes(digest[i * _WORD_BYTES:(i + 1) * _WORD_BYTES], "big"))
            for i in range(_DIGEST_WORDS)]


class RobustSpike:
    """Upward outliers against a sliding window: robust z-score over median and MAD."""

    def __init__(self, window: int, threshold: float) -> None:
        self.values: collections.deque[float] = collections.deque(maxlen=window)
        self.threshold = threshold

    def score(self, value: float) -> float | None:
        """The robust z-score of ``value``; None while the window is too short."""
        if len(self.values) < SPIKE_MIN_HISTORY or not math.isfinite(value):
            return None
        ordered = sorted(self.values)
        median = ordered[len(ordered) // 2]
        mad = sorted(abs(v - median) for v in ordered)[len(ordered) // 2]
        # A floor on the scale: a window of near-identical values would make any wiggle a
        # "spike" (a MAD of 0 says nothing about what a real spike is).
        scale = max(1.4826 * mad, 1e-3 * abs(median), 1e-12)
        return (value - median) / scale

    def is_spike(self, value: float) -> bool:
        z = self.score(value)
        return z is not None and z > self.threshold

    def add(self, value: float) -> None:
        if math.isfinite(value):
            self.values.append(value)


class GoldenSelfTest:
    """A fixed batch through forward and backward with frozen initial weights, compared
    bitwise with the result this rank computed at start.

    Runs through the live model's modules (``torch.func.functional_call`` swaps the golden
    weights in), so whatever corrupts this rank's arithmetic -- a faulty core, or an
    injected fault hooked on a module -- corrupts the self-test too; the training weights
    are not involved, so a corrupted weight does not fail it.
    """

    def __init__(self, model: nn.Module, initial: nn.Module, tokens: torch.Tensor, seq_len: int,
                 batch: int = GOLDEN_BATCH) -> None:
        self.model = model
        self.params = {name: p.detach().clone().requires_grad_(True)
                       for name, p in initial.named_parameters()}
        n = batch * seq_len
        self.x = tokens[:n].reshape(batch, seq_len)
        self.y = tokens[1:n + 1].reshape(batch, seq_len)
        self.reference = self._run()

    def _run(self) -> bytes:
        from torch.func import functional_call

        logits = functional_call(self.model, self.params, (self.x,))
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), self.y.reshape(-1))
        grads = torch.autograd.grad(loss, list(self.params.values()))
        digest = hashlib.sha256(struct.pack("<d", float(loss.detach())))
        for grad in grads:
            digest.update(grad.contiguous().reshape(-1).view(torch.uint8).numpy())
        return digest.digest()

    def passes(self) -> bool:
        return self._run() == self.reference


# --------------------------------------------------------------------------- the monitor


@dataclass
class _EarlyEvidence:
    """What a rank put in its row before the backward (``SdcMonitor.before_backward``)."""

    step: int
    golden: float
    stop: bool | None
    host: bool
    """Whether a host time travelled (harness.slowrank)."""


LATE_COLUMN = ROW
"""In a row that rides on the gradient gather: 1 when this rank needs evidence that only the
end of the step has (a digest, the full fingerprint before a checkpoint): then every rank
exchanges its full row after the update as well."""


class SdcMonitor:
    """Runs the enabled detectors at the end of every step and judges them collectively."""

    def __init__(self, cfg: DetectConfig, rank: int, world_size: int, model: nn.Module,
                 start_step: int, golden: GoldenSelfTest | None = None,
                 replayed: Iterable[tuple[str, int]] = (),
                 gather: GradientGather | None = None) -> None:
        """``gather``: what the step's gradient all-gather carries (``harness.dist``): the
        evidence rows ride on it (``before_backward``), and every rank's own gradients, asked
        only when a non-finite verdict needs a suspect. None: the evidence travels in a
        collective of its own at the end of every step."""
        self.cfg = cfg
        self.rank = rank
        self.world_size = world_size
        self.model = model
        self.golden = golden
        self.gather = gather
        self._early: _EarlyEvidence | None = None
        self.loss_spikes = RobustSpike(cfg.spike_window, cfg.spike_z)
        self.norm_spikes = RobustSpike(cfg.spike_window, cfg.spike_z)
        # Periodic detectors vouch for the state they last passed; the loaded checkpoint was
        # vouched for when it was written.
        self.last_pass = {"digest": start_step, "golden": start_step, "fingerprint": start_step}
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.detection: Detection | None = None
        self.last_digest: bytes | None = None
        self.last_digest_step: int | None = None
        # (detector, step) of detections that already caused a rollback: the same verdict
        # again on the replay is reproducible, so not silent corruption (see ``end_step``).
        self.replayed = set(replayed)
        self.reproduced: list[Detection] = []
        self.stop_votes: list[int] = []
        """Ranks that voted to stop after the last step (``end_step(stop=...)``)."""
        self.host_times: list[float] | None = None
        """Every rank's host time of the last step, by rank (``end_step(host_s=...)``)."""
        self._table = torch.zeros(world_size, ROW, dtype=torch.float64)
        self._fingerprint: list[float] | None = None
        self._param_words: _ParamWords | None = None

    @property
    def active(self) -> bool:
        c = self.cfg
        return (c.nonfinite or c.spike or c.digest_every > 0 or c.fingerprint != "off"
                or self.golden is not None)

    def fingerprint(self, optimizer: torch.optim.Optimizer | None, verify: bool = False) -> None:
        """Checksum what the optimizer update of this step is about to read (call it right
        before ``optimizer.step()``); it travels with the step's evidence (``end_step``).
        ``verify``: the step ends in a checkpoint, so everything the update reads is
        checksummed, whatever the mode: no checkpoint is written of a replica whose
        gradients or optimizer state differ from the others'."""
        if self.cfg.fingerprint == "off":
            return
        if optimizer is not None and self._gathered() is not None:
            return  # the parameters' fingerprint went with the gradient gather
        t0 = time.perf_counter()
        if self._param_words is None:
            self._param_words = _ParamWords(list(self.model.parameters()))
        checksums = (self._param_words.checksum(), 0, 0)
        coverage = _PARAMS_ONLY
        if self.cfg.fingerprint == "update" or verify:
            grads = [p.grad for p in self._param_words.params if p.grad is not None]
            checksums = (checksums[0], bits_checksum(grads), bits_checksum(_optimizer_tensors(optimizer)))
            coverage = _FULL
        self._fingerprint = [coverage, *(w for value in checksums for w in words_of(value))]
        self.seconds["fingerprint"] += time.perf_counter() - t0

    # -- the evidence exchange, riding on the gradient gather ---------------------------
    def before_backward(self, step: int, local_loss: torch.Tensor, verify: bool, stop: bool | None = None,
                        host_s: Callable[[], float | None] | None = None) -> None:
        """Hand this rank's row to the step's gradient all-gather (call it right before
        ``loss.backward()``): the local loss, the golden self-test when due, the parameters'
        fingerprint, the stop vote and the host time (``host_s``, asked when the last bucket
        leaves). Everything the verdict needs then arrives with the averaged gradient, and
        ``end_step`` adds no collective -- except on a step that needs what only exists after
        the all-reduce or the update (a digest, the full fingerprint before a checkpoint,
        ``fingerprint: update``, the digest's every-step gradient-norm comparison when no
        fingerprint runs): a rank that does flags it, and every rank then exchanges its full
        row at the end of the step as well. Without a ``gather`` it does nothing."""
        self._early = None
        if self.gather is None:
            return
        golden = 0.0
        if self.golden is not None and step % self.cfg.golden_every == 0:
            t0 = time.perf_counter()
            golden = 1.0 if self.golden.passes() else -1.0
            self.seconds["golden"] += time.perf_counter() - t0
        digest = self.cfg.digest_every > 0
        late = self.active and (verify or self.cfg.fingerprint == "update"
                                or (digest and (step % self.cfg.digest_every == 0 or self.cfg.fingerprint == "off")))
        if self.active and not late:
            self.fingerprint(None)  # the parameters: no flip point moves them after the forward
        row = [float(local_loss), 0.0, golden, 0.0, *([0.0] * _DIGEST_WORDS), 1.0 if stop else 0.0]
        row += self._fingerprint if self._fingerprint is not None else [0.0] * 7
        self._fingerprint = None
        self._early = _EarlyEvidence(step, golden, stop, host_s is not None)
        self.gather.track_norm = self.active and self.needs_grad_norm

        def finished_row() -> torch.Tensor:
            host = host_s() if host_s is not None else None
            return torch.tensor([*row, host or 0.0, 1.0 if late else 0.0], dtype=torch.float64)

        self.gather.send(finished_row)

    def _gathered(self) -> list[list[float]] | None:
        """Every rank's row of this step from the gradient gather, when no rank needs the late
        exchange; else None."""
        if self._early is None or self.gather is None or self.gather.rows is None:
            return None
        rows = [r.tolist() for r in self.gather.rows]
        if len(rows) != self.world_size or any(len(r) != ROW + 1 or r[LATE_COLUMN] for r in rows):
            return None
        return [r[:ROW] for r in rows]

    @property
    def needs_grad_norm(self) -> bool:
        return self.cfg.nonfinite or self.cfg.spike or self.cfg.digest_every > 0

    def grad_norm(self, model: nn.Module) -> float | None:
        if not self.needs_grad_norm:
            return None
        if self.gather is not None and self._gathered() is not None:
            # the averaged gradient's norm, taken while the gather averaged it: the same on
            # every rank, so the verdict on it is too
            return self.gather.mean_norm()
        t0 = time.perf_counter()
        value = grad_norm(model.parameters())
        self.seconds["grad_norm"] += time.perf_counter() - t0
        return value

    def end_step(self, step: int, local_loss: torch.Tensor, norm: float | None, verify: bool,
                 stop: bool | None = None, host_s: float | None = None) -> float:
        """The global loss of the step, after the detectors had their say (``detection``).
        ``stop``: this rank's stop vote (None: no vote travels); the ranks that voted are
        in ``stop_votes`` afterwards, the same list on every rank. ``host_s``: this rank's
        host time (harness.slowrank); every rank's is in ``host_times`` afterwards (None
        when this rank sent none)."""
        self.detection = None
        self.stop_votes = []
        self.host_times = None
        gathered = self._gathered()
        early, self._early = self._early, None
        if early is not None:
            stop = early.stop  # the vote that went with the gather is the vote
            host_s = host_s if early.host else None
        if gathered is not None:
            self.stop_votes = [r for r, values in enumerate(gathered) if values[STOP_COLUMN] > 0]
            self.host_times = [values[HOST_COLUMN] for values in gathered] if host_s is not None else None
            global_loss = math.fsum(r[0] for r in gathered) / self.world_size
            if not self.active:
                return global_loss
            for values in gathered:
                values[1] = norm if norm is not None else 0.0  # the averaged gradient's, on every rank
            return self._verdict(step, gathered, global_loss, norm is not None)
        if not self.active:
            if stop is None and host_s is None:
                total = local_loss.detach().clone()
                dist.all_reduce(total)
                return float(total) / self.world_size
            # The loss, one vote slot and one host-time slot per rank in one all-reduce.
            world = self.world_size
            total = torch.zeros(1 + world + (world if host_s is not None else 0), dtype=local_loss.dtype)
            total[0] = local_loss.detach()
            total[1 + self.rank] = 1.0 if stop else 0.0
            if host_s is not None:
                total[1 + world + self.rank] = host_s
            dist.all_reduce(total)
            values = total.tolist()
            self.stop_votes = [r for r, v in enumerate(values[1:1 + world]) if v > 0]
            self.host_times = values[1 + world:] if host_s is not None else None
            return float(total[0]) / world
        row = [float(local_loss), norm if norm is not None else 0.0, 0.0, 0.0] + [0.0] * _DIGEST_WORDS
        row.append(1.0 if stop else 0.0)
        if self._fingerprint is not None:
            row += self._fingerprint
            self._fingerprint = None  # one step's evidence, never carried into the next
        else:
            row += [0.0] * (HOST_COLUMN - len(row))
        row.append(host_s or 0.0)
        if early is not None:
            row[2] = early.golden  # run before the backward, when due
        elif self.golden is not None and step % self.cfg.golden_every == 0:
            t0 = time.perf_counter()
            row[2] = 1.0 if self.golden.passes() else -1.0
            self.seconds["golden"] += time.perf_counter() - t0
        digest_ran = self.cfg.digest_every > 0 and (verify or step % self.cfg.digest_every == 0)
        if digest_ran:
            t0 = time.perf_counter()
            self.last_digest = param_digest(self.model)
            self.last_digest_step = step
            row[3] = 1.0
            row[4:4 + _DIGEST_WORDS] = _digest_words(self.last_digest)
            self.seconds["digest"] += time.perf_counter() - t0
        # Each rank fills its own row of a zeroed table and the table is summed: an all-gather
        # done with the all-reduce the loss needed anyway (x + 0 is exact, nan and inf stay
        # in their row), cheaper in gloo than all_gather with its list of outputs.
        self._table.zero_()
        self._table[self.rank] = torch.tensor(row, dtype=torch.float64)
        dist.all_reduce(self._table)
        table = self._table.tolist()
        self.stop_votes = [r for r, values in enumerate(table) if values[STOP_COLUMN] > 0]
        self.host_times = [values[HOST_COLUMN] for values in table] if host_s is not None else None
        global_loss = math.fsum(r[0] for r in table) / self.world_size
        return self._verdict(step, table, global_loss, norm is not None)

    def _verdict(self, step: int, table: list[list[float]], global_loss: float, has_norm: bool) -> float:
        t0 = time.perf_counter()
        found = self._judge(step, table, global_loss, has_norm)
        self.seconds["judge"] += time.perf_counter() - t0
        if found:
            first = found[0]
            first.also = [d.detector for d in found[1:]]
            if (first.detector, step) in self.replayed:
                # The replay after a rollback hit the same verdict at the same step: a
                # deterministic computation went there twice, which a flipped bit does not.
                self.reproduced.append(first)
            else:
                self.detection = first
        return global_loss

    def checkpoint_record(self, step: int) -> dict[str, Any]:
        """What a checkpoint of ``step`` records about its verification (its manifest)."""
        record: dict[str, Any] = {"step": step, "checks": dict(self.last_pass)}
        if self.last_digest is not None and self.last_digest_step == step == self.last_pass["digest"]:
            record["param_sha256"] = self.last_digest.hex()  # the digest every replica agreed on
        return record

    def detector_seconds(self) -> dict[str, float]:
        seconds = dict(self.seconds)
        if self.gather is not None and self.gather.seconds:
            seconds["grad_norm"] = seconds.get("grad_norm", 0.0) + self.gather.seconds
        return {name: round(value, 6) for name, value in sorted(seconds.items())}

    # -- the verdict -------------------------------------------------------------------
    def _judge(self, step: int, table: list[list[float]], global_loss: float, has_norm: bool
               ) -> list[Detection]:
        cfg, world = self.cfg, self.world_size
        losses = [r[0] for r in table]
        norms = [r[1] for r in table]
        found: list[Detection] = []
        nonfinite = [r for r in range(world)
                     if not math.isfinite(losses[r]) or (has_norm and not math.isfinite(norms[r]))]
        if cfg.nonfinite and nonfinite:
            found.append(self._nonfinite(step, nonfinite, losses, norms, has_norm))
        golden = [r for r in range(world) if table[r][2] != 0]
        if golden:
            failed = [r for r in golden if table[r][2] < 0]
            if failed:
                suspect = failed[0] if len(failed) == 1 else None
                found.append(Detection(
                    "golden", step, f"golden self-test failed on rank{'s' if len(failed) > 1 else ''} "
                    f"{', '.join(map(str, failed))}: the fixed batch no longer gives the result "
                    "recorded at start", suspect, self.last_pass["golden"] + 1))
            else:
                self.last_pass["golden"] = step
        if cfg.fingerprint != "off" and world > 1:
            found += self._fingerprints(step, table)
        if cfg.digest_every > 0:
            found += self._replicas(step, table, has_norm and not nonfinite)
        if cfg.spike and not nonfinite:
            found += self._spikes(step, losses, global_loss, norms[0] if has_norm else None)
        if not found:
            self.loss_spikes.add(global_loss)
            if has_norm:
                self.norm_spikes.add(norms[0])
        return found

    def _nonfinite(self, step: int, bad: list[int], losses: list[float], norms: list[float],
                   has_norm: bool) -> Detection:
        world = self.world_size
        suspect, evidence = self._nonfinite_suspect(bad, losses)
        what = []
        for r in bad:
            parts = [f"local loss {losses[r]}"] if not math.isfinite(losses[r]) else []
            if has_norm and not math.isfinite(norms[r]):
                parts.append(f"gradient norm {norms[r]}")
            what.append(f"rank {r}: {' and '.join(parts)}")
        where = ("on the only rank" if world == 1 else "on every rank" if len(bad) == world
                 else "only on one rank")
        if len(bad) == world and world > 1:
            where += (f" (after the all-reduce); {evidence}" if suspect is not None
                      else " (after the all-reduce: the evidence names no rank)")
        local = ", ".join(f"{loss:.6g}" for loss in losses)
        return Detection("nonfinite", step, f"non-finite values {where}: {'; '.join(what)} "
                         f"(local losses {local})", suspect, step)

    def _nonfinite_suspect(self, bad: list[int], losses: list[float]) -> tuple[int | None, str]:
        """The rank whose own computation went non-finite first, and the evidence that says so.

        In the order the step computes: a rank's local loss (its forward), then its local
        gradients before the all-reduce (its backward: a flipped attention weight can leave
        the loss finite while its gradients overflow), then, the weakest, a local loss far
        above the recent global ones. Each names a rank only when it singles one out."""
        world = self.world_size
        if len(bad) == 1:
            # with one rank too: its own computation is the only one there is
            return bad[0], "only that rank"
        nonfinite_loss = [r for r in range(world) if not math.isfinite(losses[r])]
        if len(nonfinite_loss) == 1:
            return nonfinite_loss[0], f"rank {nonfinite_loss[0]}'s local loss is the odd one out"
        norms = self.gather.local_norms() if self.gather is not None and not nonfinite_loss else None
        if norms is not None and len(norms) == world:
            overflowed = [r for r in range(world) if not math.isfinite(norms[r])]
            if len(overflowed) == 1:
                shown = ", ".join(f"{n:.6g}" for n in norms)
                return overflowed[0], (f"rank {overflowed[0]}'s own gradients, before the all-reduce, "
                                       f"are the only non-finite ones (local gradient norms {shown})")
        odd = [r for r in range(world)
               if not math.isfinite(losses[r]) or self.loss_spikes.is_spike(losses[r])]
        if len(odd) == 1:
            return odd[0], f"rank {odd[0]}'s local loss is the odd one out"
        return None, ""

    def _replicas(self, step: int, table: list[list[float]], norms_valid: bool) -> list[Detection]:
        world = self.world_size
        if world < 2:
            if table[0][3]:
                self.last_pass["digest"] = step  # one replica agrees with itself
            return []
        out = []
        if norms_valid:
            groups = _groups([(r[1],) for r in table])
            if len(groups) > 1:
                suspect = _odd_one_out(groups, world)
                out.append(Detection(
                    "digest", step, "replicas hold different gradients after the all-reduce "
                    f"(gradient norms {', '.join(f'{r[1]:.6g}' for r in table)})",
                    suspect, step))
        # Only when every rank hashed at this step (a time-based save is decided by each
        # rank's own clock, so one may be verifying where another is not).
        if all(r[3] for r in table):
            groups = _groups([tuple(r[4:4 + _DIGEST_WORDS]) for r in table])
            if len(groups) > 1:
                suspect = _odd_one_out(groups, world)
                sets = " vs ".join("{" + ", ".join(f"rank {r}" for r in ranks) + "}" for ranks in groups.values())
                who = (f"rank {suspect} differs from the majority" if suspect is not None
                       else "no majority names the odd one")
                out.append(Detection(
                    "digest", step, f"parameter digests of the replicas differ: {sets}; {who}",
                    suspect, self.last_pass["digest"] + 1))
            elif not out:
                self.last_pass["digest"] = step
        return out

    def _fingerprints(self, step: int, table: list[list[float]]) -> list[Detection]:
        """Replicas whose update inputs differ bitwise at this step.

        The verdict's ``clean_before`` is one after the last step whose whole update input
        (parameters, gradients, optimizer state) agreed: that update, being deterministic,
        wrote the same state on every replica, so its checkpoint is clean. A parameter
        checksum alone vouches for less: an optimizer state flipped since then may have been
        checkpointed before it moved a parameter.
        """
        coverage = min(r[_FINGERPRINT_COLUMN] for r in table)
        if not coverage:
            return []
        differ = []
        for i, part in enumerate(_FINGERPRINT_PARTS if coverage == _FULL else _FINGERPRINT_PARTS[:1]):
            lo = _FINGERPRINT_COLUMN + 1 + 2 * i
            groups = _groups([tuple(r[lo:lo + 2]) for r in table])
            if len(groups) > 1:
                differ.append((part, groups))
        if not differ:
            if coverage == _FULL:
                self.last_pass["fingerprint"] = step
            return []
        groups = differ[0][1]
        suspect = _odd_one_out(groups, self.world_size)
        sets = " vs ".join("{" + ", ".join(f"rank {r}" for r in ranks) + "}" for ranks in groups.values())
        who = (f"rank {suspect} differs from the majority" if suspect is not None
               else "no majority names the odd one")
        parts = " and ".join(part for part, _ in differ)
        return [Detection("fingerprint", step, f"the replicas' {parts} differ bitwise before the "
                          f"update of step {step} (exact checksums): {sets}; {who}", suspect,
                          self.last_pass["fingerprint"] + 1)]

    def _spikes(self, step: int, losses: list[float], global_loss: float, norm: float | None
                ) -> list[Detection]:
        out = []
        z = self.loss_spikes.score(global_loss)
        if z is not None and z > self.cfg.spike_z:
            # The rank whose own loss is the spike, if exactly one is: its batch or its
            # weights went wrong; the others' losses are ordinary.
            spiking = [r for r, loss in enumerate(losses) if self.loss_spikes.is_spike(loss)]
            suspect = spiking[0] if len(spiking) == 1 and self.world_size > 1 else None
            out.append(Detection("spike", step, f"loss spike: {global_loss:.6g} is {z:.1f} robust "
                                 f"standard deviations above the last {len(self.loss_spikes.values)} "
                                 f"steps' median" + (f" (rank {suspect}'s local loss {losses[suspect]:.6g})"
                                                     if suspect is not None else ""), suspect, step))
        if norm is not None:
            z = self.norm_spikes.score(norm)
            if z is not None and z > self.cfg.spike_z:
                out.append(Detection("spike", step, f"gradient-norm spike: {norm:.6g} is {z:.1f} robust "
                                     "standard deviations above the recent steps' median (after the "
                                     "all-reduce: the evidence names no rank)", None, step))
        return out


def _groups(keys: list[tuple[float, ...]]) -> dict[tuple[float, ...], list[int]]:
    groups: dict[tuple[float, ...], list[int]] = {}
    for rank, key in enumerate(keys):
        groups.setdefault(key, []).append(rank)
    return groups


def _odd_one_out(groups: dict[tuple[float, ...], list[int]], world: int) -> int | None:
    """The single rank that disagrees with a strict majority of the others, if there is one."""
    sizes = sorted(groups.values(), key=len, reverse=True)
    if len(sizes[0]) * 2 > world and len(sizes) == 2 and len(sizes[1]) == 1:
        return sizes[1][0]
    return None
