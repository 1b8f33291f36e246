"""The in-process fault actions the framework ships, registered with the probe by name.

One function per action (``register_action``), looked up by the name a fault type's
``probe_actions`` gives: some act once (raise a device error, exit); others start an
*episode* that the following fault points drive (a straggler's slowdown, a stuck bit), or
hold the rank until the controller confirms an external fault (``hold``).

Standard library only: the bit flip and the leak load their mechanics when they fire.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chaos.probe import hold
from chaos.probe.core import Probe, register_action

__all__ = ["DEVICE_ERROR_MESSAGE", "STALL_MODES", "DeviceError", "RampProfile"]


# The message a real Xid 79 / illegal-address fault surfaces with in PyTorch, so that a
# harness's error classifier sees what it would see on a GPU.
DEVICE_ERROR_MESSAGE = (
    "CUDA error: an illegal memory access was encountered (injected by trainchaos: "
    "Xid {xid}, GPU has fallen off the bus)"
)


class DeviceError(RuntimeError):
    """Raised by an injected ``device_error``; subclass of RuntimeError like torch's CUDA errors."""


@register_action("device_error")
def _device_error(probe: Probe, fault: dict[str, Any], step: int | None, context: dict[str, Any]) -> None:
    params = fault.get("params", {})
    if params.get("on_device"):
        from chaos.probe.cuda import poison_context  # loaded only when a real device fault fires

        poison_context()  # raises torch's own error; the context stays broken
    raise DeviceError(DEVICE_ERROR_MESSAGE.format(xid=params.get("xid", 79)))


@register_action("device_alloc")
def _device_alloc(probe: Probe, fault: dict[str, Any], step: int | None, context: dict[str, Any]) -> None:
    from chaos.probe.cuda import exhaust_memory

    exhaust_memory(fault.get("params", {}).get("gib"))


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


def _stall_device(duration: float | None) -> None:
    from chaos.probe.cuda import device_sleep

    # A kernel that does not return: the training thread waits for it in a device
    # synchronize (the GIL released, so the heartbeat answers on), as it would wait for a
    # hung GEMM or a collective kernel.
    device_sleep(duration)


STALL_MODES: dict[str, Callable[[float | None], None]] = {
    "sleep": _stall_sleep, "lock": _stall_lock, "queue": _stall_queue, "gil": _stall_gil,
    "device": _stall_device}
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
    from chaos.probe.bitflip import Episode as BitFlipEpisode

    model = probe.watched.get("model", context.get("model"))
    optimizer = probe.watched.get("optimizer", context.get("optimizer"))
    probe.start(BitFlipEpisode(probe.emit, probe.src, fault, model, optimizer))


@register_action("leak")
def _leak(probe: Probe, fault: dict[str, Any], step: int | None, context: dict[str, Any]) -> None:
    from chaos.probe.leak import start_leak  # loaded only when a leak fires

    start_leak(fault.get("params", {}))
