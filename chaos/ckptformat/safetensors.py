"""safetensors checkpoints: a ``*.safetensors`` file, or a directory holding ``model.safetensors``
or shards with their index (``model.safetensors.index.json``: ``weight_map`` tensor -> shard,
as ``save_pretrained`` and Accelerate's ``save_model`` write them).

The file is the state dict itself (keys as the saver's ``state_dict()``; a saver that drops
tied duplicates, as ``save_pretrained`` does, holds fewer tensors than the twin hashes).
The step is a ``step``/``global_step``/``iteration`` entry of the file's metadata, else the
name's, else the saver's claim. A shard the index names that is missing, a tensor the index
names that its shard lacks, a truncated file: not complete.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, ClassVar

from chaos.ckptformat import register_format
from chaos.ckptformat.base import (
    STEP_KEYS,
    CheckpointFormat,
    files_with,
    step_from_name,
    text_pointer,
    unusable,
)
from chaos.ckptformat.records import LoadedState

__all__ = ["INDEX_SUFFIX", "SafetensorsFormat", "load_safetensors"]

SUFFIX = ".safetensors"
INDEX_SUFFIX = ".safetensors.index.json"
SINGLE = "model.safetensors"
_OTHER_FORMATS_MARKS = (".metadata", "trainer_state.json", "training_args.bin", "optimizer.pt", "optimizer.bin",
                        "scheduler.pt")


def _load_file(path: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The tensors and metadata of one safetensors file; ValueError when it is torn."""
    from safetensors import safe_open

    try:
        with safe_open(path, framework="pt", device="cpu") as fh:
            return {key: fh.get_tensor(key) for key in fh.keys()}, dict(fh.metadata() or {})
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except Exception as exc:  # noqa: BLE001 - the Rust library's SafetensorError is a bare Exception
        raise unusable("safetensors", exc) from None


def load_safetensors(path: str) -> tuple[dict[str, Any], int | None]:
    """The state dict of a safetensors file or directory (shards merged as the index maps
    them) and the step its metadata records."""
    if not os.path.isdir(path):
        tensors, metadata = _load_file(path)
        return tensors, _metadata_step(metadata)
    index = files_with(path, (INDEX_SUFFIX,))
    if index:
        return _load_sharded(path, index[0])
    names = [SINGLE] if os.path.isfile(os.path.join(path, SINGLE)) else files_with(path, (SUFFIX,))
    if not names:
        raise ValueError(f"{path} holds no safetensors file")
    state: dict[str, Any] = {}
    step = None
    for name in names:
        tensors, metadata = _load_file(os.path.join(path, name))
        state.update(tensors)
        step = step if step is not None else _metadata_step(metadata)
    return state, step


def _load_sharded(path: str, index_name: str) -> tuple[dict[str, Any], int | None]:
    try:
        with open(os.path.join(path, index_name), encoding="utf-8") as fh:
            weight_map = json.load(fh)["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError("weight_map is not a mapping")
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"not a complete safetensors index {index_name}: {type(exc).__name__}: {exc}") from None
    state: dict[str, Any] = {}
    step = None
    for shard in sorted(set(weight_map.values())):
        shard_path = os.path.join(path, str(shard))
        if not os.path.isfile(shard_path):
            raise ValueError(f"missing shard {shard} (named by {index_name})")
        tensors, metadata = _load_file(shard_path)
        state.update(tensors)
        step = step if step is not None else _metadata_step(metadata)
    missing = sorted(set(weight_map) - set(state))
    if missing:
        raise ValueError(f"{len(missing)} tensors {index_name} names are in no shard (first: {missing[0]})")
    return state, step


def _metadata_step(metadata: Mapping[str, str]) -> int | None:
    for key in STEP_KEYS:
        value = metadata.get(key, "")
        if value.isdigit():
            return int(value)
    return None


@register_format
class SafetensorsFormat(CheckpointFormat):
    name: ClassVar[str] = "safetensors"
    summary: ClassVar[str] = ("a *.safetensors file, or a directory of model.safetensors or shards "
                              "with model.safetensors.index.json")
    pointer_doc: ClassVar[str] = "a `latest`/`LATEST` text file (or symlink) naming an entry or a step"
    precedence: ClassVar[int] = 40

    def detect(self, path: str) -> bool:
        if not os.path.isdir(path):
            return path.endswith(SUFFIX)
        names = os.listdir(path)
        return (any(n.endswith((SUFFIX, INDEX_SUFFIX)) for n in names)
                and not any(n in _OTHER_FORMATS_MARKS or n.startswith(("random_states_", "rng_state"))
                            or n.endswith(".distcp") for n in names))

    def load(self, path: str) -> LoadedState:
        state, step = load_safetensors(path)
        return LoadedState(step=step if step is not None else step_from_name(path), model=state)

    def pointer(self, directory: str, steps_by_name: Mapping[str, int]) -> int | None:
        return text_pointer(directory, steps_by_name)
