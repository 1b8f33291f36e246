"""``workload: {megatron: {...}}``: a small Megatron-Core GPT trained per rank by torchrun on a
CUDA device.

megatron-core builds its parallel state on any process group (gloo here: one GPU cannot
hold two NCCL ranks), but its models allocate CUDA buffers, so the kind runs only where
CUDA is: validation refuses it, located at ``workload.megatron``, where megatron-core is not
installed (``pip install 'trainchaos[megatron]'``, pinned ``megatron-core==0.16.1``) or torch
sees no CUDA device. The bundled example (examples/megatron/train.py) checkpoints with
torch.distributed.checkpoint and reports steps, saves and loads and its final digest
through ``chaos.adapters.dcp``; in-process faults (bit flips in its weights, gradients,
optimizer state and activations, device faults) reach it through the probe like the
harness's. Its recovery model is a restart from the newest complete checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from chaos.workload import devices, register_workload
from chaos.workload.script import ScriptOptions, ScriptWorkload

if TYPE_CHECKING:
    from chaos.workload.base import Location, Workload, WorkloadSection

__all__ = ["MegatronOptions", "MegatronWorkload"]


@dataclass(frozen=True)
class MegatronOptions(ScriptOptions):
    """Options of ``workload.megatron``."""


@register_workload
class MegatronWorkload(ScriptWorkload):
    kind: ClassVar[str] = "megatron"
    stack: ClassVar[str] = "megatron"  # megatron-core installs the namespace package megatron (megatron.core)
    adapter_line: ClassVar[str] = "from chaos.adapters import dcp as chaos_dcp"
    extra: ClassVar[str] = "megatron"
    options_class: ClassVar[type[ScriptOptions]] = MegatronOptions
    example_steps: ClassVar[int] = 30
    summary: ClassVar[str] = ("a small Megatron-Core GPT on a CUDA device, run per rank by torchrun over "
                              "gloo; refused where megatron-core or CUDA is missing")
    options_intro: ClassVar[str] = (
        "A Megatron-Core script run per rank by torchrun; by default the bundled example (a "
        "GPTModel of 2 layers on the rank's GPU, tensor and pipeline parallel size 1, gloo), "
        "which saves a DCP checkpoint every few steps and resumes from the newest. Needs "
        "megatron-core (pip install 'trainchaos[megatron]') and a CUDA device.")
    options_description: ClassVar[str] = "Options of the megatron workload kind ({section})."
    key_doc: ClassVar[str] = ("A Megatron-Core training script run per rank by torchrun on a CUDA device; null "
                              "or {} runs the bundled example (examples/megatron/train.py).")

    @classmethod
    def validate(cls, doc: WorkloadSection | None, world_size: int | None
                 ) -> tuple[Workload | None, list[tuple[Location, str]]]:
        workload, problems = super().validate(doc, world_size)
        missing = devices.cuda_missing()
        if missing is not None:
            problems.append((("workload", cls.kind), f"Megatron-Core's models allocate CUDA buffers: {missing}"))
        return workload, problems

    def on_cuda(self, rank: int | None) -> bool:
        return True
