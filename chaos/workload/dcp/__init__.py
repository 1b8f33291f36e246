"""``workload: {dcp: {...}}``: a plain DDP or FSDP2 script checkpointing with
``torch.distributed.checkpoint``, run per rank by torchrun.

The recovery model is a restart: torchrun restarts every rank of the group, and the script
resumes from the DCP checkpoint its ``latest`` marker names (a smaller group after a lost
node loads the same checkpoint: DCP reshards on load). The bundled example
(examples/dcp/train.py; ``args: [--parallel, fsdp2]`` for FSDP2) reports steps, checkpoint
saves and loads and its final digest through ``chaos.adapters.dcp``; a script without it can
be read by ``progress_regex``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from chaos.workload import register_workload
from chaos.workload.script import ScriptOptions, ScriptWorkload

__all__ = ["DcpOptions", "DcpWorkload"]


@dataclass(frozen=True)
class DcpOptions(ScriptOptions):
    """Options of ``workload.dcp``."""


@register_workload
class DcpWorkload(ScriptWorkload):
    kind: ClassVar[str] = "dcp"
    stack: ClassVar[str] = "torch"  # DCP is torch's own: its presence is torch's
    adapter_line: ClassVar[str] = ("from chaos.adapters import dcp as chaos_dcp; "
                                   "chaos_dcp.started(); chaos_dcp.step_end(step, loss)")
    extra: ClassVar[str] = "dev"
    preimports: ClassVar[tuple[str, ...]] = ("torch.distributed.checkpoint", "chaos.adapters.dcp")
    options_class: ClassVar[type[ScriptOptions]] = DcpOptions
    summary: ClassVar[str] = ("a DDP/FSDP2 script checkpointing with torch.distributed.checkpoint, "
                              "run per rank by torchrun; reports through chaos.adapters.dcp")
    options_intro: ClassVar[str] = (
        "A DDP or FSDP2 script run per rank by torchrun that checkpoints with "
        "torch.distributed.checkpoint; by default the bundled example, which saves every few "
        "steps behind an atomic `latest` marker and resumes from it.")
    options_description: ClassVar[str] = "Options of the dcp workload kind ({section})."
    checkpoint_format: ClassVar[str | None] = "dcp"
    """Read whole in the controller without a process group (``chaos.ckptformat.dcp``): the
    ``model`` entry the bundled example saves, which its adapter's ``step_end(..., model=)``
    hashes the same way in the twin."""
    key_doc: ClassVar[str] = ("A DDP/FSDP2 script checkpointing with torch.distributed.checkpoint, run per "
                              "rank by torchrun; null or {} runs the bundled example (examples/dcp/train.py).")
