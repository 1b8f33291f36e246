"""The slow-rank detector: a rank slower than its peers, named while training goes on.

In synchronous data-parallel training every rank's step takes as long as the slowest one's,
so step time says *that* the job is slow, not *who*. What differs is where each rank spends
the step: a slow rank is busy, its peers wait for it inside the gradient all-reduce. Each
rank measures its **host time**: from the moment the previous step's last collective
returned (the evidence all-reduce, which every rank leaves together) to the moment it
enters this step's first collective (DDP calls the comm hook with the first gradient
bucket). Waiting for peers is outside that span; a rank's own slowness (its compute, its
data, a throttled device, anything it does before it can contribute) is inside it. Time the
training thread spent runnable but waiting for a CPU (the kernel's run-queue delay, from
/proc schedstat) is taken out: on a host with fewer cores than ranks (this 2-core machine
runs four) which rank the scheduler runs first decides whose host time doubles, for several
steps in a row (up to 2.6x in a fault-free run), and that is the scheduler's choice, not a
slow rank. On a host with a core per rank the delay is nil and nothing changes.

Every rank's host time rides on the all-reduce each step makes anyway (``harness.sdc``,
column ``HOST_COLUMN``), so all ranks judge the same numbers with no collective of their
own. A rank is slow when the *least* of its last ``window`` host times is at least
``ratio`` x the median of its peers' least ones and ``min_excess_s`` above it. The least,
not the median: on a shared host, contention only ever adds time (a rank that waited for a
core is late, never early), so one rank's median wanders with the scheduler while its
least stays at what the rank itself needs; a rank that is really slow is slow at every
step, so its least rises with it (and one slow step, a checkpoint snapshot, cannot raise
it). The lowest
other rank reports it once (``detected``, failure class ``slow``, detector ``slow_rank``);
it is reported again only after it was back to normal for a window. Training goes on: a
slow rank is a finding, not a failure to restart from.
"""

from __future__ import annotations

import collections
import os
import statistics
import threading
import time
from collections.abc import Callable
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

    def reason(self, window: int) -> str:
        return (f"rank {self.rank} is slow: host time at least {self.own_s * 1000:.1f} ms at each of its last "
                f"{window} steps, {self.ratio:.2f}x its peers' {self.peers_s * 1000:.1f} ms")


def find_slow_rank(least: dict[int, float], ratio: float, min_excess_s: float) -> SlowRank | None:
    """The rank furthest above its peers, if it is slow by both measures; pure."""
    found = None
    for rank, own in least.items():
        peers = [v for r, v in least.items() if r != rank]
        if not peers:
            continue
        ref = statistics.median(peers)
        if own >= ratio * ref and own - ref >= min_excess_s and (found is None or own - ref > found.own_s - found.peers_s):
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
        self._windows = [collections.deque(maxlen=cfg.window) for _ in range(world_size)]
        self._reported: set[int] = set()
        # The training thread's scheduler statistics, read from whatever thread calls the
        # hook (the autograd engine may run it on a thread of its own).
        path = f"/proc/self/task/{threading.main_thread().native_id}/schedstat"
        self._schedstat: str | None = path if self.cfg.enabled and os.path.exists(path) else None
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
            with open(self._schedstat, "rb") as fh:
                return int(fh.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            self._schedstat = None
            return 0.0

    def timed(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        """``hook`` (a DDP comm hook), noting when this step's first bucket is handed over."""
        def hook_noting_entry(state, bucket):  # noqa: ANN001, ANN202 (DDP checks annotations)
            if self._entered is None:
                self._entered = time.perf_counter() - self._queued_s()
            return hook(state, bucket)

        hook_noting_entry.__doc__ = hook.__doc__
        return hook_noting_entry

    def host_s(self) -> float | None:
        """This step's host time, for the evidence row; None when off or not measurable
        (the first step of a process, a step without a gradient bucket)."""
        if not self.cfg.enabled or self._synced is None or self._entered is None:
            return None
        return max(self._entered - self._synced, 1e-9)

    def observe(self, step: int, host_times: list[float] | None) -> SlowRank | None:
        """Right after the step's last collective: restart the host clock, take every
        rank's host time of the step, report a slow rank (once). Returns it."""
        now = time.perf_counter()
        self._synced, self._entered = now - self._queued_s(), None
        if host_times is None:
            return None
        for rank, value in enumerate(host_times):
            if value > 0:
                self._windows[rank].append(value)
        least = {r: min(w) for r, w in enumerate(self._windows) if len(w) == self.cfg.window}
        slow = find_slow_rank(least, self.cfg.ratio, self.cfg.min_excess_s) if len(least) > 1 else None
        if slow is None:
            self._reported.clear()
        elif slow.rank not in self._reported:
            self._reported = {slow.rank}
            if self.rank == min(r for r in least if r != slow.rank):
                self._emit("detected", by=self._src, reason=slow.reason(self.cfg.window),
                           suspect=f"rank-{slow.rank}", failure_class="slow", detector="slow_rank", step=step,
                           ratio=round(slow.ratio, 3))
        self.seconds += time.perf_counter() - now
        return slow
