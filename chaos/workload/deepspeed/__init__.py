"""``workload: {deepspeed: {...}}``: a DeepSpeed training loop (ZeRO stage 0-3), run per rank by
torchrun.

DeepSpeed's recovery model is a restart: torchrun restarts every rank of the group, and the
script resumes with ``engine.load_checkpoint`` from the tag DeepSpeed's ``latest`` file names.
The bundled example (examples/deepspeed/train.py; ``args: [--zero-stage, "3"]`` for ZeRO-3)
reports steps, the samples each step trains, checkpoint saves and loads with their tags and
its final digest through ``chaos.adapters.deepspeed``; a script without it can be read by
``progress_regex``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from chaos.workload import register_workload
from chaos.workload.script import ScriptOptions, ScriptWorkload

__all__ = ["DeepSpeedOptions", "DeepSpeedWorkload"]


@dataclass(frozen=True)
class DeepSpeedOptions(ScriptOptions):
    """Options of ``workload.deepspeed``."""


@register_workload
class DeepSpeedWorkload(ScriptWorkload):
    kind: ClassVar[str] = "deepspeed"
    stack: ClassVar[str] = "deepspeed"
    adapter_line: ClassVar[str] = "engine = chaos.adapters.deepspeed.instrument(engine)"
    extra: ClassVar[str] = "deepspeed"
    # Not deepspeed itself: it picks its accelerator as it is imported (DS_ACCELERATOR,
    # which the script may set first), so each rank imports it.
    preimports: ClassVar[tuple[str, ...]] = ("chaos.adapters.deepspeed",)
    options_class: ClassVar[type[ScriptOptions]] = DeepSpeedOptions
    summary: ClassVar[str] = ("a DeepSpeed engine's loop (ZeRO 0-3) run per rank by torchrun, resuming with "
                              "load_checkpoint; reports through chaos.adapters.deepspeed")
    options_intro: ClassVar[str] = (
        "A DeepSpeed script run per rank by torchrun (the engine finds the ranks in torchrun's "
        "environment); by default the bundled example (CPU, gloo, ZeRO stage by --zero-stage), "
        "which calls save_checkpoint every few steps and resumes from the tag `latest` names.")
    options_description: ClassVar[str] = "Options of the deepspeed workload kind ({section})."
    checkpoint_format: ClassVar[str | None] = "deepspeed"
    """``save_checkpoint`` tag folders (``chaos.ckptformat.deepspeed``): complete with every
    data-parallel rank's ZeRO partition; ZeRO-3's weights rebuilt by DeepSpeed's zero_to_fp32."""
    key_doc: ClassVar[str] = ("A DeepSpeed training script run per rank by torchrun; null or {} runs the "
                              "bundled example (examples/deepspeed/train.py).")
