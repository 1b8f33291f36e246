"""What a checkpoint reader returns: the records the freshness checker and the crash-point
sweep compare (``chaos.workload.base`` hands them on as the ``Workload`` interface's)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CheckpointAudit", "CheckpointImage", "LoadedState"]


@dataclass(frozen=True)
class CheckpointImage:
    """What one saved checkpoint holds, as the freshness checker compares it with the twin."""

    step: int | None
    """The step the checkpoint claims (its own record of it, else its name); None: it records
    none, and the step its ``ckpt_save_end`` event reported is taken (``chaos.runner.freshness``)."""
    digest: str
    """``chaos.probe.state_dict_digest`` of the model state it holds: equal to the twin's
    ``state_digest`` at a step exactly when the weights are bitwise those of that step."""


@dataclass(frozen=True)
class CheckpointAudit:
    """The checkpoints of one directory as a crash left them (``Workload.audit_checkpoints``)."""

    complete: tuple[int, ...]
    """Steps whose checkpoint is complete: it verifies as the job's own load verifies it."""
    torn: dict[int, str] = field(default_factory=dict)
    """Step -> why its checkpoint, named as a finished one, is not complete."""
    pointer: int | None = None
    """The step the job's "latest" pointer names; None: it keeps no pointer (or none yet);
    -1: a pointer that names nothing there."""

    @property
    def dangling(self) -> bool:
        """The pointer names a checkpoint that is not complete."""
        return self.pointer is not None and self.pointer not in self.complete


@dataclass(frozen=True)
class LoadedState:
    """A checkpoint as a format loads it: the model's state dict and the step it records."""

    step: int | None
    """The step from the checkpoint's own record, else from its name; None: neither says."""
    model: Mapping[str, Any]
    """Tensor name -> tensor, keyed as the twin's ``probe.state_digest(model=)`` names them
    (a ``module.`` prefix is dropped by the digest either way)."""
