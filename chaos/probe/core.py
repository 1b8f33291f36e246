"""The probe of one process (``Probe``): its event file, its fault points, its holds.

``chaos.probe`` (the API a training script calls) creates one per process from the
environment and forwards to it. In-process fault actions register here
(``register_action``) and are fired by ``Probe.fault_point``; the actions the framework
ships live in ``chaos.probe.actions``.

Standard library only (and ``chaos.contract``, ``chaos.probe.hold``): loaded into every rank.
"""

from __future__ import annotations

import collections
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from chaos import contract
from chaos.probe import hold

__all__ = ["Episode", "Probe", "ProbeAction", "known_actions", "register_action"]


class Episode(Protocol):
    """An in-process fault that lasts: each later fault point is handed to ``at``."""

    def at(self, point: str, step: int | None) -> bool:
        """Act at this fault point; False when the episode is over."""
        ...

    def close(self) -> None: ...


ProbeAction = Callable[["Probe", dict[str, Any], "int | None", dict[str, Any]], None]
"""``action(probe, fault, step, context)``: ``fault`` is the planned instruction (id, type,
params, point, seed...), ``context`` what the fault point passed."""


@dataclass(frozen=True)
class _Action:
    run: ProbeAction
    reports_itself: bool


_ACTIONS: dict[str, _Action] = {}


def register_action(name: str, *, reports_itself: bool = False) -> Callable[[ProbeAction], ProbeAction]:
    """Register an in-process fault action under ``name`` (decorator).

    The probe reports ``fault_injected`` before running an action, unless the action
    ``reports_itself`` (a bit flip is in effect only when the bit actually flips, which for
    a hook may be later in the step).
    """
    def add(run: ProbeAction) -> ProbeAction:
        if name in _ACTIONS and _ACTIONS[name].run is not run:
            raise ValueError(f"probe action {name!r} registered twice")
        _ACTIONS[name] = _Action(run, reports_itself)
        return run
    return add


def known_actions() -> list[str]:
    return sorted(_ACTIONS)


class Probe:
    """Writes this process's events and fires the in-process faults planned for it.

    One JSON-lines file per process (``<src>.i<incarnation>.<pid>.jsonl``): appends are
    buffered by the file object and flushed per event so that the controller tailing the
    file sees each event at once; no fsync, which would cost milliseconds per step.
    """

    def __init__(
        self,
        events_dir: str | None,
        src: str,
        incarnation: int,
        faults_file: str | None = None,
    ) -> None:
        self.src = src
        self.incarnation = incarnation
        self.rank = int(src.split("-", 1)[1]) if src.startswith("rank-") and src[5:].isdigit() else None
        self._lock = threading.Lock()
        self._file = None
        self._fired_dir: str | None = None
        self._holds_dir: str | None = None
        self._held_for: dict[str, Any] | None = None
        """A hold claimed at step_end, to be waited at the next step_begin (``_hold``)."""
        self._calls_step_begin = False
        self._faults: list[dict[str, Any]] = []
        self._slowdowns: list[dict[str, Any]] = []
        self._last_step_t: float | None = None
        self._step_durations: collections.deque[float] = collections.deque(maxlen=8)
        self._ongoing: list[Episode] = []
        self._samples: list[tuple[int, int]] | None = None
        self._samples_epoch: int | None = None
        self.watched: dict[str, Any] = {}
        if events_dir:
            os.makedirs(events_dir, exist_ok=True)
            path = os.path.join(events_dir, f"{src}.i{incarnation}.{os.getpid()}.jsonl")
            self._file = open(path, "a", buffering=1 << 16, encoding="utf-8")  # noqa: SIM115
            self._fired_dir = os.path.join(events_dir, os.pardir, "probe_fired")
            self._holds_dir = os.path.join(events_dir, os.pardir, contract.HOLDS_SUBDIR)
        if faults_file and os.path.exists(faults_file):
            with open(faults_file, encoding="utf-8") as fh:
                planned = json.load(fh)
            self._faults = [f for f in planned if self._targets_me(f)]

    # -- events -------------------------------------------------------------------------
    @property
    def attached(self) -> bool:
        return self._file is not None

    def emit(self, kind: str, **fields: Any) -> None:
        if self._file is None:
            return
        record = {"t": time.time(), "src": self.src, "incarnation": self.incarnation, "kind": kind}
        record.update(fields)
        line = json.dumps(record, separators=(",", ":"), default=str)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def samples(self, ids: Any, epoch: int | None = None) -> None:
        """The sample indices of the batch this rank is training on (any iterable of ints, a
        ``range``, a tensor); reported with the next ``step_end``. Calls before one step's end
        add up (gradient accumulation: one call per micro-batch). ``epoch``: the pass over
        the dataset they belong to; it stays until another is given (never given: one
        endless pass)."""
        if self._file is None:
            return
        if isinstance(ids, range) and ids.step == 1:
            spans = [(ids.start, ids.stop)] if ids.stop > ids.start else []
        else:
            spans = [(v, v + 1) for v in (int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids))]
        if self._samples is None:
            self._samples = []
        self._samples.extend(spans)
        if epoch is not None:  # the current epoch until the script says another
            self._samples_epoch = epoch

    def discard_samples(self) -> None:
        """Forget the indices reported since the last ``step_end``: the step was abandoned
        (a fault-tolerant stack that did not commit it), so nothing it fetched was trained."""
        self._samples = None

    def _pending_ranges(self) -> list[list[int]]:
        """The pending indices as sorted, merged half-open ranges ``[[start, stop], ...]``:
        a contiguous shard of any size is two numbers, and a ``range`` is never expanded."""
        spans, self._samples = sorted(self._samples or []), None
        out: list[list[int]] = []
        for start, stop in spans:
            if out and start == out[-1][1]:
                out[-1][1] = stop
            else:
                out.append([start, stop])
        return out

    def step_end(self, step: int, loss: float | None = None, **fields: Any) -> None:
        """Report a completed optimizer step; in-process faults planned at this step fire after."""
        if self._samples is not None:
            fields["samples"] = self._pending_ranges()
            if self._samples_epoch is not None:
                fields["epoch"] = self._samples_epoch
        self.emit("step_end", step=step, loss=loss, **fields)
        now = time.perf_counter()
        if self._last_step_t is not None and not self._slowdowns:
            self._step_durations.append(now - self._last_step_t)
        self._last_step_t = now
        if self._faults or self._slowdowns or self._ongoing:
            self.fault_point("step_end", step=step)

    def watch(self, model: Any = None, optimizer: Any = None, **tensors: Any) -> None:
        """Hand the training state to the probe once: the tensors in-process faults (bit
        flips) may reach. Only references are kept; nothing is copied or imported."""
        if model is not None:
            self.watched["model"] = model
        if optimizer is not None:
            self.watched["optimizer"] = optimizer
        self.watched.update(tensors)

    def close(self) -> None:
        for episode in self._ongoing:
            episode.close()
        self._ongoing = []
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    # -- in-process faults --------------------------------------------------------------
    def _targets_me(self, fault: dict[str, Any]) -> bool:
        ranks = fault.get("ranks")
        return ranks is None or (self.rank is not None and self.rank in ranks)

    def _claim(self, fault_id: str) -> bool:
        """True once per fault across restarts: a resumed run passing step N again must not re-fire."""
        if self._fired_dir is None:
            return True
        os.makedirs(self._fired_dir, exist_ok=True)
        try:
            fd = os.open(os.path.join(self._fired_dir, f"{fault_id}.{self.src}"), os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return False
        os.close(fd)
        return True

    def fault_point(self, point: str, step: int | None = None, **context: Any) -> None:
        """Fire planned faults whose point and step match, then drive the episodes in
        effect; ``context`` carries what the point offers (tensors etc.)."""
        if not self._faults and not self._slowdowns and not self._ongoing:
            return
        if point == "step_begin":
            self._calls_step_begin = True
            if self._held_for is not None:
                fault, self._held_for = self._held_for, None
                self.wait_hold(fault, step - 1 if step is not None else None)
        if point == "step_end" and self._slowdowns:
            self._apply_slowdowns(step)
        for fault in self._faults:
            if fault.get("point", "step_end") != point:
                continue
            at_step = fault.get("at_step")
            if at_step is not None and step is not None:
                # ckpt_write faults hit the first save at or after the step: saves happen
                # only every N steps, so an exact match could never come.
                missed = step < at_step if fault.get("at_or_after") else step != at_step
                if missed:
                    continue
            if not self._claim(fault["id"]):
                continue
            self._fire(fault, step, context)
        if self._ongoing:
            self._ongoing = [episode for episode in self._ongoing if episode.at(point, step)]

    def start(self, episode: Episode) -> None:
        """Drive ``episode`` from the next fault point on (an action that lasts calls this)."""
        self._ongoing.append(episode)

    def _fire(self, fault: dict[str, Any], step: int | None, context: dict[str, Any]) -> None:
        entry = _ACTIONS.get(fault["action"])
        if entry is None:
            raise ValueError(f"probe: unknown in-process fault action {fault['action']!r}; "
                             f"known: {', '.join(known_actions())}")
        if not entry.reports_itself:
            self.emit(
                "fault_injected", fault=fault["id"], type=fault.get("type"), target=self.src,
                step=step, point=fault.get("point", "step_end"), mechanism="probe",
            )
        entry.run(self, fault, step, context)

    def wait_hold(self, fault: dict[str, Any], step: int | None) -> None:
        """Hold here until the controller confirms ``fault`` is in effect (``chaos.probe.hold``);
        a rank it kills never returns. Reported as ``fault_hold`` events: ``start``, then
        ``released`` or ``timeout`` with the seconds waited."""
        if self._holds_dir is None:
            return
        timeout_s = float(fault.get("timeout_s", hold.DEFAULT_TIMEOUT_S))
        if os.path.exists(hold.confirmation(self._holds_dir, fault["id"])):
            return  # in effect already (a restarted rank passing the step again)
        self.emit("fault_hold", fault=fault["id"], step=step, phase="start", timeout_s=timeout_s)
        hold.request(self._holds_dir, fault["id"], self.src)
        phase, waited = hold.wait(self._holds_dir, fault["id"], timeout_s)
        self.emit("fault_hold", fault=fault["id"], step=step, phase=phase, waited_s=round(waited, 6))

    def _apply_slowdowns(self, step: int | None) -> None:
        active = []
        now = time.monotonic()
        for slow in self._slowdowns:
            over = slow["until_step"] is not None and step is not None and step > slow["until_step"]
            factor = slow["profile"].factor(now) if slow.get("profile") else slow["factor"]
            if over or factor is None:
                self.emit("fault_reverted", fault=slow["fault"]["id"], target=self.src, step=step)
                continue
            slow["now"] = factor
            active.append(slow)
        self._slowdowns = active
        if active:
            time.sleep(max(max(s["base_s"] * (s["now"] - 1.0) for s in active), 0.0))
            self._last_step_t = time.perf_counter()
