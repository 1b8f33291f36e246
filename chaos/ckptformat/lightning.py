"""Lightning ``.ckpt`` files: ``torch.save`` of the Trainer's dump, whose ``state_dict`` is the
LightningModule's own (a module kept as ``self.model`` names its tensors ``model.*``, and so
does the Lightning adapter's twin, which hashes the LightningModule: no prefix is dropped)
and whose ``global_step`` is the step.

The pointer is ``last.ckpt`` (``ModelCheckpoint(save_last=True)``): a symlink names its
target; a copy is itself a checkpoint, whose step is what it points at (a torn copy: -1).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import ClassVar

from chaos.ckptformat import register_format
from chaos.ckptformat.base import CheckpointFormat, recorded_step, step_from_name
from chaos.ckptformat.records import CheckpointAudit, LoadedState
from chaos.ckptformat.torch_save import load_torch_file

__all__ = ["LightningFormat"]

SUFFIX = ".ckpt"
LAST = "last.ckpt"


@register_format
class LightningFormat(CheckpointFormat):
    name: ClassVar[str] = "lightning"
    summary: ClassVar[str] = "a Lightning .ckpt file: its state_dict and global_step"
    pointer_doc: ClassVar[str] = ("`last.ckpt`: a symlink names its target's step; a copy is read "
                                  "for its own global_step")
    precedence: ClassVar[int] = 20

    def detect(self, path: str) -> bool:
        return path.endswith(SUFFIX) and not os.path.isdir(path)

    def load(self, path: str) -> LoadedState:
        checkpoint = load_torch_file(path, "Lightning")
        if not isinstance(checkpoint, Mapping) or not isinstance(checkpoint.get("state_dict"), Mapping):
            raise ValueError(f"{path} holds no Lightning state_dict")
        step = recorded_step({"global_step": checkpoint.get("global_step")})
        return LoadedState(step=step if step is not None else step_from_name(path),
                           model=checkpoint["state_dict"])

    def audit(self, directory: str) -> CheckpointAudit:
        audit = super().audit(directory)
        last = os.path.join(directory, LAST)
        copied = os.path.isfile(last) and not os.path.islink(last)
        if copied and audit.pointer is not None and audit.pointer >= 0 and audit.pointer not in audit.complete:
            # A copy that reads whole is a complete checkpoint of its step (the one it
            # copied may be pruned already: save_top_k).
            return CheckpointAudit(complete=tuple(sorted({*audit.complete, audit.pointer})), torn=audit.torn,
                                   pointer=audit.pointer)
        return audit

    def pointer_names(self) -> tuple[str, ...]:
        return (LAST,)

    def pointer(self, directory: str, steps_by_name: Mapping[str, int]) -> int | None:
        path = os.path.join(directory, LAST)
        if os.path.islink(path):
            target = os.path.basename(os.readlink(path))
            return steps_by_name.get(target, step_from_name(target) if os.path.exists(path) else -1)
        if not os.path.isfile(path):
            return None
        try:
            step = self.load(path).step
        except (OSError, ValueError):
            return -1
        return step if step is not None else -1
