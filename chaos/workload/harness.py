"""``workload: {harness: {...}}``: the bundled training job (``python -m harness``).

The only module of the engine that imports ``harness``: its configuration (validation,
the command line, the options' reference), its model (the tensor names a bit flip may name)
and its shipped corpus (a data tier's seed).
"""

from __future__ import annotations

import functools
import os
import re
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar

from chaos import contract, probe
from chaos.workload import devices, register_workload
from chaos.workload.base import (
    CheckpointAudit,
    CheckpointImage,
    Launch,
    Location,
    StorageLayout,
    Workload,
    WorkloadSection,
)
from chaos.workload.torchrun import TorchrunPerNode, warm_start_from_env
from harness.config import ConfigError, HarnessConfig, field_docs
from harness.config_load import config_from_mapping, config_to_args

if TYPE_CHECKING:
    from chaos.model import scenario as records

__all__ = ["HarnessWorkload"]

_WHERE = "workload.harness"
WARM_BY_DEFAULT_FROM_RANKS = 16
"""A job of this many ranks or more starts warm where neither the scenario nor
TRAINCHAOS_WARM_START says otherwise: every cold rank imports torch, on a few cores of one
machine (launch -> first step 7.6 s at 4 ranks, 27.7 s at 16, 64.9 s at 32 cold on 2 cores),
so a cold start of a big emulated cluster measures the host's CPU more than the job's
recovery (docs/scale.md#emulated-cluster-size). Below it, the cold start that most stacks
pay stays the default."""


def _options(harness: dict[str, Any] | None) -> dict[str, Any]:
    """The scenario's harness options, with ``warm_start`` from TRAINCHAOS_WARM_START where
    the scenario leaves it out (contract.WARM_START_ENV)."""
    options = dict(harness or {})
    if "warm_start" in options:
        return options
    try:
        warm = warm_start_from_env()
    except ValueError as exc:
        raise ConfigError(f"{_WHERE}.warm_start: {exc}") from None
    if warm is not None:
        options["warm_start"] = warm
    return options


def _warm_by_size(options: dict[str, Any], world_size: int | None) -> dict[str, Any]:
    """The options of the run's record: ``warm_start: true`` written in for a job of
    WARM_BY_DEFAULT_FROM_RANKS ranks or more that says nothing of it (nor does the
    environment, which still decides at launch), so that the record says how it ran."""
    if ("warm_start" in options or os.environ.get(contract.WARM_START_ENV)
            or world_size is None or world_size < WARM_BY_DEFAULT_FROM_RANKS):
        return options
    return {**options, "warm_start": True}


@register_workload
class HarnessWorkload(Workload):
    kind: ClassVar[str] = "harness"
    summary: ClassVar[str] = ("the bundled training job (python -m harness): reports through the "
                              "probe, checkpoints in tiers, every option validated up front")
    options_intro: ClassVar[str] = (
        "From the harness's own configuration (`python -m harness --help` lists the same "
        "as flags); nested by section. Checks across options (d_model divisible by "
        "n_heads, global_batch divisible by the world size...) are the harness's.")
    options_description: ClassVar[str] = ("Options of the bundled harness ({section}); every one "
                                          "has a default (python -m harness --help).")
    key_doc: ClassVar[str] = ("Options of the bundled harness, as in `python -m harness --help`, nested "
                              "by section (model, checkpoint, failure); null or {} means all defaults.")
    kind_hint: ClassVar[str] = "options of the bundled training job"
    _MISPLACED: ClassVar[dict[str, str]] = {
        "steps": "the harness's steps are workload.harness.steps",
        "progress_regex": "the harness reports its progress through the probe"}

    def __init__(self, spec: records.Workload, config: HarnessConfig | None = None) -> None:
        super().__init__(spec)
        self.config = config if config is not None else config_from_mapping(
            _options(spec.harness), where=_WHERE)

    # -- validation and documentation ---------------------------------------------------------
    @classmethod
    def misplaced_key(cls, key: str, owner: type[Workload]) -> str:
        if key in cls._MISPLACED:
            return f"only for {owner.kind!r}: {cls._MISPLACED[key]}"
        return super().misplaced_key(key, owner)

    @classmethod
    def validate(cls, doc: WorkloadSection | None, world_size: int | None
                 ) -> tuple[Workload | None, list[tuple[Location, str]]]:
        from chaos.model import scenario as records

        problems: list[tuple[Location, str]] = []
        options = _warm_by_size(dict((doc.harness if doc is not None else None) or {}), world_size)
        try:
            config = config_from_mapping(_options(options), where=_WHERE)
        except ConfigError as exc:
            return None, [*problems, _located(str(exc))]
        if world_size is not None:
            try:
                config.check_world_size(world_size)
            except ConfigError as exc:
                problems.append((("workload", "harness", "global_batch"), str(exc)))
        if config.device == "cuda":
            missing = devices.cuda_missing()
            if missing is not None:
                problems.append((("workload", "harness", "device"), f"cuda: {missing}"))
        return cls(records.Workload(harness=options), config), problems

    @classmethod
    def options_type(cls) -> type:
        return HarnessConfig

    @classmethod
    def option_docs(cls, section: type) -> dict[str, str]:
        return field_docs(section)

    # -- what the engine may know before the run ------------------------------------------
    def on_cuda(self, rank: int | None) -> bool:
        cfg = self.config
        if cfg.device != "cuda":
            return False
        return not cfg.cuda_ranks or (rank is not None and rank < cfg.cuda_ranks)

    def device_fix(self) -> str:
        if self.config.device == "cuda":
            return (f"workload.harness.cuda_ranks is {self.config.cuda_ranks}: only ranks "
                    f"0-{self.config.cuda_ranks - 1} train on CUDA (target one of them)")
        return "set workload.harness.device: cuda (docs/gpu.md)"

    @property
    def steps(self) -> int:
        return self.config.steps

    def steps_text(self) -> str:
        return f"the harness trains {self.config.steps} steps (workload.harness.steps)"

    def tensor_catalog(self) -> dict[str, dict[str, Any]] | None:
        """Built here, as a rank builds it (the data file only the nodes have: None)."""
        cfg = self.config
        try:
            return _catalog_for(cfg.model.name, cfg.model.d_model, cfg.model.n_layers,
                                cfg.model.n_heads, cfg.model.seq_len, cfg.data, cfg.lr)
        except OSError:
            return None

    def storage(self) -> StorageLayout:
        cfg = self.config
        data = cfg.data
        # Only a relative path is the run's own copy: the original is never mounted over.
        streamed = bool(cfg.data_stream and data and not os.path.isabs(data) and ".." not in data.split("/"))
        return StorageLayout(
            shared_checkpoints=cfg.checkpoint.dir or contract.SHARED_CHECKPOINTS_SUBDIR,
            node_local_checkpoints=cfg.checkpoint.fast_tier,
            padded_step_dirs=True,
            every_steps=cfg.checkpoint.every_steps or None,
            every_steps_key="workload.harness.checkpoint.every_steps",
            data_file=data if streamed else None,
            data_source=str(resources.files("harness") / "data" / "corpus.txt"),
        )

    def storage_refusal(self, tier: str) -> str:
        if tier == "local":
            return ("the workload does not use the local tier (set workload.harness.checkpoint."
                    "local_every_steps > 0, or a checkpoint.placement with local or replicated)")
        return ("the workload does not use a data tier: set workload.harness.data_stream: true "
                "and data to a path relative to the run (e.g. data/corpus.txt: the run's own copy "
                "is mounted, never the original)")

    def read_checkpoint(self, path: str) -> CheckpointImage:
        """A harness checkpoint directory, verified as the job's own load verifies it."""
        from harness.checkpoint import MODEL, STEP, CheckpointError, read_checkpoint

        try:
            state = read_checkpoint(path)
        except CheckpointError as exc:
            raise ValueError(str(exc)) from None
        return CheckpointImage(step=int(state[STEP]), digest=probe.state_dict_digest(state[MODEL]))

    def audit_checkpoints(self, directory: str) -> CheckpointAudit:
        """Every ``step-NNNNNNNN`` directory read as the job's load reads it; ``LATEST``."""
        from harness.checkpoint import POINTER_FILE, CheckpointError, read_checkpoint

        complete, torn = [], {}
        for entry in sorted(os.listdir(directory)):
            match = re.fullmatch(r"step-(\d{8})", entry)
            if match is None or not os.path.isdir(os.path.join(directory, entry)):
                continue
            try:
                read_checkpoint(os.path.join(directory, entry))
            except CheckpointError as exc:
                torn[int(match.group(1))] = str(exc)
            else:
                complete.append(int(match.group(1)))
        pointer = None
        try:
            with open(os.path.join(directory, POINTER_FILE), encoding="utf-8") as fh:
                named = re.fullmatch(r"step-(\d{8})", fh.read().strip())
            pointer = int(named.group(1)) if named else -1  # -1: a pointer that names nothing
        except FileNotFoundError:
            pass
        return CheckpointAudit(complete=tuple(complete), torn=torn, pointer=pointer)

    # -- the run ------------------------------------------------------------------------------
    def launch(self, run_dir: str, seed: int) -> Launch:
        options = _options(self.spec.harness)
        options["seed"] = seed
        options["run_dir"] = run_dir
        cfg = config_from_mapping(options, where=_WHERE)
        if cfg.warm_start:  # harness/zygote.py: the node's zygote forks each rank
            launcher = TorchrunPerNode(("-m", "harness.zygote", "rank", *config_to_args(cfg)),
                                       zygote_argv=("-m", "harness.zygote", "serve"))
        else:
            launcher = TorchrunPerNode(("-m", "harness", *config_to_args(cfg)))
        return Launch(launcher, steps_target=cfg.steps)


def _located(message: str) -> tuple[Location, str]:
    """Locate a harness ConfigError ('workload.harness.x.y: msg') at the field it names.

    Cross-field checks name their field at the start of the message instead
    ('workload.harness.model: model.d_model (10) must be ...'); point at that field.
    """
    head, sep, rest = message.partition(": ")
    if not (sep and (head == _WHERE or head.startswith(_WHERE + ".")) and " " not in head):
        return tuple(_WHERE.split(".")), message
    field_name = re.match(r"[a-z_.]+", rest)
    # "a and b must be >= 0" names two fields: keep the section as the location
    if field_name and not rest[field_name.end():].startswith(" and "):
        parts = field_name.group(0).split(".")
        section = head[len(_WHERE) + 1:] if head != _WHERE else ""
        if section and parts[0] == section and len(parts) == 2:
            head = f"{head}.{parts[1]}"
        elif not section and len(parts) == 1 and parts[0] in HarnessConfig.__dataclass_fields__:
            head = f"{head}.{parts[0]}"
    return tuple(head.split(".")), rest


@functools.cache
def _catalog_for(name: str, d_model: int, n_layers: int, n_heads: int, seq_len: int, data: str,
                 lr: float) -> dict[str, dict[str, Any]]:
    """The tensors of the harness's model and optimizer, as a rank has them after its first
    step (optimizer state exists by then)."""
    import torch

    from chaos.probe.bitflip_names import tensor_catalog
    from harness.config import ModelConfig
    from harness.data import CharVocab, load_text
    from harness.model import build_model, build_optimizer

    # ignore: name is a validated HarnessConfig model name (one of the Literal's values), a str here.
    cfg = ModelConfig(name=name, d_model=d_model, n_layers=n_layers, n_heads=n_heads,  # type: ignore[arg-type]
                      seq_len=seq_len)
    model = build_model(cfg, CharVocab(load_text(data)).size, seed=0)
    optimizer = build_optimizer(model, lr)
    for param in model.parameters():  # one zero step: the optimizer creates its state
        param.grad = torch.zeros_like(param)
    optimizer.step()
    return tensor_catalog(model, optimizer)
