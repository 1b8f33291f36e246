"""The tiny in-process API a training script calls: events out, in-process faults in.

A training script (the bundled harness or a user's own) calls::

    from chaos import probe
    probe.emit("rank_start", world_size=4)
    probe.watch(model=model, optimizer=optimizer)     # once: tensors bit flips can reach
    probe.fault_point("step_begin", step=step)       # in-process faults land here
    ...forward, backward...
    probe.fault_point("after_backward", step=step)   # gradient flips after the all-reduce
    probe.samples(ids, epoch=0)                       # the sample indices this step trained on
    probe.step_end(step, loss)                        # progress event (+ faults at step_end)

``probe.samples`` (or a dataset wrapped in ``probe.track``) feeds the exactly-once data
checker (docs/checkers.md): the indices ride on the step's own ``step_end`` event as
half-open ranges, so reporting them adds no event and no file.

In-process faults are *actions* in a registry (``register_action``): one function per
action, looked up by the name a fault type's ``probe_actions`` gives. Some act once
(raise a device error, exit); others start an *episode* that the following fault points
drive (a straggler's slowdown, a stuck bit) until it ends.

Without ``TRAINCHAOS_EVENTS_DIR`` in the environment the probe is detached: every call is a
cheap no-op, so a script instrumented with it runs unchanged outside trainchaos.

External faults planned at a step (a kill, a partition, a storage stall) are not fired
here, but the probe of each targeted rank holds at the end of that step until the
controller confirms the fault is in effect (action ``hold``, ``chaos.hold``), so that they
land at their step and not somewhere in the next.

This module imports only the standard library (and ``chaos.contract`` and ``chaos.hold``,
which import nothing else): it is loaded into every rank and must not slow start-up or pull
in the framework.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from chaos import contract, hold

__all__ = [
    "ENV_EVENTS_DIR",
    "ENV_FAULTS_FILE",
    "ENV_NODE",
    "ENV_SRC",
    "DeviceError",
    "Episode",
    "Probe",
    "RampProfile",
    "STALL_MODES",
    "attached",
    "emit",
    "fault_point",
    "final_state",
    "get",
    "incarnation",
    "known_actions",
    "model_digest",
    "register_action",
    "restart_in_place",
    "samples",
    "src",
    "state_dict_digest",
    "state_digest",
    "step_end",
    "track",
    "watch",
    "weights_finite",
]

ENV_EVENTS_DIR = contract.EVENTS_DIR_ENV
ENV_FAULTS_FILE = contract.PROBE_FAULTS_ENV
ENV_SRC = contract.SRC_ENV
ENV_NODE = contract.NODE_ENV

# The message a real Xid 79 / illegal-address fault surfaces with in PyTorch, so that a
# harness's error classifier sees what it would see on a GPU.
DEVICE_ERROR_MESSAGE = (
    "CUDA error: an illegal memory access was encountered (injected by trainchaos: "
    "Xid {xid}, GPU has fallen off the bus)"
)


class DeviceError(RuntimeError):
    """Raised by an injected ``device_error``; subclass of RuntimeError like torch's CUDA errors."""


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


def _default_src() -> str:
    if os.environ.get(ENV_SRC):
        return os.environ[ENV_SRC]
    if "RANK" in os.environ:
        offset = os.environ.get(contract.RANK_OFFSET_ENV, "")
        rank = os.environ["RANK"]
        return f"rank-{int(rank) + int(offset)}" if offset.isdigit() and rank.isdigit() else f"rank-{rank}"
    return f"proc-{os.getpid()}"


def _default_incarnation(events_dir: str | None, src: str) -> int:
    """How many processes of ``src`` started before this one in the run (0 for the first).

    torchrun's TORCHELASTIC_RESTART_COUNT is per agent and does not move on a membership
    change (an agent restarts its healthy workers because another node re-joined), so two
    processes of one rank can share it. Claiming the next free number with O_EXCL in the
    run's events directory cannot: one process of a rank runs at a time.
    """
    if not events_dir:
        try:
            return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        except ValueError:
            return 0
    starts = os.path.join(events_dir, ".starts")
    os.makedirs(starts, exist_ok=True)
    n = 0
    while True:
        try:
            os.close(os.open(os.path.join(starts, f"{src}.{n}"), os.O_CREAT | os.O_EXCL))
            return n
        except FileExistsError:
            n += 1


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
        """Hold here until the controller confirms ``fault`` is in effect (``chaos.hold``);
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


# --------------------------------------------------------------------------- actions


@register_action("device_error")
def _device_error(probe: Probe, fault: dict[str, Any], step: int | None, context: dict[str, Any]) -> None:
    raise DeviceError(DEVICE_ERROR_MESSAGE.format(xid=fault.get("params", {}).get("xid", 79)))


@register_action("exit")
def _exit(probe: Probe, fault: dict[str, Any], step: int | None, context: dict[str, Any]) -> None:
    # os._exit skips every handler and finaliser, like a process killed by the kernel, so
    # whatever the script was writing stays half-written.
    sys.stderr.flush()
    os._exit(int(fault.get("params", {}).get("exit_code", 137)))


@register_action("slowdown")
def _slowdown(probe: Probe, fault: dict[str, Any], step: int | None, context: dict[str, Any]) -> None:
    # The delay is a fixed multiple of the step time measured *before* the fault: a delay
    # taken from the slowed steps themselves would compound through the collectives (two
    # slowed ranks wait for each other, each stretching the other's next step) until a
    # collective times out.
    # A ramp (thermal_throttle: ramp_s...) makes the factor a function of the time since
    # the fault fired; without one it holds for ``steps`` (straggler).
    params = fault.get("params", {})
    durations = sorted(probe._step_durations)
    base = durations[len(durations) // 2] if durations else 0.0
    profile = (RampProfile(time.monotonic(), float(params["factor"]), float(params["ramp_s"]),
                           params.get("hold_s"), float(params.get("recover_s") or 0.0))
               if params.get("ramp_s") is not None else None)
    probe._slowdowns.append({"fault": fault, "factor": float(params["factor"]), "base_s": base,
                             "profile": profile,
                             "until_step": None if params.get("steps") is None
                             else (step or 0) + int(params["steps"])})


@dataclass(frozen=True)
class RampProfile:
    """A slowdown factor over time: 1 -> ``peak`` linearly over ``ramp_s``, held ``hold_s``
    (None: until the end), back to 1 over ``recover_s``; ``factor`` is None once it is over."""

    t0: float
    peak: float
    ramp_s: float
    hold_s: float | None
    recover_s: float

    def factor(self, now: float) -> float | None:
        t = now - self.t0
        if t < self.ramp_s:
            return 1.0 + (self.peak - 1.0) * t / self.ramp_s
        t -= self.ramp_s
        if self.hold_s is None or t < float(self.hold_s):
            return self.peak
        t -= float(self.hold_s)
        if t < self.recover_s:
            return self.peak - (self.peak - 1.0) * t / self.recover_s
        return None

    def passes(self, factor: float) -> float | None:
        """Seconds after the start at which the ramp reaches ``factor`` (None: never)."""
        if factor > self.peak:
            return None
        return self.ramp_s * (factor - 1.0) / (self.peak - 1.0) if self.peak > 1.0 else 0.0


@register_action("stall")
def _stall(probe: Probe, fault: dict[str, Any], step: int | None, context: dict[str, Any]) -> None:
    # The calling (training) thread blocks; every other thread of the process runs on, so a
    # heartbeat still answers. Only the progress of the loop stops.
    params = fault.get("params", {})
    duration = params.get("duration_s")
    STALL_MODES[params.get("mode", "sleep")](None if duration is None else float(duration))
    probe.emit("fault_reverted", fault=fault["id"], target=probe.src, step=step)


_FOREVER_S = 86_400.0


def _stall_sleep(duration: float | None) -> None:
    time.sleep(duration if duration is not None else _FOREVER_S * 365)


def _stall_lock(duration: float | None) -> None:
    # A lock another thread holds and does not give back (a deadlock with a helper thread):
    # the holder releases it after ``duration``, or never.
    lock, taken = threading.Lock(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            threading.Event().wait(duration)  # None: forever

    threading.Thread(target=hold, name="trainchaos-stall-holder", daemon=True).start()
    taken.wait()
    lock.acquire()
    lock.release()


def _stall_queue(duration: float | None) -> None:
    import queue

    # A consumer waiting on a queue whose producer never comes (a dead input pipeline).
    with contextlib.suppress(queue.Empty):
        queue.Queue().get(timeout=duration)


def _stall_gil(duration: float | None) -> None:
    import ctypes
    import ctypes.util

    # ctypes.PyDLL does not release the GIL around the call (a C extension that forgot
    # Py_BEGIN_ALLOW_THREADS): libc's nanosleep then blocks every Python thread of the
    # process, the heartbeat's too. What peers see is a frozen process, not a stalled loop.
    libc = ctypes.PyDLL(ctypes.util.find_library("c") or None, use_errno=True)

    class Timespec(ctypes.Structure):
        _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

    left = _FOREVER_S * 365 if duration is None else duration
    end = time.monotonic() + left
    while left > 0:  # a signal ends nanosleep early (EINTR): sleep what is left
        req = Timespec(int(left), int((left - int(left)) * 1e9))
        libc.nanosleep(ctypes.byref(req), None)
        left = end - time.monotonic()


STALL_MODES: dict[str, Callable[[float | None], None]] = {
    "sleep": _stall_sleep, "lock": _stall_lock, "queue": _stall_queue, "gil": _stall_gil}
"""How ``stall`` blocks the training thread, by ``mode`` (None: until the process is killed)."""


@register_action(hold.ACTION, reports_itself=True)
def _hold(probe: Probe, fault: dict[str, Any], step: int | None, context: dict[str, Any]) -> None:
    # The end of step N, for a script that marks its steps' beginnings, is its next
    # step_begin: the step's checkpoint save and bookkeeping belong to step N, and the next
    # collective comes after. A script that only reports step_end holds right there.
    if probe._calls_step_begin:
        probe._held_for = fault
    else:
        probe.wait_hold(fault, step)


@register_action("bitflip", reports_itself=True)
def _bitflip(probe: Probe, fault: dict[str, Any], step: int | None, context: dict[str, Any]) -> None:
    # Loaded only when a bit flip fires: it works on torch tensors.
    from chaos.bitflip import Episode as BitFlipEpisode

    model = probe.watched.get("model", context.get("model"))
    optimizer = probe.watched.get("optimizer", context.get("optimizer"))
    probe.start(BitFlipEpisode(probe.emit, probe.src, fault, model, optimizer))


@register_action("leak")
def _leak(probe: Probe, fault: dict[str, Any], step: int | None, context: dict[str, Any]) -> None:
    from chaos.leak import start_leak  # loaded only when a leak fires

    start_leak(fault.get("params", {}))


_probe: Probe | None = None
_probe_lock = threading.Lock()


def get() -> Probe:
    """The process's probe, created from the environment on first use."""
    global _probe
    if _probe is None:
        with _probe_lock:
            if _probe is None:
                _probe = _probe_from_env()
    return _probe


def _probe_from_env() -> Probe:
    """A probe as the environment says (events dir, source, planned faults), under the next
    free incarnation number of its source."""
    events_dir = os.environ.get(ENV_EVENTS_DIR)
    src = _default_src()
    return Probe(events_dir, src, _default_incarnation(events_dir, src), os.environ.get(ENV_FAULTS_FILE))


def restart_in_place() -> Probe:
    """Start the next incarnation of this process's source, in the same process: for a job
    whose training restarts without its process (an in-process restart re-entering the
    training function). Its events go to a new file under the next free incarnation number,
    so that metrics see the re-entry as a restart; the source is taken from the environment
    again (the restart may have given the process another rank). What was watched is kept."""
    global _probe
    with _probe_lock:
        old = _probe
        _probe = _probe_from_env()
        if old is not None:
            _probe.watched.update(old.watched)
            old.close()
    return _probe


def attached() -> bool:
    return get().attached


def src() -> str:
    return get().src


def incarnation() -> int:
    return get().incarnation


def emit(kind: str, **fields: Any) -> None:
    get().emit(kind, **fields)


def step_end(step: int, loss: float | None = None, **fields: Any) -> None:
    get().step_end(step, loss, **fields)


def fault_point(point: str, step: int | None = None, **context: Any) -> None:
    get().fault_point(point, step, **context)


def samples(ids: Any, epoch: int | None = None) -> None:
    """Report the sample indices of the batch being trained on (see ``Probe.samples``)."""
    get().samples(ids, epoch)


def track(dataset: Any) -> Any:
    """``dataset`` wrapped so that every sample a DataLoader fetches from it is reported with
    the next ``step_end`` (``probe.samples``), for a training script that changes nothing
    else: ``DataLoader(probe.track(dataset), ...)``.

    A map-style dataset (``__getitem__`` and ``__len__``): the index of every item fetched
    is reported. Fetching happens in the process that calls ``__getitem__``: with
    ``num_workers=0`` (the default) that is the rank itself, just before the step trains on
    the batch, so what is reported is exactly what the step trained on. DataLoader worker
    processes cannot report into the rank's event stream; there the wrapper reports nothing
    and says so once on stderr (call ``probe.samples`` with the batch's indices instead).
    ``epoch`` is taken from the wrapper's ``set_epoch`` (call it where you call the
    sampler's). Detached (outside trainchaos) the wrapper only forwards.
    """
    return _Tracked(dataset)


class _Tracked:
    """A map-style dataset that reports the indices fetched from it (``probe.track``).

    Not a ``torch.utils.data.Dataset`` subclass, so that the probe never imports torch: the
    DataLoader only needs ``__getitem__`` and ``__len__``. Attribute reads fall through to
    the wrapped dataset, so code that looks at ``loader.dataset.classes`` still works.
    """

    def __init__(self, dataset: Any) -> None:
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise TypeError(f"probe.track needs a map-style dataset (__getitem__ and __len__), "
                            f"got {type(dataset).__name__}")
        self.dataset = dataset
        self.epoch: int | None = None
        self._owner = os.getpid()
        self._warned = False

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        item = self.dataset[index]
        if os.getpid() == self._owner:
            get().samples([index] if isinstance(index, int) else index, self.epoch)
        else:
            self._warn()
        return item

    def __getitems__(self, indices: list[int]) -> list[Any]:
        # DataLoader's batched fetch (torch >= 2.1): one report for the batch.
        many = getattr(self.dataset, "__getitems__", None)
        items = many(indices) if many is not None else [self.dataset[i] for i in indices]
        if os.getpid() == self._owner:
            get().samples(indices, self.epoch)
        else:
            self._warn()
        return items

    def _warn(self) -> None:
        if not self._warned:
            self._warned = True
            sys.stderr.write("trainchaos probe.track: samples fetched in a DataLoader worker are not "
                             "reported; use num_workers=0 or call probe.samples(ids)\n")

    def __getattr__(self, name: str) -> Any:
        if name == "dataset":  # not yet set (unpickling in a worker)
            raise AttributeError(name)
        return getattr(self.dataset, name)


def final_state(step: int, *, model: Any = None, digest: str | None = None,
                loss: float | None = None, **fields: Any) -> str | None:
    """Publish the end of training (``run_end``): the last step, and the final model state
    as a digest, so that ``final_state: matches_baseline`` can judge any script's run.

    Call it once, from one rank (rank 0), after the last step. Give ``model`` (any
    ``torch.nn.Module``, DDP-wrapped or not) and the probe computes the digest and whether
    every weight is finite; or give ``digest`` (a string of your own that is equal exactly
    when the states are equal). Returns the digest.
    """
    if model is not None:
        if digest is None:
            digest = model_digest(model)
        fields.setdefault("weights_finite", weights_finite(model))
    get().emit("run_end", step=step, loss=loss, digest=digest, **fields)
    return digest


def _unwrapped(model: Any) -> Any:
    return model.module if hasattr(model, "module") and hasattr(model.module, "named_parameters") else model


def model_digest(model: Any) -> str:
    """SHA-256 over every parameter and buffer: equal digests mean bitwise-equal models.

    Covers, in name order, each tensor's name, dtype, shape and raw bytes. A DDP (or any
    ``.module``) wrapper is unwrapped first so that a distributed run and a single-process
    run of the same model compare equal (DDP prefixes every name with ``module.``). torch is
    imported here, on use: the probe itself loads with the standard library only.
    """
    model = _unwrapped(model)
    tensors = dict(model.named_parameters())
    tensors.update(model.named_buffers())
    return _hash_tensors(tensors)


def _hash_tensors(tensors: dict[str, Any]) -> str:
    import hashlib

    import torch

    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().to("cpu").contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        # Reinterpret as bytes (works for every dtype, bfloat16 included, unlike .numpy()).
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def state_dict_digest(state: Any) -> str:
    """SHA-256 over a model's ``state_dict`` (a mapping of name -> tensor), the way
    ``model_digest`` hashes a module: what a checkpoint holds and what a live model holds
    compare equal exactly when the saved tensors are bitwise equal. A ``module.`` prefix
    (a DDP wrapper's state dict) is dropped so that both spellings compare equal."""
    import torch

    return _hash_tensors({(name[7:] if name.startswith("module.") else name): value
                          for name, value in state.items() if isinstance(value, torch.Tensor)})


_record_digests: bool | None = None


def state_digest(step: int, *, model: Any = None, digest: str | None = None) -> str | None:
    """Publish the model state reached at ``step`` (``state_digest``), for the checkpoint
    freshness checker: the fault-free twin's digests are what each checkpoint of the faulty
    run must hold at the step it claims. A no-op (returning None, computing nothing) unless
    the controller asked for it (``TRAINCHAOS_RECORD_DIGESTS``, set in the twin only), so a
    script can call it after every optimizer step at no cost. Call it from one rank; give
    ``model`` (its ``state_dict`` is hashed as a checkpoint's is, ``state_dict_digest``) or
    a ``digest`` of your own that your workload's checkpoint reader computes the same way."""
    global _record_digests
    if _record_digests is None:
        _record_digests = os.environ.get(contract.RECORD_DIGESTS_ENV) == "1"
    if not _record_digests:
        return None
    if digest is None and model is not None:
        digest = state_dict_digest(_unwrapped(model).state_dict())
    get().emit("state_digest", step=step, digest=digest)
    return digest


def weights_finite(model: Any) -> bool:
    """Whether every floating-point parameter and buffer holds only finite numbers: two runs
    that both end in NaN share a digest, and that is no correctness."""
    import torch

    state = _unwrapped(model).state_dict()
    return all(bool(torch.isfinite(t).all()) for t in state.values() if t.is_floating_point())


def watch(model: Any = None, optimizer: Any = None, **tensors: Any) -> None:
    """Hand the model and optimizer to the probe (see ``Probe.watch``)."""
    get().watch(model=model, optimizer=optimizer, **tensors)
