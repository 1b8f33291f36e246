"""The Monte-Carlo engine: a training job's wall-clock window, every trial at once, in numpy.

The model (``docs/scale.md`` has it with its assumptions):

- Unplanned failures of each class arrive as a Poisson process over the window (wall clock,
  whether the job is training or restarting); planned maintenance at evenly spaced times with
  a random phase per trial.
- A failure stops the job for detection + restart (+ waiting for a replacement node: mode
  restart waits ``replace_s``; mode spares waits only when every spare is in repair, until a
  repaired node comes back or at most ``replace_s``; mode elastic never waits). A failure
  while the job is already down restarts the recovery: the job is back at max(previous,
  t + its downtime).
- While the job runs, it trains ``interval_s`` and then blocks for a checkpoint (the blocking
  cost of every tier written that time); an async write becomes durable ``persist_s`` later.
  The checkpoint schedule restarts with every restart (as a step-based schedule does after
  resuming from a checkpoint step).
- A failure loses the training since the last checkpoint that is durable by then *and* kept
  by a tier that survives the failure's scope (``process`` < ``device`` < ``node`` <
  ``domain``), at its actual position in the interval; ``fixed`` classes lose a set amount;
  planned maintenance loses nothing.
- Elastic: failed nodes leave the job for ``repair_h``; the job trains on the rest, and the
  missing share of its productive time is lost capacity (``degraded``).

Vectorisation: every event of every trial is one entry of flat arrays sorted by (trial,
time). The time the job is back after event i is a running maximum of t + downtime within
its trial (``np.maximum.accumulate`` over the flat array, each trial offset above the last),
so nothing loops over events or trials. The bookkeeping is exact: per trial, productive +
checkpoint blocking + lost work + downtime = the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = [
    "SCOPES",
    "CheckpointSpec",
    "ClassSpec",
    "Events",
    "JobModel",
    "RecoverySpec",
    "TierSpec",
    "TrialResults",
    "account",
    "draw_events",
    "simulate",
]

SCOPES: tuple[str, ...] = ("process", "device", "node", "domain")
PLANNED = "planned_maintenance"


@dataclass(frozen=True)
class ClassSpec:
    """One failure class, resolved to numbers."""

    name: str
    per_hour: float
    """Expected failures per wall-clock hour of the whole job."""
    detection_s: float
    restart_s: float
    scope: str = "device"
    nodes_out: int = 1
    """Nodes one failure takes out for repair (0: the job restarts in place)."""
    lost_work_s: float | None = None
    """None: roll back to the last durable checkpoint; a number: that much, fixed."""


@dataclass(frozen=True)
class TierSpec:
    every: int = 1
    blocking_s: float = 0.0
    persist_s: float = 0.0
    survives: tuple[str, ...] = SCOPES


@dataclass(frozen=True)
class CheckpointSpec:
    interval_s: float
    tiers: tuple[TierSpec, ...] = (TierSpec(),)

    @property
    def mean_blocking_s(self) -> float:
        return sum(t.blocking_s / t.every for t in self.tiers)


@dataclass(frozen=True)
class RecoverySpec:
    mode: Literal["restart", "spares", "elastic"] = "restart"
    spare_nodes: int = 0
    repair_s: float = 86_400.0
    replace_s: float | None = None
    """restart: the wait of every replacing failure (None: 0); spares: a cap on the wait."""


@dataclass(frozen=True)
class JobModel:
    devices: int
    devices_per_node: int
    window_s: float
    classes: tuple[ClassSpec, ...]
    checkpoint: CheckpointSpec
    recovery: RecoverySpec = RecoverySpec()
    maintenance_spacing_s: float | None = None
    maintenance_duration_s: float = 0.0

    @property
    def class_names(self) -> tuple[str, ...]:
        return (*(c.name for c in self.classes), PLANNED)

    @property
    def unplanned_per_hour(self) -> float:
        return sum(c.per_hour for c in self.classes)


@dataclass
class Events:
    """Every interruption of every trial, sorted by (trial, time)."""

    trials: int
    trial: np.ndarray
    cls: np.ndarray
    """Class index; len(classes) for planned maintenance."""
    t: np.ndarray
    detection: np.ndarray
    restart: np.ndarray
    wait: np.ndarray
    nodes_out: np.ndarray
    scope: np.ndarray
    """Index into SCOPES."""
    fixed_lost: np.ndarray
    """NaN: roll back; -1: planned (nothing lost); else seconds lost."""
    starts: np.ndarray
    """Index of each trial's first event; trials + 1 entries."""


@dataclass
class TrialResults:
    """Per-trial outcomes. Seconds are job wall-clock seconds (x devices = device-seconds)."""

    window_s: float
    devices: int
    class_names: tuple[str, ...]
    interruptions: np.ndarray
    """(classes + 1, trials) counts; the last row is planned maintenance."""
    detection_s: np.ndarray
    restart_s: np.ndarray
    wait_s: np.ndarray
    """Downtime waiting for a replacement node, per class and trial."""
    lost_work_s: np.ndarray
    maintenance_s: np.ndarray
    """(trials,) downtime of planned maintenance."""
    checkpoint_s: np.ndarray
    productive_s: np.ndarray
    degraded_s: np.ndarray
    """Productive seconds lost to running with fewer nodes (elastic)."""

    @property
    def ettr(self) -> np.ndarray:
        """Effective training time ratio: kept training time / window."""
        return self.productive_s / self.window_s

    @property
    def goodput(self) -> np.ndarray:
        """Kept training device-time / (devices x window): ETTR less elastic lost capacity."""
        return (self.productive_s - self.degraded_s) / self.window_s


# --------------------------------------------------------------------------- drawing events


def draw_events(model: JobModel, trials: int, rng: np.random.Generator) -> Events:
    """Draw every trial's interruptions; their cost does not depend on the checkpoint policy."""
    window = model.window_s
    ncls = len(model.classes)
    means = np.array([c.per_hour * window / 3600.0 for c in model.classes], dtype=float)
    counts = rng.poisson(means[:, None], size=(ncls, trials)) if ncls else np.zeros((0, trials), int)
    cls = np.repeat(np.arange(ncls), counts.sum(axis=1))
    trial = np.repeat(np.tile(np.arange(trials), ncls), counts.ravel())
    t = rng.uniform(0.0, window, size=cls.size)
    phases = rng.uniform(0.0, 1.0, size=trials)
    spacing = model.maintenance_spacing_s
    if spacing is not None and spacing > 0:
        k = np.arange(int(np.ceil(window / spacing)) + 1)
        planned_t = (k[None, :] + phases[:, None]) * spacing
        planned_trial = np.broadcast_to(np.arange(trials)[:, None], planned_t.shape)
        keep = planned_t < window
        cls = np.concatenate([cls, np.full(int(keep.sum()), ncls)])
        trial = np.concatenate([trial, planned_trial[keep]])
        t = np.concatenate([t, planned_t[keep]])

    big = _trial_stride(model)
    order = np.argsort(trial * big + t, kind="stable")
    cls, trial, t = cls[order], trial[order], t[order]
    classes = model.classes

    def per_event(per_class: list[float], planned: float) -> np.ndarray:
        return np.asarray([*per_class, planned], dtype=float)[cls]

    events = Events(
        trials=trials,
        trial=trial,
        cls=cls,
        t=t,
        detection=per_event([c.detection_s for c in classes], 0.0),
        restart=per_event([c.restart_s for c in classes], model.maintenance_duration_s),
        wait=np.zeros(t.size),
        nodes_out=np.asarray([c.nodes_out for c in classes] + [0], dtype=np.int64)[cls],
        scope=np.asarray([SCOPES.index(c.scope) for c in classes] + [0], dtype=np.int64)[cls],
        fixed_lost=per_event([np.nan if c.lost_work_s is None else c.lost_work_s for c in classes], -1.0),
        starts=np.searchsorted(trial, np.arange(trials + 1)),
    )
    events.wait = _waits(model, events)
    return events


def _trial_stride(model: JobModel) -> float:
    """Larger than any time within a trial, the repair window included (keys stay ordered)."""
    return model.window_s + model.recovery.repair_s + 1.0


def _waits(model: JobModel, ev: Events) -> np.ndarray:
    """Downtime spent waiting for a replacement node, per event."""
    rec, nodes = model.recovery, ev.nodes_out
    if rec.mode == "elastic" or ev.t.size == 0:
        return np.zeros(ev.t.size)
    if rec.mode == "restart":
        return np.where(nodes > 0, rec.replace_s or 0.0, 0.0)
    # spares: a failed node is in repair for repair_s. Nodes in repair at t_i are those that
    # failed in (t_i - repair_s, t_i]; beyond spare_nodes of them, the job waits until
    # enough of the earliest come back. Counted with a global cumulative sum; the key
    # trial * stride + t keeps every search inside the event's own trial.
    key = ev.trial * _trial_stride(model) + ev.t
    total = np.cumsum(nodes)
    before = total - nodes
    first_in_repair = np.searchsorted(key, key - rec.repair_s, side="right")
    base = before[first_in_repair]
    extra = (total - base) - rec.spare_nodes
    short = (nodes > 0) & (extra > 0)
    wait = np.zeros(ev.t.size)
    if short.any():
        back = np.searchsorted(total, base[short] + extra[short], side="left")
        wait[short] = np.maximum(0.0, ev.t[back] + rec.repair_s - ev.t[short])
    if rec.replace_s is not None:
        wait = np.minimum(wait, rec.replace_s)
    return wait


# --------------------------------------------------------------------------- accounting


class _Schedule:
    """The checkpoint schedule of one running segment, tabulated up to the window's length.

    ``done(e)``: training time after e seconds of running; ``kept(e, scope)``: training
    time covered by the last checkpoint durable by e in a tier surviving ``scope``.
    """

    def __init__(self, spec: CheckpointSpec, horizon_s: float) -> None:
        tau = spec.interval_s
        count = int(horizon_s // tau) + 2
        m = np.arange(1, count + 1)
        blocking = np.zeros(count)
        for tier in spec.tiers:
            blocking[m % tier.every == 0] += tier.blocking_s
        self.blocking = blocking
        self.cum_blocking = np.cumsum(blocking)
        self.starts = m * tau + (self.cum_blocking - blocking)
        ends = self.starts + blocking
        self.tables: list[tuple[np.ndarray, np.ndarray]] = []
        for scope in SCOPES:
            durable = np.full(count, np.inf)
            for tier in spec.tiers:
                if scope in tier.survives:
                    hit = m % tier.every == 0
                    durable[hit] = np.minimum(durable[hit], ends[hit] + tier.persist_s)
            valid = np.isfinite(durable)
            order = np.argsort(durable[valid], kind="stable")
            times = durable[valid][order]
            kept = np.maximum.accumulate(m[valid][order]) * tau if times.size else np.zeros(0)
            self.tables.append((times, kept))

    def done(self, e: np.ndarray) -> np.ndarray:
        k = np.searchsorted(self.starts, e, side="right")  # checkpoints begun by e
        idx = np.maximum(k - 1, 0)
        prior = np.where(k >= 2, self.cum_blocking[np.maximum(k - 2, 0)], 0.0)
        current = np.where(k >= 1, np.minimum(e - self.starts[idx], self.blocking[idx]), 0.0)
        return e - prior - current

    def kept(self, e: np.ndarray, scope: int) -> np.ndarray:
        times, kept = self.tables[scope]
        j = np.searchsorted(times, e, side="right")
        return np.where(j > 0, kept[np.maximum(j - 1, 0)] if kept.size else 0.0, 0.0)


def account(model: JobModel, ev: Events, checkpoint: CheckpointSpec | None = None) -> TrialResults:
    """Cost every event under a checkpoint policy (default: the model's); vectorised."""
    spec = checkpoint or model.checkpoint
    window, trials = model.window_s, ev.trials
    ncls = len(model.classes) + 1
    schedule = _Schedule(spec, window)
    down = ev.detection + ev.restart + ev.wait
    t = ev.t
    if t.size:
        # back[i]: when the job trains again after event i = running max of t + downtime in
        # its trial; each trial is lifted above every value of the previous one.
        lift = ev.trial * (window + float(down.max()) + 1.0)
        back = np.maximum.accumulate(t + down + lift) - lift
    else:
        back = np.zeros(0)
    prev_back = np.empty_like(back)
    prev_back[1:] = back[:-1]
    nonempty = ev.starts[:-1] < ev.starts[1:]
    prev_back[ev.starts[:-1][nonempty]] = 0.0

    elapsed = np.maximum(t - prev_back, 0.0)  # running time of the segment the event ends
    done = schedule.done(elapsed)
    kept = done.copy()  # planned maintenance: checkpointed on purpose, nothing lost
    rollback = np.isnan(ev.fixed_lost)
    for s in range(len(SCOPES)):
        hit = rollback & (ev.scope == s)
        if hit.any():
            kept[hit] = schedule.kept(elapsed[hit], s)
    fixed = ev.fixed_lost >= 0
    kept[fixed] = np.maximum(0.0, done[fixed] - ev.fixed_lost[fixed])
    lost = done - kept
    blocked = elapsed - done

    stopped = np.clip(np.minimum(back, window) - np.minimum(np.maximum(t, prev_back), window), 0.0, None)
    share = np.divide(stopped, down, out=np.zeros_like(stopped), where=down > 0)

    def by_trial(values: np.ndarray) -> np.ndarray:
        return np.bincount(ev.trial, weights=values, minlength=trials)

    def by_class(values: np.ndarray) -> np.ndarray:
        return np.bincount(ev.cls * trials + ev.trial, weights=values,
                           minlength=ncls * trials).reshape(ncls, trials)

    last_back = np.zeros(trials)
    last_back[nonempty] = back[ev.starts[1:][nonempty] - 1]
    tail = np.maximum(window - last_back, 0.0)
    tail_done = schedule.done(tail)
    productive = by_trial(kept) + tail_done
    planned = ev.cls == ncls - 1
    restart = by_class(share * ev.restart)

    degraded = np.zeros(trials)
    if model.recovery.mode == "elastic" and t.size:
        out_device_s = ev.nodes_out * model.devices_per_node * np.minimum(model.recovery.repair_s, window - t)
        fraction = np.minimum(by_trial(out_device_s) / (model.devices * window), 1.0)
        degraded = productive * fraction

    return TrialResults(
        window_s=window,
        devices=model.devices,
        class_names=model.class_names,
        interruptions=np.bincount(ev.cls * trials + ev.trial, minlength=ncls * trials).reshape(ncls, trials),
        detection_s=by_class(share * ev.detection),
        restart_s=np.where(np.arange(ncls)[:, None] == ncls - 1, 0.0, restart),
        wait_s=by_class(share * ev.wait),
        lost_work_s=by_class(lost),
        maintenance_s=by_trial(np.where(planned, stopped, 0.0)),
        checkpoint_s=by_trial(blocked) + (tail - tail_done),
        productive_s=productive,
        degraded_s=degraded,
    )


def simulate(model: JobModel, trials: int, seed: int) -> TrialResults:
    """Draw and cost ``trials`` runs of the window."""
    rng = np.random.default_rng(seed)
    return account(model, draw_events(model, trials, rng))
