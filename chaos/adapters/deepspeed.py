"""DeepSpeed adapter: one call after ``deepspeed.initialize`` reports the engine's loop.

    engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=cfg)
    chaos.adapters.deepspeed.instrument(engine)                # the one line
    chaos.adapters.deepspeed.samples(ids, epoch)               # optional: the step's sample indices

What it reports, from the engine's own calls:

- ``rank_start`` at once (global rank, local rank, world size, node, pid, ZeRO stage);
- ``step_end`` after each ``engine.step()`` that ended a gradient-accumulation window
  (``engine.global_steps`` moved), with the loss last given to ``engine.backward``; the
  probe's fault points ``step_begin`` (a forward pre-hook on the engine's module) and
  ``after_backward`` (after each backward);
- ``ckpt_save_start``/``ckpt_save_end`` around ``engine.save_checkpoint`` on every rank
  (each writes its own ZeRO partition files; the path is the tag's folder) and
  ``ckpt_load`` after ``engine.load_checkpoint`` (the step is the engine's restored
  ``global_steps``: where training goes on from);
- ``samples(ids, epoch)``: the sample indices the coming step trains on, for the data
  checker (DeepSpeed saves no data position; the script derives it, and says what it is);
- in the fault-free twin only, ``state_digest`` after each step: the whole model's digest
  (ZeRO-3's partitioned parameters gathered: a collective, so every rank takes part), which
  the freshness checker compares each checkpoint's weights with (``chaos.ckptformat.deepspeed``);
- ``full_state_digest(engine)``: the final digest the same way, for ``run_end``.

It observes and never steers: ``backward``, ``step``, ``save_checkpoint`` and
``load_checkpoint`` are replaced on this one engine by functions that call the originals with
the same arguments and return their results (a test trains the example with and without it
and compares the digests). Imports only the probe; DeepSpeed and torch are the caller's.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

from chaos import contract, probe

__all__ = ["final_state", "full_state_digest", "instrument", "samples"]

TIER = "shared"
"""DeepSpeed writes where the script points ``save_checkpoint``: the run's checkpoint directory."""
_MARK = "_trainchaos_instrumented"

samples = probe.samples
"""Report the sample indices the coming step trains on (see ``probe.samples``)."""


def _zero3(engine: Any) -> bool:
    return int(getattr(engine, "zero_optimization_stage", lambda: 0)()) == 3


def full_state_digest(engine: Any) -> str | None:
    """The digest of the engine's whole model on global rank 0 (None on the others), as
    ``probe.model_digest`` hashes a module. Under ZeRO-3 each rank holds a partition of every
    parameter: they are gathered first, a collective every rank must call."""
    module = engine.module
    if not _zero3(engine):
        return probe.model_digest(module) if engine.global_rank == 0 else None
    import deepspeed

    with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None):
        return probe.model_digest(module) if engine.global_rank == 0 else None


def final_state(engine: Any, loss: Any = None) -> str | None:
    """The end of training, from every rank: ``run_end`` with the whole model's digest from
    global rank 0, ``rank_exit`` from each. Returns the digest (None on other ranks)."""
    digest = full_state_digest(engine)
    if engine.global_rank == 0:
        probe.final_state(int(engine.global_steps), digest=digest, loss=_float(loss))
    probe.emit("rank_exit", code=0, reason="completed")
    return digest


class _Reporter:
    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.loss: float | None = None
        self.twin = os.environ.get(contract.RECORD_DIGESTS_ENV) == "1"

    @property
    def step(self) -> int:
        return int(self.engine.global_steps)

    def step_ended(self) -> None:
        probe.step_end(self.step, self.loss)
        if self.twin:
            # The twin's reference for checkpoint freshness (every rank: a gather under ZeRO-3).
            digest = full_state_digest(self.engine)
            if self.engine.global_rank == 0:
                probe.state_digest(self.step, digest=digest)


def _tag_folder(save_dir: Any, tag: Any, engine: Any) -> str:
    return os.path.join(str(save_dir), str(tag if tag is not None else f"global_step{engine.global_steps}"))


def _folder_bytes(path: str) -> int | None:
    if not os.path.isdir(path):
        return None
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def instrument(engine: Any) -> Any:
    """Report the loop of a ``deepspeed.DeepSpeedEngine`` through ``chaos.probe``; returns the
    engine. Calling it twice on one engine is harmless."""
    if getattr(engine, _MARK, False):
        return engine
    setattr(engine, _MARK, True)
    reporter = _Reporter(engine)
    env = os.environ
    probe.emit("rank_start", rank=engine.global_rank, local_rank=int(env.get("LOCAL_RANK", "0")),
               world_size=engine.world_size, node=int(env.get(contract.NODE_ENV, env.get("GROUP_RANK", "0"))),
               pid=os.getpid(), stack="deepspeed", zero_stage=int(engine.zero_optimization_stage()))
    module = engine.module
    probe.watch(model=module, optimizer=getattr(engine, "optimizer", None))

    def step_begin(_module: Any, _inputs: Any) -> None:
        # Before the step's forward: where in-process faults on weights land (every forward
        # passes here; the probe fires a planned fault once). Returns None: inputs unchanged.
        probe.fault_point("step_begin", step=reporter.step + 1, model=module)

    module.register_forward_pre_hook(step_begin)

    backward = engine.backward

    @functools.wraps(backward)
    def reported_backward(loss: Any, *args: Any, **kwargs: Any) -> Any:
        result = backward(loss, *args, **kwargs)
        reporter.loss = _float(loss)
        probe.fault_point("after_backward", step=reporter.step + 1)
        return result

    step = engine.step

    @functools.wraps(step)
    def reported_step(*args: Any, **kwargs: Any) -> Any:
        before = reporter.step
        result = step(*args, **kwargs)
        if reporter.step != before:  # an accumulation boundary: the optimizer really stepped
            reporter.step_ended()
        return result

    save_checkpoint = engine.save_checkpoint

    @functools.wraps(save_checkpoint)
    def reported_save_checkpoint(save_dir: Any, tag: Any = None, *args: Any, **kwargs: Any) -> Any:
        where = _tag_folder(save_dir, tag, engine)
        probe.emit("ckpt_save_start", step=reporter.step, tier=TIER, path=where, tag=os.path.basename(where))
        began = time.perf_counter()
        result = save_checkpoint(save_dir, tag, *args, **kwargs)
        seconds = time.perf_counter() - began
        probe.emit("ckpt_save_end", step=reporter.step, tier=TIER, bytes=_folder_bytes(where), seconds=seconds,
                   blocked_seconds=seconds, path=where, tag=os.path.basename(where))
        return result

    load_checkpoint = engine.load_checkpoint

    @functools.wraps(load_checkpoint)
    def reported_load_checkpoint(load_dir: Any, tag: Any = None, *args: Any, **kwargs: Any) -> Any:
        result = load_checkpoint(load_dir, tag, *args, **kwargs)
        loaded = result[0] if isinstance(result, tuple) else result
        if loaded is not None:
            # load_checkpoint returns the model-states file it read; its folder is the tag's.
            where = os.path.dirname(str(loaded)) if str(loaded).endswith(".pt") else str(loaded)
            probe.emit("ckpt_load", step=reporter.step, tier=TIER, verified=False, path=where,
                       tag=os.path.basename(where))
        return result

    engine.backward = reported_backward
    engine.step = reported_step
    engine.save_checkpoint = reported_save_checkpoint
    engine.load_checkpoint = reported_load_checkpoint
    return engine


def _float(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value.detach()) if hasattr(value, "detach") else float(value)
    except (TypeError, ValueError, RuntimeError):
        return None
