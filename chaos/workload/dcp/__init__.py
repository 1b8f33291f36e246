"""``workload: {dcp: {...}}``: a plain DDP or FSDP2 script checkpointing with
``torch.distributed.checkpoint``, run per rank by torchrun.

The recovery model is a restart: torchrun restarts every rank of the group, and the script
resumes from the DCP checkpoint its ``latest`` marker names (a smaller group after a lost
node loads the same checkpoint: DCP reshards on load). The bundled example
(examples/dcp/train.py; ``args: [--parallel, fsdp2]`` for FSDP2) reports steps, checkpoint
saves and loads and its final digest through ``chaos.adapters.dcp``; a script without it can
be read by ``progress_regex``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import ClassVar

from chaos import probe
from chaos.workload import register_workload
from chaos.workload.base import CheckpointImage
from chaos.workload.script import ScriptOptions, ScriptWorkload

__all__ = ["DcpOptions", "DcpWorkload"]


@dataclass(frozen=True)
class DcpOptions(ScriptOptions):
    """Options of ``workload.dcp``."""


@register_workload
class DcpWorkload(ScriptWorkload):
    kind: ClassVar[str] = "dcp"
    stack: ClassVar[str] = "torch"  # DCP is torch's own: its presence is torch's
    extra: ClassVar[str] = "dev"
    options_class: ClassVar[type[ScriptOptions]] = DcpOptions
    summary: ClassVar[str] = ("a DDP/FSDP2 script checkpointing with torch.distributed.checkpoint, "
                              "run per rank by torchrun; reports through chaos.adapters.dcp")
    options_intro: ClassVar[str] = (
        "A DDP or FSDP2 script run per rank by torchrun that checkpoints with "
        "torch.distributed.checkpoint; by default the bundled example, which saves every few "
        "steps behind an atomic `latest` marker and resumes from it.")
    options_description: ClassVar[str] = "Options of the dcp workload kind ({section})."
    key_doc: ClassVar[str] = ("A DDP/FSDP2 script checkpointing with torch.distributed.checkpoint, run per "
                              "rank by torchrun; null or {} runs the bundled example (examples/dcp/train.py).")

    def read_checkpoint(self, path: str) -> CheckpointImage | None:
        """A DCP checkpoint directory ``step-NNNNNNNN`` (the bundled example's layout: the
        ``model`` entry of the saved state), read whole in the controller without a process
        group: the digest of its model tensors, which the twin's ``step_end(..., model=)``
        hashes the same way. None for a directory of another layout (a user's script)."""
        match = re.fullmatch(r"step-(\d+)", os.path.basename(os.path.normpath(path)))
        if match is None:
            return None
        return CheckpointImage(step=int(match.group(1)), digest=probe.state_dict_digest(read_model_state(path)))


def read_model_state(path: str) -> dict:
    """The ``model`` state of a DCP checkpoint, loaded as saved (no model to load into: DCP's
    empty-state-dict planner, as its own ``dcp_to_torch_save`` reads one). ValueError when
    the directory is not a complete DCP checkpoint (no metadata, torn shards)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    state: dict = {}
    try:
        _load_state_dict(state, storage_reader=FileSystemReader(path),
                         planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    except FileNotFoundError:
        raise
    # A torn one: DCP wraps each rank's failure in CheckpointException, a BaseException.
    except (Exception, CheckpointException) as exc:
        raise ValueError(f"not a complete DCP checkpoint: {type(exc).__name__}: {exc}"[:300]) from None
    if not isinstance(state.get("model"), dict):
        raise ValueError(f"DCP checkpoint {path} holds no 'model' state (keys: {sorted(state)[:5]})")
    return state["model"]
