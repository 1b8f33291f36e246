"""The allocations of the ``memory_leak`` and ``oom_kill`` faults, inside the rank (loaded by
the probe's ``leak`` action only when one fires; stdlib only, like the probe).

Every byte is written (``bytearray(b"Z") * n`` fills it), so the pages are resident and
charged to the node's memory cgroup at once: an allocation the kernel never backs would
leak nothing. What is allocated is kept for the life of the process, as a leak is.
"""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["start_leak"]

_HELD: list[bytearray] = []
_CHUNK_MB = 16


def _grab(mb: float) -> None:
    _HELD.append(bytearray(b"Z") * int(mb * (1 << 20)))


def start_leak(params: dict[str, Any]) -> None:
    """``rate_mb_s`` null: ``max_mb`` at once, in 16 MiB chunks (an OOM kill at this very
    step under a tighter limit); else a daemon thread that adds ``rate_mb_s`` every second,
    in tenths, until ``max_mb`` (the bound that keeps a node without a limit alive)."""
    max_mb = float(params.get("max_mb") or 0)
    rate = params.get("rate_mb_s")
    if rate is None:
        done = 0.0
        while done < max_mb:
            _grab(min(_CHUNK_MB, max_mb - done))
            done += _CHUNK_MB
        return

    def leak() -> None:
        done, tick = 0.0, 0.1
        while done < max_mb:
            step = min(float(rate) * tick, max_mb - done)
            _grab(step)
            done += step
            time.sleep(tick)

    threading.Thread(target=leak, name="trainchaos-memory-leak", daemon=True).start()
