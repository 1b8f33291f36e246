"""The step-progress watchdog: a live rank whose training loop stops, found by its progress.

The heartbeat watchdog (harness.health) asks "does the process answer?". A rank whose
training thread is stuck in a deadlock or a wait that never returns still answers: its
heartbeat runs on another thread. This watchdog asks "does the loop progress?": a rank that
completed no step for ``progress.timeout_s`` gathers every rank's progress state over the
liveness endpoints and names the stuck one, the way NCCL's flight recorder compares what
each rank entered:

* a rank that does not answer                      -> ``hang`` (frozen: SIGSTOP, a GIL held
  in C), ``crash`` or ``network`` as the heartbeat's own diagnosis says;
* ranks whose training thread is outside any collective while peers wait in one
                                                    -> ``stalled``, cause ``host``: the
  peer that never entered the collective (named; the lowest rank when several);
* every rank waiting in a collective, none leaving  -> ``stalled``, cause ``collective``,
  no suspect: the collective itself never completes;
* every rank outside collectives                    -> ``stalled``, cause ``host``, no
  suspect unless it is one rank alone.

Where a training thread is comes from its stack, read by the liveness thread
(``sys._current_frames``): inside ``torch.distributed`` or the autograd engine (where DDP
waits for its gradient all-reduce) is "in a collective", anything else is host-side. The
innermost frames go into the report, as ``py-spy dump`` would show them.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.config import ProgressConfig
from harness.health import PROGRESS_REQUEST, Diagnosis, LivenessServer, PeerAddress, ask

__all__ = ["ProgressWatchdog", "StallVerdict", "classify_stall", "thread_position"]

_COLLECTIVE_PATHS = (os.sep + os.path.join("torch", "distributed") + os.sep,)
_BACKWARD_FUNCS = ("_engine_run_backward", "backward")
_WHERE_FRAMES = 3


@dataclass(frozen=True)
class StallVerdict:
    suspect: int | None
    failure_class: str
    """stalled | hang | crash | network"""
    cause: str
    """host (outside any collective) | collective (inside one that never completes) |
    frozen | gone | unreachable"""
    reason: str


def thread_position(thread_id: int | None) -> tuple[str, str]:
    """(phase, where) of a thread: ``collective`` when its stack is inside torch.distributed
    or the autograd engine (where DDP waits for its all-reduce), else ``host``; ``where``
    is its innermost frames, ``file:line function`` innermost first."""
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    in_torch = [f for f in frames if os.sep + "torch" + os.sep in f.f_code.co_filename]
    collective = any(any(p in f.f_code.co_filename for p in _COLLECTIVE_PATHS)
                     or f.f_code.co_name in _BACKWARD_FUNCS for f in in_torch)
    where = " < ".join(f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno} {f.f_code.co_name}"
                       for f in frames[:_WHERE_FRAMES])
    return ("collective" if collective else "host"), where


def classify_stall(states: dict[int, dict[str, Any] | Diagnosis]) -> StallVerdict:
    """Name the stuck rank from every rank's progress state (a rank that could not answer
    is its ``Diagnosis``). Pure: every rank that runs it on the same states agrees."""
    silent = sorted((d for d in states.values() if isinstance(d, Diagnosis)),
                    key=lambda d: ({"hang": 0, "crash": 1, "network": 2}.get(d.failure_class, 9), d.rank))
    if silent:
        d = silent[0]
        cause = {"hang": "frozen", "crash": "gone"}.get(d.failure_class, "unreachable")
        return StallVerdict(d.rank, d.failure_class, cause,
                            f"no progress, and {d.detail}")
    live: dict[int, dict[str, Any]] = {r: s for r, s in states.items() if not isinstance(s, Diagnosis)}
    host = sorted(r for r, s in live.items() if s.get("phase") != "collective")
    waiting = sorted(r for r in live if r not in host)
    step = max(int(s.get("step") or 0) for s in live.values())
    if host and waiting:
        r = host[0]
        others = f" (also outside: {', '.join(map(str, host[1:]))})" if host[1:] else ""
        return StallVerdict(r, "stalled", "host", (
            f"rank {r} answers but its training loop is stuck outside any collective at "
            f"{live[r].get('where') or '?'}, step {int(live[r].get('step') or 0)} done{others}; "
            f"rank{'s' if len(waiting) > 1 else ''} {', '.join(map(str, waiting))} wait in the "
            f"collective of step {step + 1} it never entered"))
    if waiting:
        return StallVerdict(None, "stalled", "collective", (
            f"every rank answers and waits in the collective of step {step + 1}; none leaves it: "
            "the collective itself never completes"))
    if len(host) == 1:
        r = host[0]
        return StallVerdict(r, "stalled", "host", (
            f"rank {r} answers but its training loop is stuck at {live[r].get('where') or '?'}, "
            f"step {int(live[r].get('step') or 0)} done"))
    return StallVerdict(None, "stalled", "host", (
        f"every rank answers and none is in a collective, yet no step completes after step {step}: "
        f"rank {host[0]} is at {live[host[0]].get('where') or '?'}"))


class ProgressWatchdog:
    """Watches this rank's own progress (``beat`` at each completed step) and, when it
    stops for ``timeout_s``, gathers every rank's state and reports a ``StallVerdict``.

    Publishes this rank's state on its liveness endpoint (``LivenessServer.status``), read
    by the liveness thread, which runs while the training thread is stuck (unless the GIL
    is held: then nothing answers, and the rank is frozen to everyone)."""

    def __init__(self, cfg: ProgressConfig, rank: int, peers: list[PeerAddress], liveness: LivenessServer,
                 heartbeat_s: float, last_step: int, on_stall: Callable[[StallVerdict], None]) -> None:
        self.timeout_s = cfg.timeout_s
        self.rank = rank
        self._peers = peers
        self._on_stall = on_stall
        self._check_s = min(heartbeat_s, cfg.timeout_s / 4)
        self._step: int | None = None
        self._last_beat: float | None = None
        self._final = last_step
        self._main = threading.main_thread().ident
        self._stop = threading.Event()
        liveness.status = self.state
        self._thread = threading.Thread(target=self._run, name="progress-watchdog", daemon=True)

    @classmethod
    def for_config(cls, cfg: ProgressConfig, *args: Any, **kwargs: Any) -> ProgressWatchdog | None:
        """The watchdog, started, or None when ``progress.timeout_s`` is 0 (off)."""
        if cfg.timeout_s <= 0:
            return None
        watchdog = cls(cfg, *args, **kwargs)
        watchdog._thread.start()
        return watchdog

    def beat(self, step: int) -> None:
        """A step completed. The clock starts at the first one (start-up, rendezvous and a
        checkpoint load are not the loop); the last one stops the watchdog."""
        self._step, self._last_beat = step, time.monotonic()
        if step >= self._final:
            self._stop.set()

    def stop(self) -> None:
        self._stop.set()

    def state(self) -> dict[str, Any]:
        phase, where = thread_position(self._main)
        idle = None if self._last_beat is None else round(time.monotonic() - self._last_beat, 3)
        return {"rank": self.rank, "pid": os.getpid(), "step": self._step, "idle_s": idle,
                "phase": phase, "where": where}

    def _run(self) -> None:
        while not self._stop.wait(self._check_s):
            if self._last_beat is None or time.monotonic() - self._last_beat < self.timeout_s:
                continue
            verdict = classify_stall(self.gather())
            if self._stop.is_set():
                return  # the loop finished meanwhile
            self._stop.set()
            self._on_stall(verdict)
            return

    def gather(self) -> dict[int, dict[str, Any] | Diagnosis]:
        """Every rank's state, this one's included, asked in parallel (1 s each at most)."""
        states: dict[int, dict[str, Any] | Diagnosis] = {self.rank: self.state()}
        lock = threading.Lock()

        def one(peer: PeerAddress) -> None:
            reply = ask(peer, PROGRESS_REQUEST, timeout_s=1.0)
            answer: dict[str, Any] | Diagnosis
            if isinstance(reply, Diagnosis):
                answer = reply
            else:
                try:
                    answer = json.loads(reply)
                except ValueError:  # an endpoint without progress (pong): alive, position unknown
                    answer = {"rank": peer.rank, "phase": "unknown", "where": "unknown"}
            with lock:
                states[peer.rank] = answer

        threads = [threading.Thread(target=one, args=(p,), daemon=True) for p in self._peers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(2.5)
        return states
