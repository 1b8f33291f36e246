"""Memory faults: a rank that leaks until the kernel kills it (``memory_leak``), and one that
runs out of memory at an exact step (``oom_kill``). Design: docs/neighbor.md.

Both allocate inside the rank (the probe's ``leak`` action, chaos/probe/leak.py); the limit is the
node's own memory cgroup (``backend: {local: {memory_mb: N}}``, a run-scoped cgroup per
node; ``{docker: {memory: ...}}`` on containers), and the kill is the kernel's OOM killer.
The job sees a SIGKILL like any other; what says it was an OOM is the cgroup's OOM
notification, reported as a ``detected`` event of class ``oom`` by the node's watcher
(chaos/cluster/oomwatch.py), as a kubelet's OOMKilled is in a real cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field

from chaos.faults.base import FailureClass, FaultParams, TargetKind, register
from chaos.faults.process.faults import _ProbeFault

__all__ = ["MemoryLeak", "OomKill"]

_MAX_MB_DOC = ("the most the rank allocates, MiB: the bound that keeps a node without a memory "
               "limit (and the machine) alive; under a limit the kernel kills the rank first")


class MemoryLeakParams(FaultParams):
    rate_mb_s: float = Field(100.0, gt=0, le=1 << 20)
    """MiB the rank allocates (and writes) every second from the step on, never freed."""
    max_mb: int = Field(4096, ge=1, le=1 << 22, description=_MAX_MB_DOC)


class OomKillParams(FaultParams):
    max_mb: int = Field(4096, ge=1, le=1 << 22, description=_MAX_MB_DOC + "; allocated at once, at the step")


_FIDELITY_LIMIT = (
    "The limit is a real memory cgroup and the kill the kernel's own OOM killer (SIGKILL, no "
    "handler runs); the OOM is told apart from other kills only by the cgroup's OOM "
    "notification, as a kubelet or Slurm tells it. Needs a node memory limit (local: "
    "memory_mb; docker: memory): without one the rank allocates max_mb and lives. Host "
    "memory only: GPU memory exhaustion (a CUDA OOM exception) is not modelled.")


@register
@dataclass
class MemoryLeak(_ProbeFault):
    type_name: ClassVar[str] = "memory_leak"
    family: ClassVar[str] = "memory"
    failure_class: ClassVar[FailureClass] = "oom"
    summary: ClassVar[str] = ("From step N the rank leaks host memory at rate_mb_s until its node's memory "
                              "cgroup limit makes the kernel's OOM killer kill it.")
    mechanism: ClassVar[str] = ("in-process (the probe, at the exact step): a thread allocates and writes "
                                "rate_mb_s; the node's memory cgroup and the kernel do the rest")
    fidelity: ClassVar[str] = (
        "Stands for a host-memory leak in the training process (a growing cache, tensors kept "
        "alive by a reference, a data-loader queue that never drains) that ends, seconds or hours "
        "later, in an OOM kill. Exercises restart after a kill that the job did not cause by "
        "crashing, and that the platform names it an OOM. " + _FIDELITY_LIMIT)
    params_model: ClassVar[type[FaultParams]] = MemoryLeakParams
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("rank",)
    probe_action: ClassVar[str] = "leak"


@register
@dataclass
class OomKill(_ProbeFault):
    type_name: ClassVar[str] = "oom_kill"
    family: ClassVar[str] = "memory"
    failure_class: ClassVar[FailureClass] = "oom"
    summary: ClassVar[str] = ("At step N the rank allocates past its node's memory limit at once: the "
                              "kernel's OOM killer kills it at that step.")
    mechanism: ClassVar[str] = "in-process (the probe, at the exact step): max_mb allocated and written at once"
    fidelity: ClassVar[str] = (
        "Stands for a sudden host-memory spike (a huge batch, a checkpoint gathered into one "
        "process, a leak at the end of its curve) killed at a known step. Exercises the same "
        "restart and attribution as memory_leak with the exact step under control. " + _FIDELITY_LIMIT)
    params_model: ClassVar[type[FaultParams]] = OomKillParams
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("rank",)
    probe_action: ClassVar[str] = "leak"
