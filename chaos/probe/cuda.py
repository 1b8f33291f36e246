"""Real device faults on a CUDA rank: the mechanics of ``device_error`` with ``on_device``,
``cuda_oom`` and ``stall_loop`` with ``mode: device`` (docs/gpu.md).

The probe loads this module when such a fault fires, never at import (the probe is imported
by every rank and stays standard-library only); torch is imported inside each function.
Each acts on the rank's current CUDA device through PyTorch's own calls, so what the job sees
is what a failing GPU hands it: torch's exception, from torch's allocator or from the CUDA
runtime, not one the probe made up.
"""

from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["NoCudaDevice", "device_sleep", "exhaust_memory", "poison_context"]

_SLEEP_CHUNK_S = 1.0
"""One sleep kernel's length: between two, the thread takes its signals (a teardown's
SIGTERM), while the device stays busy the whole time."""
_calibrated: dict[int, float] = {}


class NoCudaDevice(RuntimeError):
    """A device fault fired in a rank that has no CUDA device (validation refuses such a
    scenario; a node that differs from the controller's host can still get here)."""


def _device() -> Any:
    import torch

    if not torch.cuda.is_available():
        raise NoCudaDevice("a CUDA fault fired in a rank with no CUDA device (torch.cuda.is_available() "
                           "is False): run it with workload device: cuda on a GPU node")
    return torch.device("cuda", torch.cuda.current_device())


def poison_context() -> None:
    """A device-side assert in a real kernel (an index past the end of a device tensor):
    the CUDA context is broken for good, every later CUDA call of the process fails with
    ``CUDA error: device-side assert triggered``, as after an Xid 13/43 or an illegal
    address. Raises torch's error at the synchronize; returns only where the build has
    device asserts compiled out (``TORCH_DISABLE_GPU_ASSERTS``), said on stderr."""
    import torch

    device = _device()
    values = torch.zeros(4, device=device)
    past_the_end = torch.tensor([1 << 20], device=device)
    values.index_select(0, past_the_end)
    torch.cuda.synchronize(device)
    sys.stderr.write("[trainchaos] the out-of-range kernel did not fault (device asserts compiled out?): "
                     "raising the simulated device error instead\n")


_held: list[Any] = []
"""What ``exhaust_memory`` allocated and keeps, until the process ends."""


def exhaust_memory(gib: float | None) -> None:
    """A real allocation through PyTorch's caching allocator. ``gib`` None: more than the
    device has, so ``torch.cuda.OutOfMemoryError`` is raised here, at the step. A size that
    fits is allocated and kept for the rest of the process (a leak of device memory): the
    step's own allocations then fail where the device is near full, in the model's kernels."""
    import torch

    device = _device()
    _free, total = torch.cuda.mem_get_info(device)
    size = int(gib * (1 << 30)) if gib is not None else 2 * total
    _held.append(torch.empty(size, dtype=torch.uint8, device=device))


def device_sleep(duration_s: float | None) -> None:
    """Keep the device busy in a spinning kernel (``torch.cuda._sleep``) for ``duration_s``
    seconds (None: until the process is killed), the calling thread waiting in a device
    synchronize for each of them."""
    import torch

    device = _device()
    rate = _cycles_per_second(device)
    end = None if duration_s is None else time.monotonic() + duration_s
    while True:
        left = _SLEEP_CHUNK_S if end is None else min(_SLEEP_CHUNK_S, end - time.monotonic())
        if left <= 0:
            return
        torch.cuda._sleep(max(1, int(left * rate)))
        torch.cuda.synchronize(device)


def _cycles_per_second(device: Any) -> float:
    """The sleep kernel's cycles per second, timed once on the device (a clock rate read
    from the driver would not say the boost clock it runs at)."""
    import torch

    index = device.index or 0
    if index not in _calibrated:
        cycles = 10_000_000
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        stop.record()
        stop.synchronize()
        _calibrated[index] = cycles / max(start.elapsed_time(stop) / 1000.0, 1e-6)
    return _calibrated[index]
