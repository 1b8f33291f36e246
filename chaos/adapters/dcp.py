"""torch.distributed.checkpoint adapter: the calls a DDP/FSDP2 script makes, reported.

A script that checkpoints with ``torch.distributed.checkpoint`` (DCP) swaps its ``dcp.save``
and ``dcp.load`` for these, which call them unchanged and report through the probe::

    from chaos.adapters import dcp as chaos_dcp                       # the one line
    chaos_dcp.started()                                                # rank_start (pid, rank)
    chaos_dcp.load(state, checkpoint_id=path, step=step)               # dcp.load + ckpt_load
    chaos_dcp.step_begin(step)                                         # in-process faults (weights)
    chaos_dcp.after_backward(step)                                     # in-process faults (gradients)
    chaos_dcp.step_end(step, loss)                                     # step_end (+ in-process faults)
    chaos_dcp.save(state, checkpoint_id=path, step=step)               # dcp.save + ckpt_save_start/end
    chaos_dcp.final_state(step, model)                                 # run_end with the digest

``state_digest(model)`` is the digest alone (no event): for a DDP model the probe's
``model_digest``; for an FSDP2 model, whose parameters are shards (DTensors), the same digest
of the full state dict gathered to rank 0 (a collective: every rank calls it).

It observes and never steers: every argument reaches DCP as given, its return value comes
back, and nothing of the training state is touched (a test trains the example with and
without it and compares the digests). Imports only the probe; torch is imported on use,
by a script that has imported it already.
"""

from __future__ import annotations

import os
import time
from typing import Any

from chaos import contract, probe

__all__ = ["after_backward", "final_state", "load", "save", "started", "state_digest", "step_begin",
           "step_end", "watch"]

TIER = "shared"
"""DCP writes where the script points it: the run's shared checkpoint directory."""

watch = probe.watch
"""Hand the model and optimizer to the probe (bit flips reach them); see ``probe.watch``."""


def started(**fields: Any) -> None:
    """Report this rank's start (``rank_start``): trainchaos finds the rank's process by it."""
    env = os.environ
    probe.emit("rank_start", rank=_int(env.get("RANK")), local_rank=_int(env.get("LOCAL_RANK")),
               world_size=_int(env.get("WORLD_SIZE")), node=_int(env.get(contract.NODE_ENV)),
               pid=os.getpid(), stack="dcp", **fields)


def save(state_dict: dict[str, Any], *, checkpoint_id: str | os.PathLike[str], step: int,
         **kwargs: Any) -> Any:
    """``dcp.save(state_dict, checkpoint_id=..., **kwargs)``, between ``ckpt_save_start`` and
    ``ckpt_save_end`` (seconds, and the checkpoint's bytes on disk once every rank wrote)."""
    import torch.distributed.checkpoint as dcp

    probe.emit("ckpt_save_start", step=step, tier=TIER, path=str(checkpoint_id))
    began = time.perf_counter()
    result = dcp.save(state_dict, checkpoint_id=checkpoint_id, **kwargs)
    seconds = time.perf_counter() - began
    probe.emit("ckpt_save_end", step=step, tier=TIER, bytes=_size(checkpoint_id), seconds=seconds,
               blocked_seconds=seconds, path=str(checkpoint_id))
    return result


def load(state_dict: dict[str, Any], *, checkpoint_id: str | os.PathLike[str], step: int,
         **kwargs: Any) -> Any:
    """``dcp.load(state_dict, checkpoint_id=..., **kwargs)``, then ``ckpt_load`` with the step
    the checkpoint holds (where training resumes from). DCP checks no checksum: unverified."""
    import torch.distributed.checkpoint as dcp

    result = dcp.load(state_dict, checkpoint_id=checkpoint_id, **kwargs)
    probe.emit("ckpt_load", step=step, tier=TIER, verified=False, path=str(checkpoint_id))
    return result


def step_begin(step: int) -> None:
    """Before step ``step``'s forward pass: where in-process faults on the weights land (a
    bit flip in a parameter)."""
    probe.fault_point("step_begin", step=step)


def after_backward(step: int) -> None:
    """After step ``step``'s backward pass (DDP's all-reduce done): where faults on the
    averaged gradients land."""
    probe.fault_point("after_backward", step=step)


def step_end(step: int, loss: Any = None, model: Any = None) -> None:
    """A completed optimizer step (a tensor loss is read as a float); in-process faults planned
    at this step fire here. With ``model``, the fault-free twin also publishes the state it
    reached (``probe.state_digest``), which the checkpoint freshness checker compares each
    checkpoint of the faulty run with; outside the twin nothing is computed (for an FSDP2
    model the gather is a collective: every rank passes the model or none does)."""
    probe.step_end(step, _float(loss))
    if model is not None and os.environ.get(contract.RECORD_DIGESTS_ENV) == "1":
        state = _full_state(model)
        if state is None:
            if os.environ.get("RANK", "0") == "0":
                probe.state_digest(step, model=model)
        elif state:
            probe.state_digest(step, digest=probe.state_dict_digest(state))


def state_digest(model: Any) -> str | None:
    """The model's digest (``probe.model_digest``'s); None on ranks other than 0 for an FSDP2
    model, whose full state is gathered to rank 0 (every rank must call it)."""
    state = _full_state(model)
    if state is None:
        return probe.model_digest(model)
    return probe.state_dict_digest(state) if state else None


def final_state(step: int, model: Any, loss: Any = None) -> str | None:
    """The end of training, from every rank: ``run_end`` with the model's digest from rank 0,
    ``rank_exit`` from each. Returns the digest (None on other ranks of an FSDP2 model)."""
    import torch

    state = _full_state(model)
    digest: str | None
    if state is None:
        digest = probe.model_digest(model)
        finite = probe.weights_finite(model)
    else:
        digest = probe.state_dict_digest(state) if state else None
        finite = all(bool(torch.isfinite(t).all()) for t in state.values() if t.is_floating_point())
    if os.environ.get("RANK", "0") == "0":
        probe.final_state(step, digest=digest, loss=_float(loss), weights_finite=finite)
    probe.emit("rank_exit", code=0, reason="completed")
    return digest


def _full_state(model: Any) -> dict[str, Any] | None:
    """For a model with sharded (DTensor) parameters, its full state dict on rank 0 ({} on
    the others); None for a model whose parameters are whole tensors."""
    from torch.distributed.tensor import DTensor

    if not any(isinstance(p, DTensor) for p in model.parameters()):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _size(path: str | os.PathLike[str]) -> int | None:
    try:
        with os.scandir(path) as entries:
            return sum(e.stat().st_size for e in entries if e.is_file())
    except OSError:  # not a directory (a storage writer of the script's own)
        return None


def _float(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value.detach()) if hasattr(value, "detach") else float(value)
    except (TypeError, ValueError, RuntimeError):
        return None


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.lstrip("-").isdigit() else None
