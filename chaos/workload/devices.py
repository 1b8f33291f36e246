"""Whether this host can run a workload on a CUDA device: asked by the kinds that train on
one (``workload.harness.device: cuda``, ``megatron``) when a scenario is validated, so that
a scenario asking for a GPU on a host without one is refused before anything starts (exit 2,
located at the key that asked).

The controller's host stands for the nodes: true of the local backend, where the nodes are
the controller's processes; a container or a Slurm node with a GPU that the controller's
host lacks is refused too (docs/gpu.md says so).
"""

from __future__ import annotations

import functools
import os

__all__ = ["cuda_missing"]


@functools.cache
def cuda_missing() -> str | None:
    """Why no CUDA device can be used here, in words for a located message; None: one can.
    torch is imported only here, when a scenario asks for a GPU."""
    import torch

    if torch.version.cuda is None:
        return (f"this Python's torch ({torch.__version__}) is built without CUDA; install a CUDA "
                "build of torch on a GPU host (docs/gpu.md)")
    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        return f"torch sees no CUDA device on this host{where}: run it on a GPU host (docs/gpu.md)"
    return None
