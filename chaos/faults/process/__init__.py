"""Process / GPU faults: rank and node kills, hangs, stalled loops, device errors, stragglers
and thermal throttling, death mid-save (docs/process.md).

The family's ``FamilySpec`` (``chaos.faults.family``); the types are in ``faults``,
``stall`` (stall_loop) and ``throttle`` (thermal_throttle); its metric (how soon a throttled
rank is named slow) in ``metrics``.
"""

from __future__ import annotations

from chaos.faults.family import FamilySpec, Meaning, register_family
from chaos.faults.process.metrics import METRICS

__all__ = ["FAMILY", "MEANINGS"]

MEANINGS: tuple[Meaning, ...] = (
    # what users call a failure -> this family's types that express it (chaos.schema.suggest)
    ((("cpu",), ("stress",), ("noisy",), ("neighbour",)), (
        ("straggler", "slows one rank's steps by a factor, as a contended CPU or GPU would"),
    )),
    ((("gpu",),), (
        ("device_error", "the rank fails the way a CUDA/Xid error surfaces in PyTorch"),
    )),
    ((("gpu", "memory"), ("cuda", "memory"), ("gpu", "oom"), ("cuda", "oom")), (
        ("cuda_oom", "the rank's GPU runs out of memory: a real allocation torch's allocator refuses"),
    )),
    ((("hang",),), (
        ("hang_rank", "freezes a rank (SIGSTOP)"),
        ("stall_loop", "blocks the training thread while the process and its heartbeat live (a deadlock, a stuck wait)"),
    )),
    ((("straggler",), ("rank", "slow")), (
        ("straggler", "slows a rank's steps by a factor"),
        ("thermal_throttle", "slows a rank by a factor that ramps up, holds and recovers"),
    )),
    ((("thermal",), ("gpu", "slow")), (
        ("thermal_throttle", "slows a rank by a factor that ramps up, holds and recovers, as a hot GPU does"),
    )),
    ((("node", "fail"), ("node", "kill")), (
        ("kill_node", "kills a node's torchrun agent and all of its ranks"),
    )),
    ((("rank", "fail"), ("rank", "kill"), ("kill",)), (
        ("kill_rank", "kills the worker process of a rank with a signal"),
    )),
)

FAMILY = register_family(FamilySpec(
    "process",
    "rank and node kills, hangs, stalled loops, device errors, stragglers and throttling, death mid-save",
    fault_modules=("chaos.faults.process.faults", "chaos.faults.process.stall", "chaos.faults.process.throttle"),
    meanings=MEANINGS,
    metrics=METRICS,
    probe_actions=("device_error", "slowdown", "exit", "stall", "device_alloc"),
    docs="process.md"))
