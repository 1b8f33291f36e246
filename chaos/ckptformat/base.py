"""The ``CheckpointFormat`` interface, and what formats share: the step a name carries, the
model state under a conventional key, a ``latest`` pointer file, the audit of a directory.

torch is imported inside the functions that need it: listing or detecting a format costs no
torch import.
"""

from __future__ import annotations

import logging
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from chaos.ckptformat.records import CheckpointAudit, CheckpointImage, LoadedState
from chaos.probe.digest import state_dict_digest

__all__ = ["MODEL_KEYS", "POINTER_FILES", "STEP_KEYS", "CheckpointFormat", "files_with", "model_state",
           "recorded_step", "step_from_name", "temporary_name", "text_pointer", "unusable"]

log = logging.getLogger(__name__)

MODEL_KEYS = ("model", "state_dict", "model_state_dict")
"""Where a checkpoint mapping keeps the model's state, in the order they are looked for."""
STEP_KEYS = ("step", "global_step", "iteration")
"""Where a checkpoint mapping records its step, in the order they are looked for."""
POINTER_FILES = ("latest", "LATEST", "latest_checkpointed_iteration.txt")
"""Text pointer files: the DCP example's ``latest``, the harness's ``LATEST``, Megatron's
``latest_checkpointed_iteration.txt`` (DeepSpeed's ``latest`` too: it names a tag)."""

_NAME_STEP = (
    # step-00000040, epoch=0-step=6.ckpt, global_step40 (not step-40.tmp: a write in progress)
    re.compile(r"(?:^|[-_])step[-_=]?(\d+)(?:\.(?:pt|pth|bin|tar|ckpt|safetensors))?$"),
    re.compile(r"^checkpoint-(\d+)$"),  # HF Trainer's checkpoint-<global_step>
    re.compile(r"^iter_(\d+)$"),  # Megatron's iter_0000040
)


_TEMPORARY_PARTS = ("tmp", "temp", "partial", "part", "incomplete")
"""Name parts (after a dot) of a write in progress: ``step-20.pt.tmp``, ``ckpt.partial``."""


def temporary_name(name: str) -> bool:
    """Whether a name says its entry is still being written: a loader that trusts names
    never takes it, whether its bytes happen to read whole or not."""
    return name.endswith("~") or any(part in _TEMPORARY_PARTS for part in name.lower().split(".")[1:])


def step_from_name(path: str) -> int | None:
    """The step a checkpoint's file or directory name carries: ``step-N``, ``step_N``,
    ``epoch=E-step=N.ckpt``, ``global_stepN``, ``checkpoint-N``, ``iter_N``; None: no step
    in it (Accelerate's ``checkpoint_N`` counts saves, not steps: not taken)."""
    name = os.path.basename(os.path.normpath(path))
    for pattern in _NAME_STEP:
        if (match := pattern.search(name)) is not None:
            return int(match.group(1))
    return None


def recorded_step(*mappings: Any) -> int | None:
    """The first of ``STEP_KEYS`` an int (or a one-element tensor) sits under, in order."""
    for mapping in mappings:
        if not isinstance(mapping, Mapping):
            continue
        for key in STEP_KEYS:
            value: Any = mapping.get(key)
            if value is None or isinstance(value, bool):
                continue
            if isinstance(value, int):
                return value
            if hasattr(value, "numel") and value.numel() == 1 and not value.is_floating_point():
                return int(value.item())
    return None


def _has_tensors(mapping: Mapping[str, Any]) -> bool:
    import torch

    return any(isinstance(value, torch.Tensor) for value in mapping.values())


def model_state(obj: Any) -> Mapping[str, Any] | None:
    """The model's state in a loaded checkpoint: under a conventional key (``MODEL_KEYS``),
    or the mapping itself when it is a state dict (tensors at its top); a whole pickled
    module (``torch.save(model)``) is its ``state_dict()``; None: none of these."""
    import torch

    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if not isinstance(obj, Mapping):
        return None
    for key in MODEL_KEYS:
        value = obj.get(key)
        if isinstance(value, torch.nn.Module):
            return value.state_dict()
        if isinstance(value, Mapping) and _has_tensors(value):
            return value
    return obj if _has_tensors(obj) else None


def files_with(directory: str, suffixes: Iterable[str]) -> list[str]:
    """The plain files of ``directory`` whose names end with one of ``suffixes``, sorted."""
    ends = tuple(suffixes)
    try:
        with os.scandir(directory) as entries:
            return sorted(e.name for e in entries if e.name.endswith(ends) and e.is_file())
    except (FileNotFoundError, NotADirectoryError):
        return []


def unusable(kind: str, exc: BaseException) -> ValueError:
    """The ValueError a format raises for a checkpoint its library refuses (torn, truncated)."""
    return ValueError(f"not a complete {kind} checkpoint: {type(exc).__name__}: {exc}"[:300])


def text_pointer(directory: str, steps_by_name: Mapping[str, int]) -> int | None:
    """The step a pointer file of ``directory`` names (``POINTER_FILES``: an entry's name, a
    path to it, or a step number; a symlink named so: its target); None: no pointer file;
    -1: one that names nothing there."""
    for name in POINTER_FILES:
        path = os.path.join(directory, name)
        if os.path.islink(path):
            named = os.readlink(path)
        else:
            try:
                with open(path, encoding="utf-8") as fh:
                    named = fh.read().strip()
            except (FileNotFoundError, IsADirectoryError):
                continue
            except (OSError, UnicodeDecodeError):
                return -1
        if named.isdigit():
            return int(named)
        target = os.path.basename(os.path.normpath(named))
        if target in steps_by_name:
            return steps_by_name[target]
        step = step_from_name(target)
        return step if step is not None and os.path.exists(os.path.join(directory, target)) else -1
    return None


class CheckpointFormat(ABC):
    """One way checkpoints are written (``torch.save``, DCP, safetensors...): how to tell one
    by its layout, read the model state and step it holds, and audit a directory of them.

    Registered with ``chaos.ckptformat.register_format``; stateless (one instance per use)."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    """One line for the docs: what it reads."""
    pointer_doc: ClassVar[str] = "none"
    """What it treats as the "latest" pointer of a directory of checkpoints (docs)."""
    precedence: ClassVar[int] = 50
    """Detection order (lower first): the most specific layouts before the catch-alls."""

    @abstractmethod
    def detect(self, path: str) -> bool:
        """Whether ``path`` is laid out as this format writes (cheap: names, first bytes;
        never a full read). A torn checkpoint of this format is still detected where its
        layout shows, so that reading it says why it is unusable."""

    @abstractmethod
    def load(self, path: str) -> LoadedState:
        """The model state and step the checkpoint at ``path`` holds, read whole. Raises
        ValueError (or OSError) saying why it is unusable: torn, truncated, a missing shard."""

    def read(self, path: str, step: int | None = None) -> CheckpointImage:
        """The digest of its model state and its step (``step``: the saver's claim, taken
        when the checkpoint records none)."""
        loaded = self.load(path)
        return CheckpointImage(step=loaded.step if loaded.step is not None else step,
                               digest=state_dict_digest(loaded.model))

    # -- a directory of checkpoints ---------------------------------------------------------
    def pointer_names(self) -> tuple[str, ...]:
        """Entries of a directory that are its pointer, not checkpoints of their own."""
        return POINTER_FILES

    def pointer(self, directory: str, steps_by_name: Mapping[str, int]) -> int | None:
        """The step the directory's "latest" pointer names (see ``pointer_doc``)."""
        return None

    def audit(self, directory: str) -> CheckpointAudit:
        """Every entry of ``directory`` this format detects, read whole: complete (the step it
        records or its name carries) or torn (a finished name, one carrying a step, that does
        not read; an entry with no step in its name that does not read is a write in progress
        under a temporary name, not counted); and the pointer. An entry whose name says it is
        a write in progress (``temporary_name``: ``step-20.pt.tmp``) is not counted even when
        it reads whole: the job's loader never takes it, so a pointer naming its step dangles."""
        complete: list[int] = []
        torn: dict[int, str] = {}
        steps_by_name: dict[str, int] = {}
        skip = set(self.pointer_names())
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            if name.startswith(".") or name in skip or temporary_name(name) or not self.detect(path):
                continue
            named_step = step_from_name(name)
            try:
                loaded = self.load(path)
            except (OSError, ValueError) as exc:
                if named_step is not None:
                    torn[named_step] = str(exc)[:300]
                    steps_by_name[name] = named_step
                else:
                    log.info("%s: unreadable, and no step in its name: not a finished checkpoint", path)
                continue
            step = loaded.step if loaded.step is not None else named_step
            if step is None:
                log.info("%s: complete, but neither it nor its name says its step", path)
                continue
            complete.append(step)
            steps_by_name[name] = step
        return CheckpointAudit(complete=tuple(sorted(set(complete))), torn=torn,
                               pointer=self.pointer(directory, steps_by_name))
