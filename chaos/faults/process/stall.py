"""A rank whose training loop stops while the process lives: ``stall_loop``.

Part of the process family (docs/process.md). ``hang_rank`` freezes every thread of a rank
(SIGSTOP), so its heartbeat goes silent and a liveness watchdog sees it at once. The common
hard case in production is the other one: the training thread is stuck (a Python deadlock,
a data-loader wait that never returns, a host-side desync) while the heartbeat thread keeps
answering. Only a watchdog on *progress* notices that (harness/progress.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field

from chaos.faults.base import FailureClass, FaultParams, TargetKind, register
from chaos.faults.process.faults import _ProbeFault
from chaos.model.types import MAX_SECONDS

__all__ = ["StallLoop"]


class StallLoopParams(FaultParams):
    mode: Literal["sleep", "lock", "queue", "gil", "device"] = "sleep"
    """How the training thread blocks: sleep (a wait in Python), lock (a lock another thread holds and does not give back), queue (a get on a queue that never fills), gil (a C call that holds the GIL: every Python thread of the rank stops, the heartbeat's too, so it is seen as a hang), device (a kernel on the rank's GPU that spins for duration_s while the thread waits for it in a synchronize; needs a workload on device cuda)."""
    duration_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Seconds the training thread stays blocked before the loop goes on; null: until the process is killed."""


@register
@dataclass
class StallLoop(_ProbeFault):
    type_name: ClassVar[str] = "stall_loop"
    family: ClassVar[str] = "process"
    failure_class: ClassVar[FailureClass] = "stalled"
    summary: ClassVar[str] = ("At step N the rank's training thread blocks (sleep, a held lock, a queue "
                              "that never fills, a GIL-holding C call) while its other threads run on.")
    mechanism: ClassVar[str] = ("in-process, by the probe at the exact step: the training thread blocks "
                                "after the step's end; the heartbeat and every other thread keep running")
    fidelity: ClassVar[str] = (
        "Stands for a training loop that stops making progress in a live process: a Python "
        "deadlock, a data-loader or queue wait that never returns, a host-side desync that "
        "leaves one rank outside the collective its peers wait in. The heartbeat still "
        "answers, so liveness watchdogs see nothing; exercises progress watchdogs and their "
        "attribution (stalled, not hung). mode gil holds the GIL in a real C call (libc "
        "nanosleep through ctypes.PyDLL): every Python thread stops with it, so it is "
        "correctly seen as a hang. mode device runs a real spinning kernel on the rank's GPU "
        "(torch.cuda._sleep) that the thread waits for in a synchronize: a kernel that does "
        "not return, seen as stalled; it does not model a hang inside NCCL (one GPU: gloo).")
    params_model: ClassVar[type[FaultParams]] = StallLoopParams
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("rank",)
    probe_action: ClassVar[str] = "stall"

    @classmethod
    def device_needed(cls, params: dict[str, Any]) -> str | None:
        return "mode device spins a kernel on the rank's GPU" if params.get("mode") == "device" else None

    def __post_init__(self) -> None:
        # Holding the GIL stops the heartbeat thread too: peers see a frozen process.
        if self.params.get("mode") == "gil":
            self.failure_class = "hang"  # type: ignore[misc]  # a ClassVar shadowed per instance on purpose
