"""``workload: {nvrx_inprocess: {...}}``: a training function wrapped by NVIDIA's in-process
restart (``nvidia_resiliency_ext.inprocess.Wrapper``), run per rank by torchrun.

The recovery model is a restart *in the process*: when the function raises on one rank, or a
rank stops making progress, the wrapper aborts the process group on every rank and calls the
function again; it reloads its latest checkpoint and trains on, without a new process, a new
rendezvous or a new import of torch. A rank whose process dies is torchrun's to restart:
the wrapper cannot bring it back, and restarts the survivors in place meanwhile, so a lost
rank costs two restarts (docs/stacks.md). The bundled
example (examples/nvrx_inprocess/train.py) is the DCP example's training function wrapped; it
reports through ``chaos.adapters.nvrx`` (each re-entry is the rank's next incarnation) and
``chaos.adapters.dcp``. On CPU the survivors of a fault wait out the gloo timeout
(``--pg-timeout``, 5 s by default) before the restart reaches them: gloo cannot be aborted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from chaos.workload import register_workload
from chaos.workload.script import ScriptOptions, ScriptWorkload

__all__ = ["NvrxInprocessOptions", "NvrxInprocessWorkload"]


@dataclass(frozen=True)
class NvrxInprocessOptions(ScriptOptions):
    """Options of ``workload.nvrx_inprocess``."""


@register_workload
class NvrxInprocessWorkload(ScriptWorkload):
    kind: ClassVar[str] = "nvrx_inprocess"
    stack: ClassVar[str] = "nvidia_resiliency_ext"
    adapter_line: ClassVar[str] = "with chaos.adapters.nvrx.iteration(call_wrapper): around the wrapped function's body"
    extra: ClassVar[str] = "nvrx"
    preimports: ClassVar[tuple[str, ...]] = ("nvidia_resiliency_ext.inprocess", "chaos.adapters.nvrx")
    options_class: ClassVar[type[ScriptOptions]] = NvrxInprocessOptions
    summary: ClassVar[str] = ("a training function wrapped by NVIDIA's in-process restart "
                              "(nvidia_resiliency_ext inprocess.Wrapper), run per rank by torchrun; "
                              "reports through chaos.adapters.nvrx")
    options_intro: ClassVar[str] = (
        "A script whose training function is wrapped by nvidia_resiliency_ext's "
        "inprocess.Wrapper, run per rank by torchrun; by default the bundled example (the dcp "
        "example's function, wrapped), which restarts in place on an exception or a hang and "
        "resumes from its latest DCP checkpoint.")
    options_description: ClassVar[str] = "Options of the nvrx_inprocess workload kind ({section})."
    key_doc: ClassVar[str] = ("A training function wrapped by NVIDIA's in-process restart (inprocess.Wrapper), "
                              "run per rank by torchrun; null or {} runs the bundled example "
                              "(examples/nvrx_inprocess/train.py).")
    env: ClassVar[dict[str, str]] = {
        **ScriptWorkload.env,
        # The wrapper polls its store with Store.wait, whose every expected timeout torch logs
        # as a warning (NVIDIA's usage guide, known issues).
        "TORCH_CPP_LOG_LEVEL": "error",
    }
