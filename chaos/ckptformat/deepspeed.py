"""DeepSpeed checkpoints: ``engine.save_checkpoint``'s tag folders (``global_step<N>/``) beside
DeepSpeed's ``latest`` file, which names the newest tag.

A tag folder holds the model states (``mp_rank_00_model_states.pt``; under ZeRO-3 one
``zero_pp_rank_<r>_mp_rank_00_model_states.pt`` per data-parallel rank) and, under ZeRO, one
optimizer partition per data-parallel rank (``[bf16_]zero_pp_rank_<r>_mp_rank_00_optim_states.pt``):
each rank writes its own, so a folder is complete only when every rank's partition of the
``dp_world_size`` its model states record is there and reads. The model state is the model
states' ``module`` for ZeRO 0-2 (whole there), and for ZeRO-3 (where ``module`` holds empty
placeholders) the fp32 weights DeepSpeed's own ``zero_to_fp32`` rebuilds from every rank's
partition; the step is the recorded ``global_steps``. The ``latest`` file is DeepSpeed's
pointer, a tag name (``chaos.ckptformat.base.text_pointer``).

deepspeed is imported only to rebuild a ZeRO-3 state, in the process that reads one.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from chaos.ckptformat import register_format
from chaos.ckptformat.base import (
    CheckpointFormat,
    model_state,
    step_from_name,
    text_pointer,
    unusable,
)
from chaos.ckptformat.records import LoadedState

__all__ = ["DeepSpeedFormat", "missing_partitions"]

_MODEL_STATES = re.compile(r"^(?:zero_pp_rank_(\d+)_)?mp_rank_(\d+)_model_states\.pt$")
_OPTIM_STATES = re.compile(r"^(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")


def _names(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def missing_partitions(path: str, dp_world_size: int, zero3: bool) -> list[str]:
    """The files a complete tag folder of ``dp_world_size`` ranks must have and ``path``
    lacks: every rank's optimizer partition (ZeRO), and under ZeRO-3 every rank's model
    states."""
    names = _names(path)
    optim = {int(m.group(1)) for n in names if (m := _OPTIM_STATES.match(n))}
    model = {int(m.group(1)) for n in names if (m := _MODEL_STATES.match(n)) and m.group(1) is not None}
    missing = [f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in range(dp_world_size) if r not in optim]
    if zero3:
        missing += [f"zero_pp_rank_{r}_mp_rank_00_model_states.pt" for r in range(dp_world_size) if r not in model]
    return sorted(missing)


def _load(path: str) -> Any:
    import torch

    try:
        # The run's own file: DeepSpeed's model and ZeRO state files pickle more than tensors
        # (its config, the client state), which weights_only refuses.
        return torch.load(path, map_location="cpu", weights_only=False)  # nosec B614
    except Exception as exc:  # torch.load's errors for a torn file are of many types
        raise unusable("DeepSpeed", exc) from None


def _zero_fp32_state(path: str) -> dict[str, Any]:
    """ZeRO's fp32 weights rebuilt from every rank's partition, by DeepSpeed's own zero_to_fp32
    (its progress lines silenced)."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            state: dict[str, Any] = get_fp32_state_dict_from_zero_checkpoint(
                os.path.dirname(path), tag=os.path.basename(path))
    except Exception as exc:  # a torn partition: pickle, zip, shape or count errors
        raise unusable("DeepSpeed ZeRO", exc) from None
    return state


@register_format
class DeepSpeedFormat(CheckpointFormat):
    name: ClassVar[str] = "deepspeed"
    summary: ClassVar[str] = ("a DeepSpeed save_checkpoint tag folder (*mp_rank_*_model_states.pt, "
                              "zero_pp_rank_*_optim_states.pt): complete with every ZeRO partition; "
                              "ZeRO-3's weights rebuilt by zero_to_fp32")
    pointer_doc: ClassVar[str] = "DeepSpeed's `latest` text file, naming the newest tag folder"
    precedence: ClassVar[int] = 10

    def detect(self, path: str) -> bool:
        if not os.path.isdir(path):
            return False
        return any(_MODEL_STATES.match(n) or _OPTIM_STATES.match(n) for n in _names(path))

    def load(self, path: str) -> LoadedState:
        names = _names(path)
        model_files = [n for n in names if _MODEL_STATES.match(n)]
        if not model_files:
            raise ValueError(f"not a complete DeepSpeed checkpoint: {path} has no model states file")
        states = _load(os.path.join(path, model_files[0]))
        if not isinstance(states, Mapping):
            raise ValueError(f"not a DeepSpeed checkpoint: {model_files[0]} holds {type(states).__name__}")
        zero3 = any(_MODEL_STATES.match(n).group(1) is not None for n in model_files)  # type: ignore[union-attr]
        zero = zero3 or any(_OPTIM_STATES.match(n) for n in names)
        if zero:
            world = states.get("dp_world_size")
            if not isinstance(world, int) or world < 1:
                raise ValueError(f"not a DeepSpeed checkpoint: {model_files[0]} records no dp_world_size")
            if missing := missing_partitions(path, world, zero3):
                raise ValueError(f"not a complete DeepSpeed checkpoint: {len(missing)} of the "
                                 f"{world} ranks' ZeRO partition files missing ({', '.join(missing[:4])})")
        model = _zero_fp32_state(path) if zero3 else model_state(states.get("module"))
        if model is None:
            raise ValueError(f"DeepSpeed checkpoint {path} holds no model state (no module)")
        step = states.get("global_steps")
        return LoadedState(step=step if isinstance(step, int) else step_from_name(path), model=model)

    def pointer(self, directory: str, steps_by_name: Mapping[str, int]) -> int | None:
        return text_pointer(directory, steps_by_name)
