"""The tiny in-process API a training script calls: events out, in-process faults in.

A training script (the bundled harness or a user's own) calls::

    from chaos import probe
    probe.emit("rank_start", world_size=4)
    probe.fault_point("step_begin", step=step)       # in-process faults land here
    probe.step_end(step, loss)                        # progress event (+ faults at step_end)

Without ``TRAINCHAOS_EVENTS_DIR`` in the environment the probe is detached: every call is a
cheap no-op, so a script instrumented with it runs unchanged outside trainchaos.

This module imports only the standard library: it is loaded into every rank and must not
slow start-up or pull in the framework.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import threading
import time
from typing import Any

__all__ = [
    "ENV_EVENTS_DIR",
    "ENV_FAULTS_FILE",
    "ENV_NODE",
    "ENV_SRC",
    "DeviceError",
    "Probe",
    "attached",
    "emit",
    "fault_point",
    "get",
    "incarnation",
    "src",
    "step_end",
]

ENV_EVENTS_DIR = "TRAINCHAOS_EVENTS_DIR"
ENV_FAULTS_FILE = "TRAINCHAOS_PROBE_FAULTS"
ENV_SRC = "TRAINCHAOS_SRC"
ENV_NODE = "TRAINCHAOS_NODE"

# The message a real Xid 79 / illegal-address fault surfaces with in PyTorch, so that a
# harness's error classifier sees what it would see on a GPU.
DEVICE_ERROR_MESSAGE = (
    "CUDA error: an illegal memory access was encountered (injected by trainchaos: "
    "Xid {xid}, GPU has fallen off the bus)"
)


class DeviceError(RuntimeError):
    """Raised by an injected ``device_error``; subclass of RuntimeError like torch's CUDA errors."""


def _default_src() -> str:
    if os.environ.get(ENV_SRC):
        return os.environ[ENV_SRC]
    if "RANK" in os.environ:
        return f"rank-{os.environ['RANK']}"
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
        self._faults: list[dict[str, Any]] = []
        self._slowdowns: list[dict[str, Any]] = []
        self._last_step_t: float | None = None
        if events_dir:
            os.makedirs(events_dir, exist_ok=True)
            path = os.path.join(events_dir, f"{src}.i{incarnation}.{os.getpid()}.jsonl")
            self._file = open(path, "a", buffering=1 << 16, encoding="utf-8")  # noqa: SIM115
            self._fired_dir = os.path.join(events_dir, os.pardir, "probe_fired")
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

    def step_end(self, step: int, loss: float | None = None, **fields: Any) -> None:
        """Report a completed optimizer step; in-process faults planned at this step fire after."""
        self.emit("step_end", step=step, loss=loss, **fields)
        if self._faults or self._slowdowns:
            self.fault_point("step_end", step=step)

    def close(self) -> None:
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
        """Fire planned faults whose point and step match; ``context`` carries tensors etc."""
        if not self._faults and not self._slowdowns:
            return
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

    def _fire(self, fault: dict[str, Any], step: int | None, context: dict[str, Any]) -> None:
        action = fault["action"]
        params = fault.get("params", {})
        self.emit(
            "fault_injected", fault=fault["id"], type=fault.get("type"), target=self.src,
            step=step, point=fault.get("point", "step_end"), mechanism="probe",
        )
        if action == "device_error":
            raise DeviceError(DEVICE_ERROR_MESSAGE.format(xid=params.get("xid", 79)))
        if action == "exit":
            # os._exit skips every handler and finaliser, like a process killed by the kernel,
            # so whatever the script was writing stays half-written.
            sys.stderr.flush()
            os._exit(int(params.get("exit_code", 137)))
        if action == "slowdown":
            self._slowdowns.append({"fault": fault, "factor": float(params["factor"]),
                                    "until_step": None if params.get("steps") is None
                                    else (step or 0) + int(params["steps"])})
            self._last_step_t = time.perf_counter()
            return
        if action == "bitflip":
            _flip_bits(context, params)
            return
        raise ValueError(f"probe: unknown in-process fault action {action!r}")

    def _apply_slowdowns(self, step: int | None) -> None:
        now = time.perf_counter()
        active = []
        for slow in self._slowdowns:
            if slow["until_step"] is not None and step is not None and step > slow["until_step"]:
                self.emit("fault_reverted", fault=slow["fault"]["id"], target=self.src, step=step)
                continue
            active.append(slow)
        self._slowdowns = active
        if active and self._last_step_t is not None:
            factor = max(s["factor"] for s in active)
            time.sleep(max(0.0, (now - self._last_step_t) * (factor - 1.0)))
        self._last_step_t = time.perf_counter()


def _flip_bits(context: dict[str, Any], params: dict[str, Any]) -> None:
    """Flip one bit of one float32 element of a named tensor in ``context`` (silent corruption)."""
    tensor = context[params.get("tensor", "param")]
    flat = tensor.detach().view(-1)
    index = int(params.get("index", 0)) % flat.numel()
    bit = int(params.get("bit", 30))
    value = float(flat[index])
    (as_int,) = struct.unpack("<I", struct.pack("<f", value))
    (flipped,) = struct.unpack("<f", struct.pack("<I", as_int ^ (1 << bit)))
    flat[index] = flipped


_probe: Probe | None = None
_probe_lock = threading.Lock()


def get() -> Probe:
    """The process's probe, created from the environment on first use."""
    global _probe
    if _probe is None:
        with _probe_lock:
            if _probe is None:
                events_dir = os.environ.get(ENV_EVENTS_DIR)
                src = _default_src()
                _probe = Probe(
                    events_dir, src, _default_incarnation(events_dir, src), os.environ.get(ENV_FAULTS_FILE),
                )
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
