"""A workload kind from outside trainchaos, as another team would ship one: ``toy_workload``
(``tests/integration/test_toy_workload.py`` loads it through the ``trainchaos.workloads``
entry point of a dist-info the test writes, and runs it for real). Nothing of trainchaos was
edited for it; everything it adds is here:

- the kind, ``ToyWorkload``: a scenario names it as ``workload: {toy_workload: {...}}``;
- its options, ``ToyOptions``: a pydantic model, so the scenario schema validates them
  (each problem located under ``workload.toy_workload``), ``trainchaos schema`` lists them
  and the reference documents them, like a built-in kind's;
- its job, ``train.py`` beside this module: a plain script torchrun runs per rank, which
  trains nothing but reports its steps through ``chaos.probe`` and resumes from a file of
  its own after a restart.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from pydantic import Field

from chaos.model import scenario as records
from chaos.model.types import StrictModel
from chaos.workload import Launch, TorchrunPerNode, Workload, WorkloadSection, register_workload
from chaos.workload.base import Location
from chaos.workload.logprogress import LogProgress

__all__ = ["SCRIPT", "ToyOptions", "ToyWorkload"]

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")


class ToyOptions(StrictModel):
    """Options of the toy workload."""

    key_noun = "toy_workload option"

    steps: int = Field(20, ge=1, le=1000)
    """The step each rank trains to."""
    step_sleep_s: float = Field(0.1, ge=0, le=5)
    """Seconds each step takes (its pretend compute)."""
    resume_every: int = Field(5, ge=1, le=1000)
    """Steps between two saves of the rank's resume file."""


@register_workload
class ToyWorkload(Workload):
    kind: ClassVar[str] = "toy_workload"
    summary: ClassVar[str] = "a test's pretend job from a plugin: steps reported through the probe"
    options_intro: ClassVar[str] = "A plugin's kind (tests/integration/plugins/toy_workload)."

    @classmethod
    def own_key_field(cls) -> dict[str, Any]:
        return {cls.kind: (ToyOptions | None, Field(None, description=(
            "The toy job of a plugin: a plain script per rank under torchrun, reporting through "
            "chaos.probe; null or {} takes the defaults.")))}

    @classmethod
    def validate(cls, doc: WorkloadSection | None, world_size: int | None
                 ) -> tuple[Workload | None, list[tuple[Location, str]]]:
        options: ToyOptions = (doc.toy_workload if doc is not None else None) or ToyOptions()
        problems: list[tuple[Location, str]] = []
        if options.resume_every > options.steps:
            # Across two options: the kind's own check, located at its key like the schema's.
            problems.append((("workload", cls.kind, "resume_every"),
                             f"{options.resume_every} is more than steps ({options.steps}): the job "
                             "would never save its resume file"))
        return cls(records.Workload(kind=cls.kind, options=options.model_dump())), problems

    @property
    def options(self) -> ToyOptions:
        return ToyOptions.model_validate(self.spec.options or {})

    @property
    def steps(self) -> int:
        return self.options.steps

    def steps_text(self) -> str:
        return f"the toy job trains {self.steps} steps (workload.toy_workload.steps)"

    def launch(self, run_dir: str, seed: int) -> Launch:
        opts = self.options
        argv = (SCRIPT, "--steps", str(opts.steps), "--sleep", f"{opts.step_sleep_s:g}",
                "--resume-every", str(opts.resume_every), "--state-dir", run_dir)
        return Launch(TorchrunPerNode(argv), steps_target=opts.steps, env={"PYTHONUNBUFFERED": "1"})

    def progress(self, events_dir: str) -> LogProgress:
        """Every worker exit the agents report (its steps come through the probe)."""
        return LogProgress(None, events_dir, report_exit_codes=True)
