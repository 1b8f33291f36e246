"""``torch.save`` checkpoints: one file, or a directory of them (``model.pt``, ``optim.pt``...).

The model state is the mapping under ``model``, ``state_dict`` or ``model_state_dict``, or the
file itself when it is a state dict; in a directory, the file named ``model.*`` (or
``pytorch_model.*``) first, then the others in name order. The step is the first of
``step``/``global_step``/``iteration`` any loaded file records, else the name's
(``step-N``, ``checkpoint-N``...), else the saver's claim (``ckpt_save_end``'s ``step``).
Every file of a directory is loaded: one torn file makes the checkpoint torn, as it would
fail the job's own load.

Detected by name (``.pt``, ``.pth``, ``.bin``, ``.tar``) or by first bytes (a zip archive,
torch's format since 1.6, or a pickle); a directory by holding such files and none of the
other formats' marks. The catch-all: tried last.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Mapping
from typing import Any, ClassVar

from chaos.ckptformat import register_format
from chaos.ckptformat.base import (
    MODEL_KEYS,
    CheckpointFormat,
    files_with,
    model_state,
    recorded_step,
    step_from_name,
    text_pointer,
    unusable,
)
from chaos.ckptformat.records import LoadedState

__all__ = ["TorchSaveFormat", "load_torch_file"]

SUFFIXES = (".pt", ".pth", ".bin", ".tar")
_MAGIC = (b"PK\x03\x04", b"\x80")
"""A zip archive (torch.save's format) or a pickle (``_use_new_zipfile_serialization=False``)."""
_OTHER_FORMATS_MARKS = (".metadata", "trainer_state.json", "training_args.bin")


def load_torch_file(path: str, kind: str = "torch.save") -> Any:
    """``torch.load`` of the run's own file on the CPU; ValueError when it is torn."""
    import torch

    try:
        # The run's own file: a training loop saves argparse namespaces, numpy RNG states
        # and other pickled objects that weights_only refuses.
        return torch.load(path, map_location="cpu", weights_only=False)  # nosec B614
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except (RuntimeError, EOFError, pickle.UnpicklingError, ValueError, OSError, AttributeError,
            ImportError) as exc:
        raise unusable(kind, exc) from None


def _looks_saved(path: str) -> bool:
    if path.endswith(SUFFIXES):
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return False
    return head.startswith(_MAGIC)


@register_format
class TorchSaveFormat(CheckpointFormat):
    name: ClassVar[str] = "torch_save"
    summary: ClassVar[str] = ("a torch.save file, or a directory of them: the model state under "
                              "model/state_dict/model_state_dict or the file itself")
    pointer_doc: ClassVar[str] = ("a `latest`/`LATEST` text file (or symlink) naming an entry or a "
                                  "step; Megatron's `latest_checkpointed_iteration.txt`")
    precedence: ClassVar[int] = 90

    def detect(self, path: str) -> bool:
        if os.path.isdir(path):
            names = os.listdir(path)
            return (bool(files_with(path, SUFFIXES))
                    and not any(n in _OTHER_FORMATS_MARKS or n.endswith((".distcp", ".safetensors",
                                                                         ".safetensors.index.json"))
                                or n.startswith(("random_states_", "rng_state")) for n in names))
        return not path.endswith((".ckpt", ".safetensors")) and _looks_saved(path)

    def load(self, path: str) -> LoadedState:
        if not os.path.isdir(path):
            loaded = load_torch_file(path)
            model = model_state(loaded)
            if model is None:
                raise ValueError(f"{path} holds no model state (no {'/'.join(MODEL_KEYS)} mapping of "
                                 f"tensors, and no tensors at its top; keys: {_keys(loaded)})")
            return LoadedState(step=_step(loaded, path), model=model)
        names = files_with(path, SUFFIXES)
        if not names:
            raise ValueError(f"{path} holds no torch.save file")
        # The model's own file first; every file loaded (one torn file is a torn checkpoint).
        names.sort(key=lambda n: (not n.startswith(("model.", "model_state", "pytorch_model")), n))
        loaded_files = [load_torch_file(os.path.join(path, n)) for n in names]
        for loaded in loaded_files:
            if (model := model_state(loaded)) is not None:
                return LoadedState(step=_step(*loaded_files, path), model=model)
        raise ValueError(f"{path}: none of {', '.join(names)} holds a model state")

    def pointer(self, directory: str, steps_by_name: Mapping[str, int]) -> int | None:
        return text_pointer(directory, steps_by_name)


def _step(*found: Any) -> int | None:
    """The step the loaded files record, else the path's name (the last argument)."""
    *loaded, path = found
    step = recorded_step(*loaded)
    return step if step is not None else step_from_name(path)


def _keys(loaded: Any) -> str:
    return ", ".join(sorted(map(str, loaded))[:6]) if isinstance(loaded, Mapping) else type(loaded).__name__
