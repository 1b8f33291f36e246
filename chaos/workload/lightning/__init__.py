"""``workload: {lightning: {...}}``: a Lightning Trainer script, run per rank by torchrun.

Lightning's recovery model is a restart: torchrun restarts every rank of the group, and the
script resumes from its last ``ModelCheckpoint`` (``ckpt_path="last"``). The bundled example
(examples/lightning/train.py) reports steps, checkpoint saves and loads and its final digest
through the adapter ``chaos.adapters.lightning.ChaosCallback``; a script without it can be
read by ``progress_regex``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from chaos.workload import register_workload
from chaos.workload.script import ScriptOptions, ScriptWorkload

__all__ = ["LightningOptions", "LightningWorkload"]


@dataclass(frozen=True)
class LightningOptions(ScriptOptions):
    """Options of ``workload.lightning``."""


@register_workload
class LightningWorkload(ScriptWorkload):
    kind: ClassVar[str] = "lightning"
    stack: ClassVar[str] = "lightning"
    adapter_line: ClassVar[str] = "lightning.Trainer(..., callbacks=[chaos.adapters.lightning.ChaosCallback()])"
    extra: ClassVar[str] = "lightning"
    preimports: ClassVar[tuple[str, ...]] = ("lightning.pytorch", "chaos.adapters.lightning")
    options_class: ClassVar[type[ScriptOptions]] = LightningOptions
    summary: ClassVar[str] = ("a Lightning Trainer script (DDP) run per rank by torchrun, resuming "
                              "from its last checkpoint; reports through chaos.adapters.lightning")
    options_intro: ClassVar[str] = (
        "A Lightning script run per rank by torchrun (its DDP strategy finds the ranks in "
        "torchrun's environment); by default the bundled example, which checkpoints every few "
        "steps and resumes from the last checkpoint.")
    options_description: ClassVar[str] = "Options of the lightning workload kind ({section})."
    checkpoint_format: ClassVar[str | None] = "lightning"
    """A ``.ckpt``'s ``state_dict`` and ``global_step`` (``chaos.ckptformat.lightning``): the
    LightningModule's own, as the adapter's twin hashes it at every step."""
    key_doc: ClassVar[str] = ("A Lightning Trainer script run per rank by torchrun (DDP); null or {} runs "
                              "the bundled example (examples/lightning/train.py).")
