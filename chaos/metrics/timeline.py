"""The merged event timeline, indexed once, and the questions every metric asks of it:
incarnations before a moment, the furthest step of the current generation, where an
incarnation resumed from, and the surviving lineage of steps (definitions:
docs/metrics.md)."""

from __future__ import annotations

from typing import Any

__all__ = ["Event", "Timeline", "float_or_none", "incarnation", "int_or_none", "surviving_lineage", "rank_of", "resumed_from"]

Event = dict[str, Any]


def rank_of(src: Any) -> int | None:
    if isinstance(src, str) and src.startswith("rank-"):
        try:
            return int(src[5:])
        except ValueError:
            return None
    return None


def incarnation(e: Event) -> int:
    try:
        return int(e.get("incarnation") or 0)
    except (TypeError, ValueError):
        return 0


def int_or_none(v: Any) -> int | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def float_or_none(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


class Timeline:
    """The timeline, indexed once for the per-fault questions."""

    def __init__(self, events: list[Event], t_stop: float | None = None) -> None:
        self.events = sorted(events, key=lambda e: e["t"])  # stable: keeps per-file order
        self.rank_events = [e for e in self.events if rank_of(e.get("src")) is not None]
        self.step_ends = [
            e for e in self.rank_events
            if e.get("kind") == "step_end" and int_or_none(e.get("step")) is not None
        ]
        # A rank that wrote an event itself (not a log line read for it): the job reports
        # through chaos.probe, an adapter line or a script's own calls.
        self.probe_reports = any(e.get("via") != "log" for e in self.rank_events)
        # Teardown by trainchaos is not a detection (see "Teardown" above).
        self.detections = [e for e in self.events if e.get("kind") == "detected"
                           and (t_stop is None or e["t"] < t_stop)]

    def first_fault_event(self, kind: str, fault_id: str) -> Event | None:
        for e in self.events:
            if e.get("kind") == kind and e.get("fault") == fault_id:
                return e
        return None

    def pre_incarnations(self, t: float) -> tuple[dict[str, int], int]:
        """Per rank src, its highest incarnation before ``t``; and the default for others."""
        pre: dict[str, int] = {}
        for e in self.rank_events:
            if e["t"] >= t:
                break
            src = e["src"]
            pre[src] = max(pre.get(src, 0), incarnation(e))
        return pre, max(pre.values(), default=0)

    def last_step(self, t: float, inclusive: bool = False) -> int | None:
        """Furthest step of the current generation before ``t`` (definitions: docs/metrics.md)."""
        latest: dict[str, Event] = {}
        for e in self.step_ends:
            if e["t"] > t or (e["t"] == t and not inclusive):
                break
            latest[e["src"]] = e
        if not latest:
            return None
        top_inc = max(incarnation(e) for e in latest.values())
        return max(int(e["step"]) for e in latest.values() if incarnation(e) == top_inc)


def _lowest_rank_first(events: list[Event]) -> list[Event]:
    return sorted(events, key=lambda e: (rank_of(e["src"]), e["t"]))


def resumed_from(tl: Timeline, inc: int, t_inject: float, first_step: Event | None,
                 superseded: bool = False) -> int | None:
    """Where the incarnation ``inc`` resumed training from (definitions: docs/metrics.md).

    ``superseded``: a later incarnation replaced this one before its first step (a node
    rejoining while it started). Its bare ``rank_start`` then says it started, not that it
    started fresh: it had not loaded yet, so it resumed from nowhere (None)."""
    starts = [
        e for e in tl.rank_events
        if e.get("kind") == "rank_start" and incarnation(e) == inc and e["t"] >= t_inject
    ]
    for e in _lowest_rank_first(starts):
        resumed = int_or_none(e.get("resumed_from"))
        if resumed is not None:
            return resumed
    loads = [
        e for e in tl.rank_events
        if e.get("kind") == "ckpt_load" and incarnation(e) == inc and e["t"] >= t_inject
        # ``skipped`` lists the checkpoints a load fell back past (bit rot, a torn write);
        # only ``skipped: true`` marks a load that did not happen.
        and e.get("skipped") is not True and int_or_none(e.get("step")) is not None
        and (first_step is None or e["t"] <= first_step["t"])
    ]
    if loads:
        lowest = min(rank_of(e["src"]) or 0 for e in loads)  # rank events: never None
        return int([e for e in loads if rank_of(e["src"]) == lowest][-1]["step"])
    if starts and not (superseded and first_step is None):
        return 0
    if first_step is not None:
        return max(int(first_step["step"]) - 1, 0)
    return None



def surviving_lineage(tl: Timeline) -> list[tuple[int, float, float | None]]:
    """The surviving steps of the reference rank: (step, duration_s, loss), ascending."""
    stepping = {e["src"] for e in tl.step_ends}
    if not stepping:
        return []
    ref = "rank-0" if "rank-0" in stepping else min(stepping, key=lambda s: rank_of(s) or 0)
    anchor: dict[int, float] = {}
    last_step_t: dict[int, float] = {}
    stack: list[tuple[int, float, float | None]] = []
    for e in tl.rank_events:
        if e["src"] != ref:
            continue
        inc, kind = incarnation(e), e.get("kind")
        anchor.setdefault(inc, e["t"])
        if kind == "rank_start":
            anchor[inc] = e["t"]
        elif kind == "ckpt_load" and inc not in last_step_t:
            anchor[inc] = max(anchor[inc], e["t"])
        elif kind == "step_end" and int_or_none(e.get("step")) is not None:
            step = int(e["step"])
            start = last_step_t.get(inc, anchor[inc])
            last_step_t[inc] = e["t"]
            while stack and stack[-1][0] >= step:
                stack.pop()
            stack.append((step, max(e["t"] - start, 0.0), float_or_none(e.get("loss"))))
    return stack
