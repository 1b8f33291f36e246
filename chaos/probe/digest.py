"""Digests of a model's state, for the correctness checkers: what ``final_state`` and
``state_digest`` publish and what a checkpoint reader computes to compare with them.

torch is imported inside each function, on use: ``chaos.probe`` loads this module with
the standard library only.
"""

from __future__ import annotations

from typing import Any

__all__ = ["model_digest", "state_dict_digest", "unwrapped", "weights_finite"]


def unwrapped(model: Any) -> Any:
    return model.module if hasattr(model, "module") and hasattr(model.module, "named_parameters") else model


def model_digest(model: Any) -> str:
    """SHA-256 over every parameter and buffer: equal digests mean bitwise-equal models.

    Covers, in name order, each tensor's name, dtype, shape and raw bytes. A DDP (or any
    ``.module``) wrapper is unwrapped first so that a distributed run and a single-process
    run of the same model compare equal (DDP prefixes every name with ``module.``). torch is
    imported here, on use: the probe itself loads with the standard library only.
    """
    model = unwrapped(model)
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


def weights_finite(model: Any) -> bool:
    """Whether every floating-point parameter and buffer holds only finite numbers: two runs
    that both end in NaN share a digest, and that is no correctness."""
    import torch

    state = unwrapped(model).state_dict()
    return all(bool(torch.isfinite(t).all()) for t in state.values() if t.is_floating_point())
