"""Toxics with Toxiproxy's semantics (github.com/Shopify/toxiproxy, toxics/*.go), re-stated
for a thread-per-direction proxy: each direction of a connection has a reader (timestamps
chunks as they arrive) and a writer that passes every chunk through the direction's toxics
in order, then writes it. A toxic applies to a connection with probability ``toxicity``,
drawn once per connection and toxic (as upstream: a toxic that did not draw is a noop).

Attributes, units and behaviour, as upstream:

latency      latency, jitter (ms): each chunk leaves ``latency +- jitter`` after it arrived.
bandwidth    rate (KB/s): chunks leave no faster than the rate (0: no limit).
timeout      timeout (ms): no data passes; the connection is closed after ``timeout``
             (0: never). Removing the toxic closes the connections it held (their data was
             lost, the stream cannot go on).
reset_peer   timeout (ms): on the first data, wait ``timeout`` then reset the connection
             (TCP RST: SO_LINGER 0); the data is dropped.
slow_close   delay (ms): the close of the stream is held back ``delay``.
slicer       average_size, size_variation (bytes), delay (us): chunks are cut into pieces
             of about ``average_size`` with ``delay`` between them.
limit_data   bytes: the connection is closed once ``bytes`` have passed in that direction.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ATTRIBUTES", "Chunk", "ConnectionToxicState", "Verdict", "apply_toxic", "slice_points"]

ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "latency": ("latency", "jitter"),
    "bandwidth": ("rate",),
    "timeout": ("timeout",),
    "reset_peer": ("timeout",),
    "slow_close": ("delay",),
    "slicer": ("average_size", "size_variation", "delay"),
    "limit_data": ("bytes",),
}
"""Toxic type -> its attributes (integers, default 0): what the API accepts."""


@dataclass
class Chunk:
    data: bytes
    t: float
    """When it arrived (monotonic); the latency toxic counts from here."""


@dataclass
class Verdict:
    """What a toxic made of a chunk: the pieces to write (each after its pause), and whether
    the connection is to be closed (``reset``: with an RST) after them."""

    pieces: list[tuple[float, Chunk]] = field(default_factory=list)
    close: bool = False
    reset: bool = False


@dataclass
class ConnectionToxicState:
    """Per connection, direction and toxic: whether it drew ``toxicity``, and its state."""

    active: bool
    started: float
    transmitted: int = 0
    bandwidth_debt: float = 0.0
    reset_at: float | None = None


def slice_points(start: int, end: int, average: int, variation: int, rng: random.Random) -> list[int]:
    """Upstream's recursive halving: [start, cut, cut, ..., end] pairs."""
    if (end - start) - average <= variation:
        return [start, end]
    mid = start + (end - start) // 2
    if variation > 0:
        mid += rng.randrange(variation * 2) - variation
    return slice_points(start, mid, average, variation, rng) + slice_points(mid, end, average, variation, rng)


def _sleep_until(t: float) -> None:
    pause = t - time.monotonic()
    if pause > 0:
        time.sleep(pause)


def apply_toxic(kind: str, attrs: dict[str, Any], state: ConnectionToxicState, chunks: list[Chunk],
                rng: random.Random) -> Verdict:
    """Pass ``chunks`` through one toxic (sleeping where the toxic holds data back)."""
    if not state.active:
        return Verdict([(0.0, c) for c in chunks])
    a = {k: int(attrs.get(k) or 0) for k in ATTRIBUTES[kind]}
    out = Verdict()
    if kind == "latency":
        for c in chunks:
            jitter = a["jitter"]
            delay = a["latency"] + (rng.randrange(jitter * 2) - jitter if jitter > 0 else 0)
            _sleep_until(c.t + delay / 1000.0)
            out.pieces.append((0.0, Chunk(c.data, c.t + delay / 1000.0)))
    elif kind == "bandwidth":
        for c in chunks:
            if a["rate"] > 0:
                # rate is KB/s: bytes per millisecond.
                state.bandwidth_debt += len(c.data) / a["rate"] / 1000.0
                start = time.monotonic()
                time.sleep(max(state.bandwidth_debt, 0.0))
                state.bandwidth_debt -= time.monotonic() - start
            out.pieces.append((0.0, c))
    elif kind == "timeout":
        pass  # dropped on the ground; the close is timed by the writer (``timeout_due``)
    elif kind == "reset_peer":
        if chunks and state.reset_at is None:
            state.reset_at = time.monotonic() + a["timeout"] / 1000.0
    elif kind == "slicer":
        for c in chunks:
            points = slice_points(0, len(c.data), max(a["average_size"], 1), a["size_variation"], rng)
            for i in range(1, len(points), 2):
                out.pieces.append((a["delay"] / 1e6 if i > 1 else 0.0, Chunk(c.data[points[i - 1]:points[i]], c.t)))
    elif kind == "limit_data":
        for c in chunks:
            remaining = max(a["bytes"] - state.transmitted, 0)
            data = c.data[:remaining]
            if data:
                out.pieces.append((0.0, Chunk(data, c.t)))
                state.transmitted += len(data)
            if a["bytes"] - state.transmitted <= 0:
                out.close = True
                break
    else:  # slow_close acts on the end of the stream only
        out.pieces = [(0.0, c) for c in chunks]
    return out
