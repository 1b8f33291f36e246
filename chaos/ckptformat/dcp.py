"""``torch.distributed.checkpoint`` (DCP) checkpoints: a directory of ``.metadata`` and
``__<rank>_<n>.distcp`` shards, read whole in the controller without a process group (DCP's
empty-state-dict planner, as its own ``dcp_to_torch_save`` reads one).

The model state is the saved state's ``model`` (or ``state_dict``, ``model_state_dict``)
entry, or the state itself when tensors sit at its top; the step a ``step`` (...) entry, else
the directory's name (``step-NNNNNNNN``, the bundled example's), else the saver's claim.
Detected by a ``.metadata`` file or ``.distcp`` shards: a directory whose metadata was never
written is still DCP's, and torn.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar

from chaos.ckptformat import register_format
from chaos.ckptformat.base import (
    MODEL_KEYS,
    CheckpointFormat,
    model_state,
    recorded_step,
    step_from_name,
    text_pointer,
    unusable,
)
from chaos.ckptformat.records import LoadedState

__all__ = ["DcpFormat", "load_dcp"]

METADATA = ".metadata"


def load_dcp(path: str) -> dict[str, Any]:
    """The whole state a DCP checkpoint holds, loaded as saved (no model to load into).
    ValueError when the directory is not a complete DCP checkpoint (no metadata, torn
    shards)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    if not os.path.isdir(path):
        raise FileNotFoundError(2, "No such DCP checkpoint directory", path)
    state: dict[str, Any] = {}
    try:
        _load_state_dict(state, storage_reader=FileSystemReader(path),
                         planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    # A torn one: DCP wraps each rank's failure in CheckpointException, a BaseException.
    except (Exception, CheckpointException) as exc:
        raise unusable("DCP", exc) from None
    return state


@register_format
class DcpFormat(CheckpointFormat):
    name: ClassVar[str] = "dcp"
    summary: ClassVar[str] = ("a torch.distributed.checkpoint directory (.metadata, *.distcp): the "
                              "model state under model/state_dict/model_state_dict")
    pointer_doc: ClassVar[str] = ("a `latest` text file naming the checkpoint's directory (the "
                                  "bundled DCP example's), or `LATEST`")
    precedence: ClassVar[int] = 10

    def detect(self, path: str) -> bool:
        if not os.path.isdir(path):
            return False
        return any(name == METADATA or name.endswith(".distcp") for name in os.listdir(path))

    def load(self, path: str) -> LoadedState:
        state = load_dcp(path)
        model = model_state(state)
        if model is None:
            raise ValueError(f"DCP checkpoint {path} holds no model state (no {'/'.join(MODEL_KEYS)}; "
                             f"keys: {sorted(state)[:5]})")
        step = recorded_step(state)
        return LoadedState(step=step if step is not None else step_from_name(path), model=model)

    def pointer(self, directory: str, steps_by_name: Mapping[str, int]) -> int | None:
        return text_pointer(directory, steps_by_name)
