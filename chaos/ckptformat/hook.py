"""A checkpoint format of the user's own: a function ``module:function`` that takes a
checkpoint's path and returns ``(step, state_dict)`` (step None: the checkpoint records
none), or raises ValueError saying why the checkpoint is unusable.

Named by ``TRAINCHAOS_CHECKPOINT_FORMAT=module:function`` in the controller's environment
(docs/checkers.md, "Checkpoint formats"); a format that should also be detected among the
others is registered as a ``CheckpointFormat`` instead (``chaos.ckptformat``).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from typing import Any

from chaos.ckptformat.base import POINTER_FILES, CheckpointFormat, text_pointer
from chaos.ckptformat.records import LoadedState

__all__ = ["HookFormat", "resolve_hook"]


def resolve_hook(spec: str) -> Callable[[str], Any]:
    """The function ``module:function`` names; ValueError saying what is wrong with it."""
    module_name, sep, function_name = spec.partition(":")
    if not sep or not module_name or not function_name:
        raise ValueError(f"{spec!r} is not module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"module {module_name!r} cannot be imported: {exc}") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        found = "not callable" if function is not None else "not found"
        raise ValueError(f"{function_name!r} in module {module_name!r}: {found}")
    return function


class HookFormat(CheckpointFormat):
    """Checkpoints read by the user's function; every entry of a directory is offered to it."""

    name = "hook"
    summary = "module:function of your own: takes the path, returns (step, state_dict)"
    pointer_doc = "a `latest`/`LATEST` file naming an entry (or a step), as for torch.save"

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.function = resolve_hook(spec)

    def detect(self, path: str) -> bool:
        return os.path.lexists(path)

    def load(self, path: str) -> LoadedState:
        result = self.function(path)
        if isinstance(result, LoadedState):
            return result
        if (not isinstance(result, tuple) or len(result) != 2 or not isinstance(result[1], Mapping)
                or not (result[0] is None or isinstance(result[0], int))):
            raise ValueError(f"checkpoint hook {self.spec} returned {type(result).__name__}, "
                             "not (step: int | None, state_dict: Mapping)")
        return LoadedState(step=result[0], model=result[1])

    def pointer_names(self) -> tuple[str, ...]:
        return POINTER_FILES

    def pointer(self, directory: str, steps_by_name: Mapping[str, int]) -> int | None:
        return text_pointer(directory, steps_by_name)
