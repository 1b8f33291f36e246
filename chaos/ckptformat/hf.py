"""Hugging Face checkpoint folders: the Trainer's ``checkpoint-<global_step>/`` and
Accelerate's ``save_state`` folder.

- Trainer (``Trainer._save_checkpoint``): the model as ``save_pretrained`` writes it
  (``model.safetensors``, or ``pytorch_model.bin``; sharded with ``*.index.json``), then
  ``optimizer.pt``, ``scheduler.pt``, ``rng_state*.pth``, ``training_args.bin`` and
  ``trainer_state.json``, whose ``global_step`` is the step. The folder is complete when the
  weights read whole and ``trainer_state.json`` is there (written after the weights: a
  folder without it is one the Trainer's resume refuses).
- Accelerate (``Accelerator.save_state``): ``model.safetensors`` (``pytorch_model.bin`` with
  ``safe_serialization=False``; a second model ``model_1.*``, not read), ``optimizer.bin``,
  ``scheduler.bin``, ``sampler.bin``, then every process's ``random_states_<i>.pkl``. It
  records no training step (``random_states``' ``step`` counts the Accelerator's own
  steps): the step is the folder's name's (``step_40``), else the saver's claim. Complete
  when the weights read whole and ``random_states_0.pkl`` (the main process's last file) is
  there.

Tied weights: ``save_pretrained`` leaves out a weight tied to another (GPT-2's and most
small language models' ``lm_head.weight``, the token embedding's tie), where the live
model's ``state_dict`` holds both names. The folder's ``config.json`` names the model's class
(``architectures``) and whether its embeddings are tied; the class's ``_tied_weights_keys``
(transformers 5: tied name -> source name) says which weight each left-out name repeats, and
the reader puts it back, so the checkpoint is keyed as the live model is (the freshness
checker compares their digests). transformers is imported for it only, in the process that
reads such a folder; where it is not installed (or names no source: transformers 4's list
form) nothing is added and the digest differs from the live model's.

Neither keeps a pointer: the Trainer resumes from the highest ``checkpoint-N``, Accelerate's
``load_state()`` from the newest folder; the Trainer's ``best_model_checkpoint`` names the
best checkpoint, not the latest, and is not taken as one.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from collections.abc import Mapping
from typing import Any, ClassVar

from chaos.ckptformat import register_format
from chaos.ckptformat.base import CheckpointFormat, step_from_name
from chaos.ckptformat.records import LoadedState
from chaos.ckptformat.safetensors import INDEX_SUFFIX, load_safetensors
from chaos.ckptformat.torch_save import load_torch_file

__all__ = ["HfFolderFormat"]

TRAINER_STATE = "trainer_state.json"
SAFE_WEIGHTS = "model.safetensors"
WEIGHTS = "pytorch_model.bin"
WEIGHTS_INDEX = "pytorch_model.bin.index.json"
ACCELERATE_LAST = "random_states_0.pkl"
CONFIG = "config.json"
_TRAINER_MARKS = (TRAINER_STATE, "training_args.bin", "optimizer.pt", "scheduler.pt")
_ACCELERATE_MARKS = ("optimizer.bin", "scheduler.bin", "sampler.bin")


def _is_trainer(names: list[str]) -> bool:
    return any(n in _TRAINER_MARKS or n.startswith("rng_state") for n in names)


def _is_accelerate(names: list[str]) -> bool:
    return any(n in _ACCELERATE_MARKS or n.startswith("random_states_") for n in names)


def _weights(path: str, names: list[str]) -> dict[str, Any]:
    """The model's state dict, as save_pretrained / save_state wrote it."""
    if SAFE_WEIGHTS in names or any(n.endswith(INDEX_SUFFIX) for n in names):
        if SAFE_WEIGHTS in names:  # not the shards' glob: a second model's model_1.safetensors stays out
            return load_safetensors(os.path.join(path, SAFE_WEIGHTS))[0]
        return load_safetensors(path)[0]
    if WEIGHTS in names:
        loaded = load_torch_file(os.path.join(path, WEIGHTS))
        if not isinstance(loaded, dict):
            raise ValueError(f"{WEIGHTS} in {path} is not a state dict")
        return loaded
    if WEIGHTS_INDEX in names:
        return _torch_shards(path)
    raise ValueError(f"{path} holds no model weights ({SAFE_WEIGHTS}, {WEIGHTS} or a sharded index)")


def _torch_shards(path: str) -> dict[str, Any]:
    try:
        with open(os.path.join(path, WEIGHTS_INDEX), encoding="utf-8") as fh:
            weight_map = dict(json.load(fh)["weight_map"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a complete index {WEIGHTS_INDEX}: {type(exc).__name__}: {exc}") from None
    state: dict[str, Any] = {}
    for shard in sorted(set(weight_map.values())):
        if not os.path.isfile(os.path.join(path, str(shard))):
            raise ValueError(f"missing shard {shard} (named by {WEIGHTS_INDEX})")
        state.update(load_torch_file(os.path.join(path, str(shard))))
    if missing := sorted(set(weight_map) - set(state)):
        raise ValueError(f"{len(missing)} tensors {WEIGHTS_INDEX} names are in no shard (first: {missing[0]})")
    return state


def _retied(path: str, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with the tied weights save_pretrained left out put back (module docstring)."""
    try:
        with open(os.path.join(path, CONFIG), encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError):
        return state
    if not isinstance(config, dict) or config.get("tie_word_embeddings") is False:
        return state
    for arch in config.get("architectures") or ():
        ties = {target: source for target, source in _tied_keys(str(arch)).items()
                if target not in state and source in state}
        if ties:
            return {**state, **{target: state[source] for target, source in ties.items()}}
    return state


@functools.cache
def _tied_keys(arch: str) -> dict[str, str]:
    """Tied name -> source name of transformers' model class ``arch`` ({} unknown)."""
    if importlib.util.find_spec("transformers") is None:
        return {}
    import transformers

    try:
        keys = getattr(getattr(transformers, arch), "_tied_weights_keys", None)
    except (AttributeError, ImportError, RuntimeError):  # not a class of transformers: nothing tied
        return {}
    return {str(k): str(v) for k, v in keys.items()} if isinstance(keys, Mapping) else {}


def _global_step(path: str) -> int:
    try:
        with open(os.path.join(path, TRAINER_STATE), encoding="utf-8") as fh:
            step = json.load(fh)["global_step"]
    except FileNotFoundError:
        raise ValueError(f"{path}: no {TRAINER_STATE} (the Trainer writes it after the weights; "
                         "its resume refuses a folder without it)") from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"not a complete {TRAINER_STATE}: {type(exc).__name__}: {exc}") from None
    if not isinstance(step, int):
        raise ValueError(f"{TRAINER_STATE}'s global_step is {step!r}, not a step")
    return step


@register_format
class HfFolderFormat(CheckpointFormat):
    name: ClassVar[str] = "hf"
    summary: ClassVar[str] = ("an HF Trainer checkpoint-N/ folder (trainer_state.json's global_step) or "
                              "an Accelerate save_state folder (random_states_*.pkl): its model weights")
    pointer_doc: ClassVar[str] = ("none (the Trainer resumes from the highest checkpoint-N; "
                                  "best_model_checkpoint is the best, not the latest)")
    precedence: ClassVar[int] = 30

    def detect(self, path: str) -> bool:
        if not os.path.isdir(path):
            return False
        names = os.listdir(path)
        return _is_trainer(names) or _is_accelerate(names)

    def load(self, path: str) -> LoadedState:
        names = sorted(os.listdir(path))
        if _is_trainer(names):
            step: int | None = _global_step(path)
        else:
            if ACCELERATE_LAST not in names:
                raise ValueError(f"{path}: no {ACCELERATE_LAST} (save_state writes it last: the save did not end)")
            step = step_from_name(path)
        return LoadedState(step=step, model=_retied(path, _weights(path, names)))

    def pointer_names(self) -> tuple[str, ...]:
        return ()

