"""The ``Workload`` interface: everything the engine may know about the training job.

A workload kind is the job as a scenario names it (``workload: {harness: {...}}``,
``workload: {command: ...}``). Its class is the one place that knows how the job is
launched, how its progress, checkpoints and final state are read, which tensors it has, and
how its options are validated and documented. The engine (runner, schema, storage mounts,
fault checks) asks the instance; nothing outside ``chaos.workload`` imports the job's own
code (``harness``), and the job reaches the engine only through ``chaos.probe`` and the
names in ``chaos.contract``.

What a kind declares, and who asks:

- ``section_fields`` (``chaos.schema.workload_doc``: the ``workload`` section of a scenario,
  its JSON Schema and reference): the keys it owns under ``workload:``, its own key by
  default (``workload: {KIND: options}``); ``misplaced_key`` words a key of another kind
  written beside it;
- ``replica_groups`` (target checks): whether ``{replica_group: G}`` names a failure domain
  of its job; ``resource_modules`` (``chaos.runfiles.resources``): the modules of the
  run-scoped resource kinds its launch acquires, so that cleanup knows them;
- ``validate`` (``trainchaos validate``, ``chaos.schema.checks``): the problems of the
  scenario's ``workload`` section, located and worded for its author;
- ``options_type`` / ``option_docs`` / ``options_intro`` (``trainchaos schema``, the
  reference in docs/scenario.md): the options as a dataclass with a docstring per field;
- ``steps`` / ``steps_text`` (trigger checks, progress): the step it trains to;
- ``tensor_catalog`` (bit-flip validation): the tensors a rank holds, when knowable
  outside the job;
- ``storage`` (storage faults, their mounts): where it keeps checkpoints and data;
- ``read_checkpoint`` (the checkpoint freshness checker, ``chaos.runner.freshness``): what a
  checkpoint it saved holds; ``audit_checkpoints`` (the crash-point sweep,
  ``chaos.runner.crashsweep``): which checkpoints a crash left complete, torn, pointed at;
- ``launch`` (the runner): what the launcher runs per rank, and the launcher itself;
- ``progress`` (the runner): the reader of its progress that the probe does not report;
- ``detection_sources`` (the metrics): where its detections can come from, so that a fault
  nobody could have reported is detection ``unknown``, not ``undetected``;
- ``finished`` (the runner): whether the job ended its training, given what it reported.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pydantic import Field

from chaos.ckptformat.records import CheckpointAudit, CheckpointImage
from chaos.metrics.records import DetectionSources
from chaos.workload.logprogress import LogProgress
from chaos.workload.torchrun import TorchrunPerNode

if TYPE_CHECKING:
    from chaos.model import scenario as records

__all__ = ["CheckpointAudit", "CheckpointImage", "Launch", "Location", "StorageLayout", "Workload",
           "WorkloadSection"]

Location = tuple[str | int, ...]
"""A place in the scenario document, from its top (``("workload", "harness", "steps")``)."""


@dataclass(frozen=True)
class Launch:
    """How one run of the workload is started (``Workload.launch``)."""

    launcher: TorchrunPerNode
    steps_target: int
    """The step the job trains to (0: not known; the job's exit says when it is done)."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment the job needs beyond what every backend exports (``chaos.contract``)."""
    resources: tuple[tuple[str, dict[str, Any]], ...] = ()
    """Run-scoped resources (kind, spec) the job needs beside its nodes, acquired by the
    runner before any node starts and released with the run (``chaos.runfiles.resources``)."""

    @property
    def worker_argv(self) -> list[str]:
        return list(self.launcher.worker_argv)


@dataclass(frozen=True)
class StorageLayout:
    """Where the job keeps what storage faults act on (``Workload.storage``)."""

    shared_checkpoints: str
    """The durable checkpoint directory: absolute, or relative to the run directory."""
    node_local_checkpoints: bool = False
    """Whether it also writes the node-local tier (``$TRAINCHAOS_NODE_LOCAL_DIR/checkpoints``)."""
    data_file: str | None = None
    """The data file it reads during training, relative to the run directory (the run's
    own copy is what a fault layer may sit over); None: no data tier."""
    data_source: str | None = None
    """The file the run's copy of ``data_file`` starts from when the run has none yet."""
    padded_step_dirs: bool = False
    """Whether its checkpoint folders are named ``step-NNNNNNNN`` (8 digits, the harness's):
    a storage fault's path filter naming a step of another width then never matches."""
    every_steps: int | None = None
    """How often it saves to the shared tier, in steps; None: not declared (the crash-point
    sweep then needs ``--crash-save-step``)."""
    every_steps_key: str = ""
    """The scenario key that declares ``every_steps``, for messages
    (``workload.checkpoint_every_steps``)."""

    def shared_checkpoint_dir(self, run_dir: str) -> str:
        return (self.shared_checkpoints if os.path.isabs(self.shared_checkpoints)
                else os.path.join(run_dir, self.shared_checkpoints))


class WorkloadSection(Protocol):
    """A scenario's ``workload`` section as the schema validated it
    (``chaos.schema.workload_doc``): one attribute per key any registered kind owns (None
    when not given), and the keys written (``model_fields_set``)."""

    model_fields_set: set[str]

    def __getattr__(self, name: str) -> Any: ...


class Workload(ABC):
    """One kind of training job. Instances describe the workload of one scenario; class
    attributes and class methods describe the kind."""

    kind: ClassVar[str]
    """Its name, and its key under ``workload:`` in a scenario."""
    summary: ClassVar[str] = ""
    """One line for listings."""
    options_intro: ClassVar[str] = ""
    """What the reference says above the kind's options table (docs/scenario.md)."""
    options_description: ClassVar[str] = ""
    """The JSON Schema description of each options section; ``{section}`` is its name."""
    checkpoint_format: ClassVar[str | None] = None
    """The format its checkpoints are in (``chaos.ckptformat``: ``dcp``, ``lightning``...);
    None: each checkpoint's layout says."""
    key_doc: ClassVar[str] = ""
    """What the reference says of its key under ``workload:`` (empty: ``summary``)."""
    kind_hint: ClassVar[str] = ""
    """How the one-kind error tells it apart (``'command' (your own training command)``);
    empty: its name says it."""
    replica_groups: ClassVar[bool] = False
    """Whether its job is made of replica groups, each a failure domain of its own on the
    node of its number (torchft's): ``{replica_group: G}`` targets are refused for a kind
    without them."""
    resource_modules: ClassVar[tuple[str, ...]] = ()
    """Modules defining the run-scoped resource kinds its ``Launch.resources`` acquire
    (``chaos.runfiles.resources`` imports them through ``chaos.workload.load_resource_kinds``:
    ``trainchaos cleanup`` must know a kind without the workload having run)."""

    def __init__(self, spec: records.Workload) -> None:
        self.spec = spec

    # -- validation and documentation ---------------------------------------------------------
    @classmethod
    def section_fields(cls) -> dict[str, Any]:
        """The keys it owns under ``workload:``, as pydantic field definitions (name ->
        ``(annotation, Field(...))``, ``pydantic.create_model``'s form): the schema validates
        each value by its annotation (a pydantic model of options is validated, located and
        documented as one) before ``validate`` sees the section. By default its own key only
        (``own_key_field``)."""
        return cls.own_key_field()

    @classmethod
    def own_key_field(cls) -> dict[str, Any]:
        """Its own key, whose value is a mapping of options (null or {}: the defaults) that
        ``validate`` reads; a kind whose options are a pydantic model declares the model here
        instead (its problems are then located under ``workload.<kind>`` by the schema)."""
        return {cls.kind: (dict[str, Any] | None, Field(None, description=cls.key_doc or cls.summary))}

    @classmethod
    def misplaced_key(cls, key: str, owner: type[Workload]) -> str:
        """What to say of ``key``, a key of kind ``owner``, written beside this kind's."""
        return f"only for {owner.kind!r}: {cls.kind} takes its options under workload.{cls.kind}"

    @classmethod
    @abstractmethod
    def validate(cls, doc: WorkloadSection | None, world_size: int | None
                 ) -> tuple[Workload | None, list[tuple[Location, str]]]:
        """The workload of a scenario's ``workload`` section (None: left out; else the
        section as the schema validated it, only this kind's keys given) and every problem
        found (location from the document's top, message); the workload is None when what is
        wrong leaves nothing to go on. ``world_size``: the topology's, when the topology
        itself is valid."""

    @classmethod
    def options_type(cls) -> type | None:
        """The dataclass of the kind's options (nested dataclasses are sections); None: its
        keys' annotations in ``section_fields`` document them."""
        return None

    @classmethod
    def option_docs(cls, section: type) -> dict[str, str]:
        """Field -> its documentation, for ``options_type`` or one of its sections."""
        return {}

    # -- what the engine may know before the run ------------------------------------------
    @property
    @abstractmethod
    def steps(self) -> int | None:
        """The step it trains to; None: not stated (the job's exit says when it is done)."""

    @abstractmethod
    def steps_text(self) -> str:
        """Where ``steps`` comes from, for messages: ``the harness trains 40 steps
        (workload.harness.steps)``."""

    def on_cuda(self, rank: int | None) -> bool:
        """Whether ``rank`` (None: every rank) trains on a CUDA device, which a real device
        fault needs (``FaultType.device_needed``); a kind that cannot tell says False."""
        return False

    def device_fix(self) -> str:
        """How a scenario puts its ranks on a CUDA device, for the refusal of a device fault."""
        return f"the {self.kind} workload kind trains on the CPU (docs/gpu.md lists those that can use a GPU)"

    def tensor_catalog(self) -> dict[str, dict[str, Any]] | None:
        """Tensor name -> {dtype, numel, ...} as a rank holds them after its first step;
        None: known only inside the job (bit flips are checked when they fire)."""
        return None

    def storage(self) -> StorageLayout | None:
        """Where it keeps checkpoints and data; None: it keeps none that trainchaos can aim
        storage faults at (``storage_refusal`` says why). ``command`` and the stack kinds
        declare their checkpoint directory (``checkpoint_dir``, default the run's
        ``checkpoints``), which the job learns through ``{ckpt_dir}`` and
        ``TRAINCHAOS_CKPT_DIR``."""
        return None

    def storage_refusal(self, tier: str) -> str:
        """Why a storage fault on ``tier`` cannot be aimed at it (``storage`` is None, or
        has no such tier), and what would make it work."""
        if self.storage() is None:
            return (f"the {self.kind} workload keeps no checkpoint directory that trainchaos "
                    "knows, so no storage fault can be aimed at it")
        what = ("node-local tier" if tier == "local" else
                "data tier (a data file of the run's own)" if tier == "data" else f"tier {tier!r}")
        return (f"a {self.kind} workload has no {what} that trainchaos knows (only "
                "workload.harness keeps one): aim the fault at tier: shared, its checkpoint_dir")

    def read_checkpoint(self, path: str) -> CheckpointImage | None:
        """What the checkpoint at ``path`` (the ``path`` of a ``ckpt_save_end`` event) holds;
        None: no known format reads it (the freshness checker leaves it unchecked). Raises
        ``ValueError`` or ``OSError`` saying why it is unusable (torn, gone). Called by the
        controller, off its loop, once per save.

        By format (``chaos.ckptformat``): the kind's ``checkpoint_format`` (or
        ``TRAINCHAOS_CHECKPOINT_FORMAT``: a format's name, or a hook ``module:function``
        returning ``(step, state_dict)``) where the path's layout fits it, else the format
        the layout shows (torch.save, DCP, safetensors, Lightning ``.ckpt``, HF Trainer or
        Accelerate folders). The digest is ``chaos.probe.state_dict_digest`` of the state
        the format finds, which the twin's ``probe.state_digest(step, model=)`` hashes the
        same way; the step is the checkpoint's own record, else its name's, else None (the
        save event's is taken). A kind with a verified format of its own (the harness)
        overrides this."""
        from chaos import ckptformat

        return ckptformat.read_checkpoint(path, self.checkpoint_format)

    def audit_checkpoints(self, directory: str) -> CheckpointAudit | None:
        """Which checkpoints ``directory`` (a crash image of its checkpoint tier) holds
        complete, which torn, and what its "latest" pointer names; None: no known format
        audits its entries (the sweep then judges by the restart alone). By format, as
        ``read_checkpoint``: each format says what it takes as the pointer
        (docs/checkers.md, "Checkpoint formats")."""
        from chaos import ckptformat

        return ckptformat.audit_checkpoints(directory, self.checkpoint_format)

    # -- the run ------------------------------------------------------------------------------
    @abstractmethod
    def launch(self, run_dir: str, seed: int) -> Launch:
        """How to start it for one run in ``run_dir`` (absolute) with ``seed``."""

    def progress(self, events_dir: str) -> LogProgress:
        """What reads the progress the probe does not report, from the node logs: the
        agents' failure reports always; step lines only for a kind that says how."""
        return LogProgress(None, events_dir)

    def finished(self, reported_end: bool) -> bool:
        """Whether the job completed its training when every node exited 0. ``reported_end``:
        the probe reported ``run_end``."""
        return reported_end

    def detection_sources(self) -> DetectionSources:
        """Where the run's detections can come from (docs/metrics.md, "Unknown"). By default
        the job reports every detector it runs through the probe (the bundled harness): no
        fault is ever unseen."""
        return DetectionSources()
