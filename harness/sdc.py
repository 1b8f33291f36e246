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
    deterministic). Before a save, of the parameters after the update (what the checkpoint
    holds); the periodic one, while the fingerprint runs, of the parameters the update is
    about to read (the previous step's state), so that it rides with the fingerprint instead
    of costing an exchange after the update. Without the fingerprint, every step: the
    gradient norms of all ranks, which are equal after the all-reduce unless a rank's
    gradients were changed after it.
``fingerprint``
    Every step, *before* the optimizer update (after every flip point of the step): an exact
    integer checksum of the bits of each rank's parameters (``params``) or of everything the
    update reads (``update``: parameters, gradients after the all-reduce, optimizer state),
    compared across replicas; on a step that ends in a checkpoint, everything the update
    reads whatever the mode, so no checkpoint is written of a replica that differs. Each
    tensor's bits are read as 64-bit integer words and summed mod 2^64 (exact in any order),
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

The evidence needs no collective of its own: each rank's row ``[local loss, gradient norm,
golden status, digest, stop vote, fingerprint, host time]`` (harness.sdc_verdict) rides on
the step's gradient all-gather (``harness.dist.GradientGather``), and every rank judges the
same gathered table, so all ranks reach the same verdict at the same step without another
round; the global loss is the sum of the local ones in rank order. Only a step that needs
what exists after the update (a digest, a checkpoint) exchanges the full row once more.
The verdict and whom it blames: harness.sdc_verdict; the checksums and digests:
harness.sdc_checksum; the golden self-test: harness.sdc_golden.

Rollback: a verdict carries ``clean_before``, the first step the corruption may have
touched -- the detection step for ``nonfinite`` and ``spike``, one after the last step a
periodic detector passed for the digest and the golden self-test, one after the last step
whose whole update input agreed for the fingerprint. Checkpoints of that step or later are quarantined
(``CheckpointManager.quarantine``) and the group restarts from the newest one left.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from harness.config import DetectConfig
from harness.dist import GradientGather
from harness.sdc_checksum import (
    DIGEST_WORDS,
    BitsChecksum,
    ParamDigest,
    bits_checksum,
    digest_words,
    optimizer_tensors,
    param_digest,
    update_fingerprint,
    words_of,
)
from harness.sdc_golden import GOLDEN_BATCH, GoldenSelfTest
from harness.sdc_verdict import (
    DIGEST_AFTER_UPDATE,
    DIGEST_BEFORE_UPDATE,
    FULL,
    HOST_COLUMN,
    LATE_COLUMN,
    PARAMS_ONLY,
    ROW,
    STOP_COLUMN,
    Detection,
    RobustSpike,
    Verdicts,
)

__all__ = ["DIGEST_AFTER_UPDATE", "DIGEST_BEFORE_UPDATE", "DIGEST_WORDS", "GOLDEN_BATCH", "HOST_COLUMN",
           "LATE_COLUMN", "ROW", "STOP_COLUMN", "Detection", "GoldenSelfTest", "RobustSpike", "SdcMonitor",
           "bits_checksum", "digest_words", "grad_norm", "param_digest", "update_fingerprint", "words_of"]


def grad_norm(parameters: Iterable[nn.Parameter]) -> float:
    """The global 2-norm of the gradients (inf or nan when any gradient is not finite)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return 0.0
    # get_total_norm's arithmetic (the norm of the tensors' norms) without its grouping of
    # the tensors by device and dtype, which costs more than the norms on a small model
    return float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads))))


@dataclass
class _EarlyEvidence:
    """What a rank put in its row before the backward (``SdcMonitor.before_backward``)."""

    step: int
    golden: float
    stop: bool | None
    host: bool
    """Whether a host time travelled (harness.slowrank)."""


class SdcMonitor(Verdicts):
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
        self._rows_read: tuple[list[torch.Tensor] | None, list[list[float]] | None] = (None, None)
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
        self._params: list[torch.Tensor] | None = None
        # one per part of the fingerprint: each keeps its views and its buffer
        self._checksums = (BitsChecksum(), BitsChecksum(), BitsChecksum())
        self._param_digest: ParamDigest | None = None

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
        if self._params is None:
            self._params = list(self.model.parameters())
        params, grads, state = self._checksums
        checksums = (params(self._params), 0, 0)
        coverage = PARAMS_ONLY
        if self.cfg.fingerprint == "update" or verify:
            # fingerprint(None) is the early one, taken only when neither holds
            assert optimizer is not None, "the full fingerprint reads the optimizer's state"
            checksums = (checksums[0], grads([p.grad for p in self._params if p.grad is not None]),
                         state(optimizer_tensors(optimizer)))
            coverage = FULL
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
        # Without a fingerprint, the digest's every-step gradient-norm comparison needs the
        # local norms after the all-reduce: every step exchanges late then.
        late = self.active and (verify or self.cfg.fingerprint == "update"
                                or (digest and self.cfg.fingerprint == "off"))
        digest_words_now = [0.0] * DIGEST_WORDS
        digest_column = 0.0
        if self.active and not late:
            self.fingerprint(None)  # the parameters: no flip point moves them after the forward
            if digest and step % self.cfg.digest_every == 0:
                # A periodic digest rides with the fingerprint: of the parameters this step's
                # update is about to read, the state the previous step left. Taken after the
                # update it would need an exchange of its own (measured: 1-2 % of the step);
                # the fingerprint sees that update at the next step anyway.
                digest_column = DIGEST_BEFORE_UPDATE
                digest_words_now = digest_words(self._digest())
        row = [float(local_loss), 0.0, golden, digest_column, *digest_words_now, 1.0 if stop else 0.0]
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
        if self._rows_read[0] is not self.gather.rows:  # read once a step, asked three times
            rows = [r.tolist() for r in self.gather.rows]
            complete = len(rows) == self.world_size and not any(len(r) != ROW + 1 or r[LATE_COLUMN] for r in rows)
            self._rows_read = (self.gather.rows, [r[:ROW] for r in rows] if complete else None)
        return self._rows_read[1]

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
        row = [float(local_loss), norm if norm is not None else 0.0, 0.0, 0.0] + [0.0] * DIGEST_WORDS
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
            self.last_digest = self._digest()
            self.last_digest_step = step
            row[3] = DIGEST_AFTER_UPDATE
            row[4:4 + DIGEST_WORDS] = digest_words(self.last_digest)
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

    def _digest(self) -> bytes:
        t0 = time.perf_counter()
        if self._param_digest is None:
            self._param_digest = ParamDigest(self.model)
        digest = self._param_digest()
        self.seconds["digest"] += time.perf_counter() - t0
        return digest

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
