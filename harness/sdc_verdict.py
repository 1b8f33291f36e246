"""The verdict of the silent-corruption detectors (harness.sdc): every rank's evidence row,
and what the gathered table of rows says -- which detector fired, whom it blames, and from
which step checkpoints are suspect.

Every rank judges the same table, so every rank reaches the same verdict at the same step.
Attribution: a verdict names the faulty rank when the evidence does -- the only rank whose
local loss (or gradient norm) is not finite, the only rank whose local loss spiked, the odd
one out of a replica vote with a strict majority (three replicas or more; two that differ
cannot say which is wrong), the rank whose golden self-test failed. Otherwise it names
nobody: a spike seen by every rank after the all-reduce says the job is corrupted, not where.
"""

from __future__ import annotations

import bisect
import collections
import math
from dataclasses import dataclass, field

from chaos.contract import NONFINITE_DETECTOR
from harness.config import DetectConfig
from harness.dist import GradientGather
from harness.sdc_checksum import DIGEST_WORDS

__all__ = ["DIGEST_AFTER_UPDATE", "DIGEST_BEFORE_UPDATE", "HOST_COLUMN", "LATE_COLUMN", "ROW", "STOP_COLUMN", "Detection", "RobustSpike", "Verdicts"]

# --------------------------------------------------------------------------- the evidence row

ROW = 17
"""[local loss, gradient norm, golden status (0 not run, 1 pass, -1 fail), digest (0 none,
``DIGEST_AFTER_UPDATE``, ``DIGEST_BEFORE_UPDATE``),
digest words x4, stop vote, fingerprint present, fingerprint words x6, host seconds] per
rank, float64."""
STOP_COLUMN = 8
"""A rank's vote to stop after this step (harness.preempt): it rides on the evidence
collective, so agreeing on a stop step costs no collective of its own."""
HOST_COLUMN = 16
"""A rank's host time of the step (harness.slowrank), riding the same way; 0: not measured."""
DIGEST_AFTER_UPDATE, DIGEST_BEFORE_UPDATE = 1.0, 2.0
"""A row's digest column: the digest is of the parameters after this step's update (a
checkpoint step, or no fingerprint), or of those the update was about to read (a periodic
digest riding with the fingerprint): what a pass vouches for is this step's state, or the
previous step's."""
LATE_COLUMN = ROW
"""In a row that rides on the gradient gather: 1 when this rank needs evidence that only the
end of the step has (a digest, the full fingerprint before a checkpoint): then every rank
exchanges its full row after the update as well."""
FINGERPRINT_COLUMN = 9
FINGERPRINT_PARTS = ("parameters", "gradients", "optimizer state")
PARAMS_ONLY, FULL = 1.0, 2.0
"""What a row's fingerprint covers: the parameters, or everything the update reads."""
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


class RobustSpike:
    """Upward outliers against a sliding window: robust z-score over median and MAD."""

    def __init__(self, window: int, threshold: float) -> None:
        self.values: collections.deque[float] = collections.deque(maxlen=window)
        self.threshold = threshold
        self._sorted: list[float] = []
        """``values`` in ascending order, kept as they come and go (scored twice a step)."""

    def score(self, value: float) -> float | None:
        """The robust z-score of ``value``; None while the window is too short."""
        if len(self.values) < SPIKE_MIN_HISTORY or not math.isfinite(value):
            return None
        ordered = self._sorted
        half = len(ordered) // 2
        median = ordered[half]
        # The absolute deviations without abs(): below the median they are median - v (a
        # descending run), from it on v - median (an ascending one), the same floats
        # (x - y is exactly -(y - x)); sorting two runs is one merge.
        deviations = [median - v for v in ordered[:half]]
        deviations += [v - median for v in ordered[half:]]
        deviations.sort()
        mad = deviations[half]
        # A floor on the scale: a window of near-identical values would make any wiggle a
        # "spike" (a MAD of 0 says nothing about what a real spike is).
        scale = max(1.4826 * mad, 1e-3 * abs(median), 1e-12)
        return (value - median) / scale

    def is_spike(self, value: float) -> bool:
        z = self.score(value)
        return z is not None and z > self.threshold

    def add(self, value: float) -> None:
        if math.isfinite(value):
            if len(self.values) == self.values.maxlen:
                del self._sorted[bisect.bisect_left(self._sorted, self.values[0])]
            self.values.append(value)
            bisect.insort(self._sorted, value)


class Verdicts:
    """The judging half of ``harness.sdc.SdcMonitor``: what the gathered table says, and the
    state a verdict needs from earlier steps (the spike windows, the last step each periodic
    detector vouched for)."""

    cfg: DetectConfig
    world_size: int
    gather: GradientGather | None
    loss_spikes: RobustSpike
    norm_spikes: RobustSpike
    last_pass: dict[str, int]

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
        return Detection(NONFINITE_DETECTOR, step, f"non-finite values {where}: {'; '.join(what)} "
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
        # the last step whose state a passing digest vouches for
        vouched = step - 1 if table[0][3] == DIGEST_BEFORE_UPDATE else step
        if world < 2:
            if table[0][3]:
                self.last_pass["digest"] = vouched  # one replica agrees with itself
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
            groups = _groups([tuple(r[4:4 + DIGEST_WORDS]) for r in table])
            if len(groups) > 1:
                suspect = _odd_one_out(groups, world)
                sets = " vs ".join("{" + ", ".join(f"rank {r}" for r in ranks) + "}" for ranks in groups.values())
                who = (f"rank {suspect} differs from the majority" if suspect is not None
                       else "no majority names the odd one")
                out.append(Detection(
                    "digest", step, f"parameter digests of the replicas differ: {sets}; {who}",
                    suspect, self.last_pass["digest"] + 1))
            elif not out:
                self.last_pass["digest"] = vouched
        return out

    def _fingerprints(self, step: int, table: list[list[float]]) -> list[Detection]:
        """Replicas whose update inputs differ bitwise at this step.

        The verdict's ``clean_before`` is one after the last step whose whole update input
        (parameters, gradients, optimizer state) agreed: that update, being deterministic,
        wrote the same state on every replica, so its checkpoint is clean. A parameter
        checksum alone vouches for less: an optimizer state flipped since then may have been
        checkpointed before it moved a parameter.
        """
        coverage = min(r[FINGERPRINT_COLUMN] for r in table)
        if not coverage:
            return []
        differ = []
        for i, part in enumerate(FINGERPRINT_PARTS if coverage == FULL else FINGERPRINT_PARTS[:1]):
            lo = FINGERPRINT_COLUMN + 1 + 2 * i
            groups = _groups([tuple(r[lo:lo + 2]) for r in table])
            if len(groups) > 1:
                differ.append((part, groups))
        if not differ:
            if coverage == FULL:
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
