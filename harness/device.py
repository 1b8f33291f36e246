"""Where a rank trains: its device, and what putting the model there takes.

The group always talks gloo (harness.dist): NCCL refuses two ranks on one device, and the
machines this runs on have one GPU at most, so a CUDA rank shares the group with CPU ranks
or with other CUDA ranks on the same device. What stays on the host whatever the device:
the data (sampled on the CPU, moved per step), every collective's tensors (the gradient
gather copies a CUDA bucket to the host and back: harness.dist) and the corruption
detectors' evidence rows; what moves to the device: the model, its gradients, the
optimizer state and the activations, where a bit flip or a device fault lands.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from harness.config import HarnessConfig
from harness.model import flatten_parameters

__all__ = ["CUBLAS_WORKSPACE", "place_model", "prepare_device", "rank_device"]

CUBLAS_WORKSPACE = ":4096:8"
"""cuBLAS's workspace setting under which its GEMMs are deterministic: without it
``torch.use_deterministic_algorithms(True)`` refuses every matmul on CUDA >= 10.2."""


def rank_device(cfg: HarnessConfig, rank: int, local_rank: int) -> torch.device:
    """This rank's device: cpu, or the node's GPU ``local_rank`` modulo the GPUs it has (one
    GPU: every CUDA rank of the node shares it). ``cuda_ranks`` keeps the ranks from it on
    the CPU. A config asking for cuda on a host without it fails here, named: validation
    refuses it before the run, so this is a node that differs from the controller's."""
    if cfg.device != "cuda" or (cfg.cuda_ranks and rank >= cfg.cuda_ranks):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("device: cuda, but torch sees no CUDA device on this node "
                           f"(torch {torch.__version__}, CUDA_VISIBLE_DEVICES="
                           f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')})")
    return torch.device("cuda", local_rank % torch.cuda.device_count())


def prepare_device(device: torch.device) -> None:
    """Make ``device`` current and its kernels reproducible, before the first CUDA call:
    the fault-free twin and a faulted run are compared bit for bit. ``warn_only``: a kernel
    without a deterministic implementation warns instead of killing the job (the
    comparison with the twin then says whether it mattered)."""
    if device.type != "cuda":
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.cuda.set_device(device)
    torch.use_deterministic_algorithms(True, warn_only=True)


def place_model(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` on ``device`` with its parameters in one buffer again (``Module.to`` moves
    each parameter on its own, undoing ``flatten_parameters``; the detectors read the
    parameters as one buffer, on every device)."""
    if device.type == "cpu":
        return model
    model.to(device)
    flatten_parameters(model)
    return model
