"""The rules a fault layer applies to each file operation: pure logic, no FUSE, no I/O.

A rule (one per injected storage fault) says *which* operations it hits -- a glob on the path
relative to the mount (``fnmatch``: ``*`` also crosses ``/``), a set of operation names, the
callers (ranks or nodes, read from the calling process's environment) and a probability --
and *what* happens to them: block until the rule is removed (``stall``), a delay per
operation and a bandwidth cap (``slow``), an errno (``error``), ENOSPC once a byte budget is
used up (``disk_full``), or bit flips in the bytes read or written (``corrupt``). Rules are
plain JSON mappings, written by the injector into the control file and read by the daemon.
"""

from __future__ import annotations

import errno as _errno
import fnmatch
import random
import threading
from dataclasses import dataclass, field
from typing import Any

from chaos.storage.latency import LatencyDraw

__all__ = ["ACTIONS", "OPS", "Caller", "Decision", "Rule", "RuleSet", "errno_number"]

OPS: tuple[str, ...] = ("open", "create", "read", "write", "fsync", "flush", "rename", "unlink",
                        "mkdir", "rmdir", "readdir", "getattr", "truncate", "statfs")
"""Operation names a rule can filter on (what the kernel asks the file system)."""
ACTIONS: tuple[str, ...] = ("stall", "slow", "error", "disk_full", "corrupt")
ERRNO_NAMES: tuple[str, ...] = tuple(sorted(n for n in dir(_errno) if n.startswith("E") and n.isupper()
                                            and isinstance(getattr(_errno, n), int)))


def errno_number(name: str) -> int:
    """``EIO`` -> 5; ValueError naming a few known ones for an unknown name."""
    value = getattr(_errno, name, None) if name in ERRNO_NAMES else None
    if value is None:
        raise ValueError(f"unknown errno name {name!r}; e.g. EIO, ENOSPC, EROFS, EDQUOT, ETIMEDOUT, "
                         "EACCES (any errno name of the platform)")
    return int(value)


@dataclass(frozen=True)
class Caller:
    """Who issued an operation: the rank and node in the calling process's environment (a
    DataLoader worker inherits its rank's), None when the process carries none."""

    rank: int | None = None
    node: int | None = None


@dataclass
class Decision:
    """What the layer does to one operation."""

    stall: list[Rule] = field(default_factory=list)
    """Block until each of these rules is removed (or the layer shuts down)."""
    sleep_s: float = 0.0
    errno: int | None = None
    allow_bytes: int | None = None
    """disk_full: write at most this many bytes, then ENOSPC."""
    flip_bits: int = 0
    """Bits to flip in the data of this read or write."""
    rng: random.Random | None = None
    hits: list[str] = field(default_factory=list)
    """Ids of the rules that hit this operation (counted in the layer's state)."""


@dataclass
class Rule:
    rule_id: str
    action: str
    paths: tuple[str, ...] = ("*",)
    ops: tuple[str, ...] = OPS
    probability: float = 1.0
    ranks: tuple[int, ...] = ()
    nodes: tuple[int, ...] = ()
    latency_s: float = 0.0
    latency_dist: dict[str, Any] | None = None
    """A latency drawn per operation (``chaos.storage.latency``), added to ``latency_s``."""
    bandwidth_bps: float = 0.0
    errno: int = _errno.EIO
    bytes_left: int = 0
    bits: int = 1
    seed: int = 0
    _rng: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)
    _latency: LatencyDraw | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"rule {self.rule_id}: action {self.action!r}; allowed: {', '.join(ACTIONS)}")
        bad = sorted(set(self.ops) - set(OPS))
        if bad:
            raise ValueError(f"rule {self.rule_id}: unknown op {bad[0]!r}; allowed: {', '.join(OPS)}")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"rule {self.rule_id}: probability {self.probability} is outside [0, 1]")
        self._rng = random.Random(f"{self.seed}/{self.rule_id}")
        if self.latency_dist:
            self._latency = LatencyDraw(self.latency_dist, f"{self.seed}/{self.rule_id}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rule:
        known = {f for f in cls.__dataclass_fields__ if not f.startswith("_")}
        kwargs: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in known}
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()
                if not k.startswith("_")}

    def matches(self, op: str, relpath: str, caller: Caller) -> bool:
        if op not in self.ops:
            return False
        if self.ranks and caller.rank not in self.ranks:
            return False
        if self.nodes and caller.node not in self.nodes:
            return False
        return any(fnmatch.fnmatchcase(relpath, pattern) for pattern in self.paths)

    def draw(self) -> bool:
        """The probability draw (seeded per rule: a repeat of the run draws the same)."""
        if self.probability >= 1.0:
            return True
        with self._lock:
            return self._rng.random() < self.probability

    def take_bytes(self, want: int) -> int:
        """disk_full: how many of ``want`` bytes still fit (and use them up)."""
        with self._lock:
            granted = max(0, min(want, self.bytes_left))
            self.bytes_left -= granted
            return granted


class RuleSet:
    """The active rules of one mount; replaced as a whole when the control file changes."""

    def __init__(self, rules: list[Rule] | None = None) -> None:
        self.rules = list(rules or [])

    def decide(self, op: str, relpath: str, caller: Caller, nbytes: int = 0) -> Decision:
        decision = Decision()
        for rule in self.rules:
            if not rule.matches(op, relpath, caller) or not rule.draw():
                continue
            decision.hits.append(rule.rule_id)
            if rule.action == "stall":
                decision.stall.append(rule)
            elif rule.action == "slow":
                decision.sleep_s += rule.latency_s
                if rule._latency is not None:
                    decision.sleep_s += rule._latency.seconds(op)
                if rule.bandwidth_bps > 0 and nbytes:
                    decision.sleep_s += nbytes / rule.bandwidth_bps
            elif rule.action == "error":
                decision.errno = decision.errno or rule.errno
            elif rule.action == "disk_full":
                if op in ("write", "create", "truncate") and nbytes:
                    granted = rule.take_bytes(nbytes)
                    if granted < nbytes:
                        decision.allow_bytes = granted if decision.allow_bytes is None else min(granted, decision.allow_bytes)
            elif rule.action == "corrupt":
                decision.flip_bits += rule.bits
                decision.rng = rule._rng
        return decision


def flip(data: bytes | memoryview, bits: int, rng: random.Random) -> bytes | memoryview:
    """``data`` with ``bits`` seeded random bits flipped (silent corruption in the IO path)."""
    if not data or bits <= 0:
        return data
    out = bytearray(data)
    for _ in range(bits):
        pos = rng.randrange(len(out) * 8)
        out[pos // 8] ^= 1 << (pos % 8)
    return bytes(out)
