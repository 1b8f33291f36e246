"""The slow-rank detector: a rank slower than its peers, named while training goes on.

In synchronous data-parallel training every rank's step takes as long as the slowest one's,
so step time says *that* the job is slow, not *who*. What differs is where each rank spends
the step: a slow rank is busy, its peers wait for it inside the gradient all-reduce. Each
rank measures its **host time**: from the moment the previous step's last collective
returned (the gradient gather, or the evidence exchange after it on a digest or checkpoint
step: every rank leaves it together) to the moment it enters this step's first collective
(DDP calls the comm hook with the first gradient bucket). Waiting for peers is outside that
span; a rank's own slowness (its compute, its data, a throttled device, anything it does
before it can contribute) is inside it. Two things inside it are not the rank's own:

- time the training thread spent runnable but waiting for a CPU (the kernel's run-queue
  delay, /proc schedstat): on a host with fewer cores than ranks (this 2-core machine runs
  four) the scheduler's order decides whose host time doubles, for several steps in a row
  (up to 2.6x in a fault-free run). Taken out, read so that a wait between the two reads
  is not counted on one side only (``_clock``).
- work of the harness that only some ranks do (``excused``): the checkpoint writer's
  snapshot, a baseline twin's per-step state digest on rank 0. This is why rank 0 was the
  one named in fault-free runs: 2-5 ms more than its peers at every step.

Every rank's host time rides on the collective each step makes anyway (``harness.sdc``,
column ``HOST_COLUMN``), so all ranks judge the same numbers with no collective of their
own. A rank is slow (``find_slow_rank``) when the *least* of its last ``window`` host times
is at least ``ratio`` x the median of its peers' least ones, and above it by both
``min_excess_s`` and ``noise_mads`` robust standard deviations of the peers' host times.
The least, not the median: on a shared host, contention only ever adds time (a rank that
waited for a core is late, never early), so one rank's median wanders with the scheduler
while its least stays at what the rank itself needs; a rank that is really slow is slow at
every step, so its least rises with it (and one slow step, a checkpoint snapshot, cannot
raise it). The same rank must be found slow ``persist`` steps in a row before it is
reported. The lowest other rank reports it once (``detected``, failure class ``slow``,
detector ``slow_rank``); it is reported again only after a step without a slow rank.
Training goes on: a slow rank is a finding, not a failure to restart from.
"""

from __future__ import annotations

import collections
import contextlib
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.config import SlowRankConfig

__all__ = ["SlowRank", "SlowRankDetector", "find_slow_rank"]


@dataclass(frozen=True)
class SlowRank:
    rank: int
    own_s: float
    peers_s: float

    @property
    def ratio(self) -> float:
        return self.own_s / self.peers_s if self.peers_s > 0 else float("inf")

    def reason(self, window: int, steps: int = 1) -> str:
        return (f"rank {self.rank} is slow: host time at least {self.own_s * 1000:.1f} ms at each of its last "
                f"{window} steps, {self.ratio:.2f}x its peers' {self.peers_s * 1000:.1f} ms"
                + (f", {steps} steps in a row" if steps > 1 else ""))


def find_slow_rank(windows: Mapping[int, Sequence[float]], ratio: float, min_excess_s: float,
                   noise_mads: float = 0.0) -> SlowRank | None:
    """The rank furthest above its peers, if it is slow by every measure; pure. ``windows``:
    each rank's last host times (a full window each)."""
    least = {rank: min(values) for rank, values in windows.items()}
    found = None
    for rank, own in least.items():
        peers = [v for r, v in least.items() if r != rank]
        if not peers:
            continue
        ref = statistics.median(peers)
        if own < ratio * ref or own - ref < min_excess_s or (found is not None and own - ref <= found.own_s - found.peers_s):
            continue
        if noise_mads > 0:  # asked last: the common case (nobody slow) never sorts the samples
            samples = [v for r, values in windows.items() if r != rank for v in values]
            center = statistics.median(samples)
            sigma = 1.4826 * statistics.median(abs(v - center) for v in samples)  # a normal's, robustly
            if own - ref < noise_mads * sigma:
                continue
        found = SlowRank(rank, own, ref)
    return found


class SlowRankDetector:
    """One per rank; ``timed`` wraps the DDP comm hook, ``host_s`` goes into the step's
    evidence, ``observe`` judges what came back."""

    def __init__(self, cfg: SlowRankConfig, rank: int, world_size: int, emit: Callable[..., None],
                 src: str | None = None) -> None:
        self.cfg = cfg
        self.rank = rank
        self._emit = emit
        self._src = src or f"rank-{rank}"
        self._synced: float | None = None
        self._entered: float | None = None
        self._excused = 0.0
        self._windows: list[collections.deque[float]] = [collections.deque(maxlen=cfg.window)
                                                         for _ in range(world_size)]
        self._reported: set[int] = set()
        self._streak: tuple[int, int] | None = None
        """(rank, steps in a row it was found slow)."""
        # The training thread's scheduler statistics, read from whatever thread calls the
        # hook (the autograd engine may run it on a thread of its own); kept open, read with
        # pread (a few microseconds; the clock reads it twice).
        path = f"/proc/self/task/{threading.main_thread().native_id}/schedstat"
        self._schedstat: int | None = None
        if self.cfg.enabled:
            with contextlib.suppress(OSError):
                self._schedstat = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.seconds = 0.0
        """What the detector itself cost this process (its share of every step)."""

    @property
    def enabled(self) -> bool:
        return self.cfg.enabled

    def _queued_s(self) -> float:
        """Seconds the training thread has spent runnable but waiting for a CPU (the
        kernel's run-queue delay, /proc schedstat); 0 where the kernel does not say."""
        if self._schedstat is None:
            return 0.0
        try:
            return int(os.pread(self._schedstat, 128, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            self._schedstat = None
            return 0.0

    def _clock(self) -> float:
        """The host-time clock: ``perf_counter`` less the run-queue delay so far. The kernel
        adds a wait to the delay when the thread gets its CPU back, so a wait that falls
        between reading the clock and reading the delay would count on one side only: as
        long as a scheduler slice (several ms on a loaded host, a third of a host time). The
        delay is read before and after the clock, again until both reads agree."""
        if self._schedstat is None:
            return time.perf_counter()
        before = self._queued_s()
        for _ in range(4):
            now = time.perf_counter()
            after = self._queued_s()
            if after == before:
                break
            before = after
        return now - after

    @contextlib.contextmanager
    def excused(self) -> Iterator[None]:
        """Work of the harness's own that not every rank does (the checkpoint writer's
        snapshot, a baseline twin's per-step state digest on rank 0) happens inside the
        host-time span but is not the rank being slow: its time is taken out. Without this,
        rank 0 of a twin spends 2-5 ms more than its peers at every step and is the one
        named, again and again, in a fault-free run."""
        if not self.cfg.enabled or self._synced is None:
            yield
            return
        start = self._clock()
        try:
            yield
        finally:
            self._excused += self._clock() - start

    def timed(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        """``hook`` (a DDP comm hook), noting when this step's first bucket is handed over."""
        def hook_noting_entry(state, bucket):  # noqa: ANN001, ANN202 (DDP checks annotations)
            if self._entered is None:
                self._entered = self._clock()
            return hook(state, bucket)

        hook_noting_entry.__doc__ = hook.__doc__
        return hook_noting_entry

    def host_s(self) -> float | None:
        """This step's host time, for the evidence row; None when off or not measurable
        (the first step of a process, a step without a gradient bucket)."""
        if not self.cfg.enabled or self._synced is None or self._entered is None:
            return None
        return max(self._entered - self._synced - self._excused, 1e-9)

    def observe(self, step: int, host_times: list[float] | None) -> SlowRank | None:
        """Right after the step's last collective: restart the host clock, take every
        rank's host time of the step, report a slow rank (once, when found ``persist`` steps
        in a row). Returns it while it is found so."""
        now = time.perf_counter()
        self._synced, self._entered, self._excused = self._clock(), None, 0.0
        if host_times is None:
            return None
        for rank, value in enumerate(host_times):
            if value > 0:
                self._windows[rank].append(value)
        full = {r: w for r, w in enumerate(self._windows) if len(w) == self.cfg.window}
        slow = (find_slow_rank(full, self.cfg.ratio, self.cfg.min_excess_s, self.cfg.noise_mads)
                if len(full) > 1 else None)
        if slow is None:
            self._reported.clear()
            self._streak = None
        else:
            count = self._streak[1] + 1 if self._streak is not None and self._streak[0] == slow.rank else 1
            self._streak = (slow.rank, count)
            if count < self.cfg.persist:
                slow = None  # not yet a finding
            elif slow.rank not in self._reported:
                self._reported = {slow.rank}
                if self.rank == min(r for r in full if r != slow.rank):
                    self._emit("detected", by=self._src, reason=slow.reason(self.cfg.window, count),
                               suspect=f"rank-{slow.rank}", failure_class="slow", detector="slow_rank",
                               step=step, ratio=round(slow.ratio, 3))
        self.seconds += time.perf_counter() - now
        return slow
