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

from chaos import probe
from chaos.workload import register_workload
from chaos.workload.base import CheckpointImage
from chaos.workload.script import ScriptOptions, ScriptWorkload

__all__ = ["LightningOptions", "LightningWorkload"]


@dataclass(frozen=True)
class LightningOptions(ScriptOptions):
    """Options of ``workload.lightning``."""


@register_workload
class LightningWorkload(ScriptWorkload):
    kind: ClassVar[str] = "lightning"
    stack: ClassVar[str] = "lightning"
    extra: ClassVar[str] = "lightning"
    options_class: ClassVar[type[ScriptOptions]] = LightningOptions
    summary: ClassVar[str] = ("a Lightning Trainer script (DDP) run per rank by torchrun, resuming "
                              "from its last checkpoint; reports through chaos.adapters.lightning")
    options_intro: ClassVar[str] = (
        "A Lightning script run per rank by torchrun (its DDP strategy finds the ranks in "
        "torchrun's environment); by default the bundled example, which checkpoints every few "
        "steps and resumes from the last checkpoint.")
    options_description: ClassVar[str] = "Options of the lightning workload kind ({section})."
    key_doc: ClassVar[str] = ("A Lightning Trainer script run per rank by torchrun (DDP); null or {} runs "
                              "the bundled example (examples/lightning/train.py).")

    def read_checkpoint(self, path: str) -> CheckpointImage | None:
        """A Lightning ``.ckpt`` file: its ``global_step`` and the digest of its
        ``state_dict`` (the LightningModule's own, as the adapter's twin hashes it at every
        step). None for a path that is not a ``.ckpt`` file (a script that saves otherwise)."""
        if not path.endswith(".ckpt"):
            return None
        import pickle

        import torch

        try:
            # The run's own file, written by Lightning with pickled loop and callback states
            # that weights_only refuses.
            checkpoint = torch.load(path, map_location="cpu", weights_only=False)
        except FileNotFoundError:
            raise
        except (RuntimeError, EOFError, pickle.UnpicklingError, ValueError) as exc:
            raise ValueError(f"not a complete Lightning checkpoint: {type(exc).__name__}: {exc}"[:300]) from None
        if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
            raise ValueError(f"{path} holds no Lightning state_dict")
        return CheckpointImage(step=int(checkpoint.get("global_step", -1)),
                               digest=probe.state_dict_digest(checkpoint["state_dict"]))
