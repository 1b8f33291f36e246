"""``workload: {accelerate: {...}}``: an Accelerate training loop, run per rank by torchrun.

Accelerate's recovery model is a restart: torchrun restarts every rank of the group, and the
script resumes with ``Accelerator.load_state`` from its newest ``save_state`` folder. The
bundled example (examples/accelerate/train.py) reports steps, checkpoint saves and loads and
its final digest through the adapter ``chaos.adapters.accelerate``; a script without it can
be read by ``progress_regex``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from chaos.workload import register_workload
from chaos.workload.script import ScriptOptions, ScriptWorkload

__all__ = ["AccelerateOptions", "AccelerateWorkload"]


@dataclass(frozen=True)
class AccelerateOptions(ScriptOptions):
    """Options of ``workload.accelerate``."""


@register_workload
class AccelerateWorkload(ScriptWorkload):
    kind: ClassVar[str] = "accelerate"
    stack: ClassVar[str] = "accelerate"
    adapter_line: ClassVar[str] = "chaos.adapters.accelerate.instrument(accelerator, model=model, optimizer=optimizer)"
    extra: ClassVar[str] = "accelerate"
    preimports: ClassVar[tuple[str, ...]] = ("accelerate", "chaos.adapters.accelerate")
    options_class: ClassVar[type[ScriptOptions]] = AccelerateOptions
    summary: ClassVar[str] = ("an Accelerate training loop run per rank by torchrun, resuming with "
                              "load_state; reports through chaos.adapters.accelerate")
    options_intro: ClassVar[str] = (
        "An Accelerate script run per rank by torchrun (the Accelerator finds the ranks in "
        "torchrun's environment); by default the bundled example, which saves its state every "
        "few steps and resumes from the newest.")
    options_description: ClassVar[str] = "Options of the accelerate workload kind ({section})."
    checkpoint_format: ClassVar[str | None] = "hf"
    """``save_state`` folders (``chaos.ckptformat.hf``): ``model.safetensors`` or
    ``pytorch_model.bin``, complete once ``random_states_0.pkl`` is written."""
    key_doc: ClassVar[str] = ("An Accelerate training script run per rank by torchrun; null or {} runs the "
                              "bundled example (examples/accelerate/train.py).")
