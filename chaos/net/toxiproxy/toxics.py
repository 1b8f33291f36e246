"""Toxics with Toxiproxy's semantics (github.com/Shopify/toxiproxy, toxics/*.go): what each
one is called, its attributes, how the API reads them, and the arithmetic each applies to a
chunk. The waiting and the order of a link's chain are ``chaos.net.toxiproxy.link``'s.

A toxic applies to one direction (``stream``) of every connection through its proxy. Whether
it acts on a connection is drawn (``toxicity``) when the connection meets it: when the
connection opens, when the toxic is added, when it is updated (upstream redraws whenever a
toxic's stage restarts); a toxic that did not draw passes data through.

Attributes (integers, default 0), units and behaviour, as upstream:

noop         none: passes everything.
latency      latency, jitter (ms): each chunk leaves ``latency +- jitter`` after it arrived.
bandwidth    rate (KB/s, 1000 bytes): chunks leave no faster than the rate, paced in pieces
             of at most 100 ms of data (0: no limit).
timeout      timeout (ms): no data passes; the connection is closed ``timeout`` after the
             toxic met it (0: never). Removing the toxic closes the connections (their data
             was lost, the stream cannot go on).
reset_peer   timeout (ms): the first data (or the end of the stream) is dropped, and
             ``timeout`` later the connection is reset (TCP RST: SO_LINGER 0).
slow_close   delay (ms): the end of the stream is held back ``delay``.
slicer       average_size, size_variation (bytes), delay (us): chunks are cut into pieces
             of about ``average_size`` with ``delay`` after each piece.
limit_data   bytes: the connection is closed once ``bytes`` have passed in that direction.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ATTRIBUTES", "ATTRIBUTE_NAMES", "INT64", "Chunk", "Toxic", "ToxicState", "json_type", "latency_delay", "parse_attributes",
           "slice_points"]

ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "noop": (),
    "latency": ("latency", "jitter"),
    "bandwidth": ("rate",),
    "timeout": ("timeout",),
    "reset_peer": ("timeout",),
    "slow_close": ("delay",),
    "slicer": ("average_size", "size_variation", "delay"),
    "limit_data": ("bytes",),
}
"""Toxic type -> its attributes (integers, default 0): what the API accepts."""
ATTRIBUTE_NAMES = tuple(dict.fromkeys(key for keys in ATTRIBUTES.values() for key in keys))
"""Every toxic type's attributes: each must be an int64 (or null) wherever it is given."""

INT64 = (-(2 ** 63), 2 ** 63 - 1)
_serials = itertools.count(1)


def json_type(value: Any) -> str:
    """A JSON value's kind as Go's decoder names it in its errors."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def parse_attributes(kind: str, value: Any, current: dict[str, int]) -> dict[str, int]:
    """``current`` with the attributes of ``value`` (a JSON object) laid over it, as Go decodes
    into the toxic's struct: unknown keys ignored, null leaves a value as it was, anything
    but a whole number in int64 refused (ValueError with the reason). An attribute of another
    toxic type is refused the same way when it is not such a number, and then ignored
    (upstream ignores it whatever it is: a typo'd type stays a 400 in either order)."""
    if value is None:
        return dict(current)
    if not isinstance(value, dict):
        raise ValueError(f"cannot unmarshal {json_type(value)} into the attributes of a {kind} toxic")
    out = dict(current)
    for key in ATTRIBUTE_NAMES:
        if key not in value or value[key] is None:
            continue
        v = value[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"cannot unmarshal {json_type(v)} into attribute {key} of type int64")
        if isinstance(v, float) and not v.is_integer() or not INT64[0] <= v <= INT64[1]:
            raise ValueError(f"cannot unmarshal number {v} into attribute {key} of type int64")
        if key in ATTRIBUTES[kind]:
            out[key] = int(v)
    return out


@dataclass
class Toxic:
    """One toxic of a proxy. ``stream`` is kept as the client spelled it (upstream parses it
    case-insensitively and reports it back unchanged); ``direction`` is the parsed one."""

    name: str
    type: str
    stream: str
    direction: str
    toxicity: float = 1.0
    attributes: dict[str, int] = field(default_factory=dict)
    serial: int = field(default_factory=lambda: next(_serials))
    """Tells a toxic from a later one of the same name (removed, then added again)."""

    def attr(self, key: str) -> int:
        return int(self.attributes.get(key) or 0)

    def to_json(self) -> dict[str, Any]:
        return {"attributes": {k: self.attr(k) for k in ATTRIBUTES[self.type]}, "name": self.name,
                "type": self.type, "stream": self.stream, "toxicity": self.toxicity}


@dataclass
class ToxicState:
    """Per link (one direction of one connection) and toxic."""

    active: bool
    """The toxicity draw."""
    started: float
    """When the toxic met the link (monotonic): the timeout toxic counts from here."""
    epoch: int = 0
    """Bumped by every update: a wait in this toxic's stage ends early, as upstream's
    interrupt does, and passes the held data on."""
    removed: bool = False
    transmitted: int = 0
    """limit_data: bytes passed (kept across updates, as upstream keeps a stub's state)."""
    debt: float = 0.0
    """bandwidth: seconds of sending owed (reset by an update, as upstream's local is)."""
    reset_at: float | None = None
    """reset_peer: when the reset goes out, once data met the toxic."""

    @classmethod
    def draw(cls, toxic: Toxic, rng: random.Random, now: float) -> ToxicState:
        return cls(active=rng.random() < toxic.toxicity, started=now)

    def restart(self, toxic: Toxic, rng: random.Random, now: float) -> None:
        self.active = rng.random() < toxic.toxicity
        self.started, self.debt = now, 0.0
        self.epoch += 1


@dataclass
class Chunk:
    data: bytes
    t: float
    """When it arrived (monotonic), moved on by each latency toxic it passed."""


def latency_delay(toxic: Toxic, rng: random.Random) -> float:
    """Seconds a chunk is held: latency +- a uniform draw in [-jitter, jitter)."""
    delay, jitter = toxic.attr("latency"), toxic.attr("jitter")
    if jitter > 0:
        delay += rng.randrange(jitter * 2) - jitter
    return delay / 1000.0


def slice_points(start: int, end: int, average: int, variation: int, rng: random.Random) -> list[int]:
    """Upstream's recursive halving: [start, cut, cut, ..., end] as (from, to) pairs.
    ``average`` is at least 1 (0 would never end)."""
    average = max(average, 1)
    if (end - start) - average <= variation:
        return [start, end]
    mid = start + (end - start) // 2
    if variation > 0:
        # Kept strictly inside: upstream's cut can leave the chunk (and repeat bytes).
        mid = min(max(mid + rng.randrange(variation * 2) - variation, start + 1), end - 1)
    return slice_points(start, mid, average, variation, rng) + slice_points(mid, end, average, variation, rng)
