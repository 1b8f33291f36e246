"""The exactly-once data checker: was every sample trained on once by the training that
survived, none lost, none twice, whatever the faults did (definitions: docs/checkers.md).

Input: the sample indices each rank reports with its ``step_end`` (``probe.samples``,
``probe.track``; sorted half-open ranges). The checker replays every incarnation's reports
against the checkpoint each one resumed from: a ``ckpt_load`` (or ``reload``) of step R
rolls back every step above R trained before it (that work is lost with the process that
did it); a step trained again by a newer process of the same rank with no load reported
(a restart from scratch) rolls back from that step. What is left is the *surviving
lineage*: the trainings the final model holds. Per epoch:

``data_lost``
    Samples the training should have covered that the surviving lineage never trained on.
    What it should have covered: the fault-free twin's samples at the steps the lineage
    reached (``baseline: true``; the twin's own repeats, such as a DistributedSampler's
    padding, are expected), else every sample any incarnation reported (then a sample no
    process ever reported cannot be missed).
``data_rolled_back_only``
    Of those lost, the ones some rolled-back incarnation did train on: the data position
    was not rewound to the checkpoint (the sampler kept going, or a replica's progress was
    dropped).
``data_duplicated``
    Trainings of the surviving lineage beyond what was expected: a sample trained twice
    because the data position went back further than the model did.

Counting is interval arithmetic over the ranges, never per sample: its cost grows with
the number of ranges reported, not with the dataset's size.

Registered as the ``data`` metric family (run-wide); the ``data`` target
(``exactly_once | at_least_once | {max_lost, max_duplicated}``) is judged by
``chaos.runner.verdict`` from these values.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from chaos.metrics.family import MetricFamily, RunContext
from chaos.metrics.spec import MetricSpec, Tolerance
from chaos.metrics.timeline import Event, incarnation, int_or_none, rank_of

__all__ = ["DATA_FIELDS", "FAMILY", "Replay", "baseline_samples", "data_metrics", "replay", "sample_ranges",
           "step_coverage"]

DATA_FIELDS = ("data_samples", "data_lost", "data_duplicated", "data_rolled_back_only", "data_epochs")

Span = tuple[int, int]


@dataclass
class _Training:
    """One rank's report of one step: who trained which samples."""

    src: str
    incarnation: int
    step: int
    epoch: int
    spans: list[Span]
    t: float


@dataclass
class Replay:
    """The trainings that survived (by step) and those rolled back, in report order."""

    lineage: dict[int, list[_Training]] = field(default_factory=dict)
    rolled_back: list[_Training] = field(default_factory=list)
    reports: int = 0

    def roll_back_above(self, step: int) -> None:
        for s in [s for s in self.lineage if s > step]:
            self.rolled_back.extend(self.lineage.pop(s))


def sample_ranges(value: Any) -> list[Span] | None:
    """The ``samples`` field of a ``step_end`` as spans; None when absent or malformed."""
    if not isinstance(value, list):
        return None
    spans = []
    for item in value:
        if (isinstance(item, list | tuple) and len(item) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in item) and item[1] > item[0]):
            spans.append((int(item[0]), int(item[1])))
        else:
            return None
    return spans


def replay(events: Iterable[Event]) -> Replay:
    """Every rank's sample reports, replayed against the checkpoints the restarts loaded."""
    out = Replay()
    for e in sorted((e for e in events if rank_of(e.get("src")) is not None), key=lambda e: e["t"]):
        kind = e.get("kind")
        if kind in ("ckpt_load", "reload"):
            loaded = int_or_none(e.get("step"))
            if loaded is not None and e.get("skipped") is not True:
                out.roll_back_above(loaded)
        elif kind == "step_end":
            spans = sample_ranges(e.get("samples"))
            step = int_or_none(e.get("step"))
            if spans is None or step is None:
                continue
            out.reports += 1
            inc = incarnation(e)
            if any(t.src == e["src"] and t.incarnation < inc for t in out.lineage.get(step, ())):
                out.roll_back_above(step - 1)  # restarted from scratch, no load reported
            out.lineage.setdefault(step, []).append(
                _Training(str(e["src"]), inc, step, int_or_none(e.get("epoch")) or 0, spans, float(e["t"])))
    return out


def _by_epoch(trainings: Iterable[_Training]) -> dict[int, list[Span]]:
    out: dict[int, list[Span]] = {}
    for t in trainings:
        out.setdefault(t.epoch, []).extend(t.spans)
    return out


def _multiplicities(*sets: list[Span]) -> list[tuple[Span, list[int]]]:
    """Elementary segments over the boundaries of every set: (segment, multiplicity in each)."""
    deltas: dict[int, list[int]] = {}
    for i, spans in enumerate(sets):
        for start, stop in spans:
            deltas.setdefault(start, [0] * len(sets))[i] += 1
            deltas.setdefault(stop, [0] * len(sets))[i] -= 1
    points = sorted(deltas)
    level = [0] * len(sets)
    out = []
    for a, b in zip(points, points[1:], strict=False):
        level = [lv + d for lv, d in zip(level, deltas[a], strict=True)]
        if any(level):
            out.append(((a, b), list(level)))
    return out


def _segments_covered(spans: list[Span]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, stop in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([start, stop])
    return [(a, b - a) for a, b in merged]


def _expected(rep: Replay, baseline_samples: dict[Any, Any] | None) -> dict[int, list[Span]]:
    """What the surviving lineage should have trained, per epoch (see the module docstring)."""
    expected: dict[int, list[Span]] = {}
    if baseline_samples:
        last_step = max(rep.lineage, default=0)
        for step, per_epoch in baseline_samples.items():
            s = int_or_none(step)
            if s is None or s > last_step:
                continue
            for epoch, spans in per_epoch:
                expected.setdefault(int(epoch), []).extend(sample_ranges(spans) or [])
        return expected
    reported = _by_epoch([*(t for ts in rep.lineage.values() for t in ts), *rep.rolled_back])
    return {epoch: [(a, a + n) for a, n in _segments_covered(spans)] for epoch, spans in reported.items()}


def _count(rep: Replay, baseline_samples: dict[Any, Any] | None) -> tuple[list[dict[str, int]], dict[int, list[Span]]]:
    """Per epoch counts, and per epoch the sample ranges trained more often than expected."""
    lineage = _by_epoch(t for ts in rep.lineage.values() for t in ts)
    rolled = _by_epoch(rep.rolled_back)
    expected = _expected(rep, baseline_samples)
    epochs = []
    repeated: dict[int, list[Span]] = {}
    for epoch in sorted(set(expected) | set(lineage) | set(rolled)):
        row = {"epoch": epoch, "expected": 0, "trained": 0, "lost": 0, "duplicated": 0, "rolled_back_only": 0}
        for (start, stop), (m_exp, m_kept, m_rolled) in _multiplicities(
                expected.get(epoch, []), lineage.get(epoch, []), rolled.get(epoch, [])):
            length = stop - start
            row["expected"] += length * m_exp
            row["trained"] += length * m_kept
            missing = max(0, m_exp - m_kept)
            row["lost"] += length * missing
            extra = max(0, m_kept - max(m_exp, 1))
            row["duplicated"] += length * extra
            if extra:
                repeated.setdefault(epoch, []).append((start, stop))
            if missing and m_rolled:
                row["rolled_back_only"] += length * min(missing, m_rolled)
        epochs.append(row)
    return epochs, repeated


def data_metrics(events: list[Event], baseline_samples: dict[Any, Any] | None = None) -> dict[str, Any]:
    """The fields above from a run's events; ``baseline_samples``: the twin's step ->
    ``[[epoch, [[start, stop], ...]], ...]`` (``BaselineInfo.samples``)."""
    rep = replay(events)
    if not rep.reports:
        return dict.fromkeys(DATA_FIELDS)
    epochs, _ = _count(rep, baseline_samples)
    return {
        "data_samples": sum(r["trained"] for r in epochs),
        "data_lost": sum(r["lost"] for r in epochs),
        "data_duplicated": sum(r["duplicated"] for r in epochs),
        "data_rolled_back_only": sum(r["rolled_back_only"] for r in epochs),
        "data_epochs": epochs,
    }


def step_coverage(events: list[Event], baseline_samples: dict[Any, Any] | None = None) -> list[tuple[int, int, str]]:
    """For the run report's samples lane: ``(step, incarnation, status)`` for every step a
    rank reported samples for, status ``once`` (kept, no repeat), ``duplicate`` (kept, holds
    a sample trained more often than expected) or ``rolled_back``."""
    rep = replay(events)
    if not rep.reports:
        return []
    _, repeated = _count(rep, baseline_samples)

    def overlaps(t: _Training) -> bool:
        return any(a < stop and start < b for start, stop in t.spans for a, b in repeated.get(t.epoch, []))

    out: dict[tuple[int, int], str] = {}
    for step, trainings in rep.lineage.items():
        for t in trainings:
            key = (step, t.incarnation)
            if out.get(key) != "duplicate":
                out[key] = "duplicate" if overlaps(t) else "once"
    for t in rep.rolled_back:
        out.setdefault((t.step, t.incarnation), "rolled_back")
    return sorted((step, inc, status) for (step, inc), status in out.items())


def baseline_samples(events: Iterable[Event]) -> dict[int, list[list[Any]]]:
    """The twin's samples per step, every rank's together: ``{step: [[epoch, ranges]]}``
    (the fault-free run never rolls back, so its reports are its lineage)."""
    out: dict[int, dict[int, list[Span]]] = {}
    for t in (t for ts in replay(events).lineage.values() for t in ts):
        out.setdefault(t.step, {}).setdefault(t.epoch, []).extend(t.spans)
    return {step: [[epoch, [list(s) for s in sorted(spans)]] for epoch, spans in sorted(per.items())]
            for step, per in sorted(out.items())}


def _run_metrics(ctx: RunContext) -> dict[str, Any]:
    baseline = getattr(ctx.baseline, "samples", None) if ctx.baseline is not None else None
    return data_metrics(ctx.timeline.events, baseline)


def _not_reported(_m: Any) -> str:
    return "no sample reports: the workload reports none (probe.samples, probe.track)"


def _rolled_back_detail(m: Any, value: Any) -> str:
    rolled = getattr(m, "data_rolled_back_only", None)
    return f" ({rolled} of them trained only by a rolled-back incarnation)" if value and rolled else ""


FAMILY = MetricFamily(
    "data",
    specs=(
        MetricSpec("data_lost", "samples lost", "count", tolerance=Tolerance(rel=0.0, abs=0),
                   missing="not reported", title="Samples lost",
                   meaning="expected samples the surviving training never trained on",
                   missing_reason=_not_reported, detail=_rolled_back_detail),
        MetricSpec("data_duplicated", "samples duplicated", "count", tolerance=Tolerance(rel=0.0, abs=0),
                   missing="not reported", title="Samples duplicated",
                   meaning="extra trainings of a sample by the surviving training",
                   missing_reason=_not_reported),
        MetricSpec("data_rolled_back_only", "samples trained only by a rolled-back incarnation", "count",
                   missing="not reported", title="Samples only in rolled-back work",
                   meaning="lost samples that a rolled-back incarnation had trained on"),
        MetricSpec("data_samples", "samples trained", "count", title="Samples trained",
                   meaning="trainings in the surviving lineage"),
    ),
    run_metrics=_run_metrics,
)
