"""Scale-model configuration: YAML -> a validated :class:`ScaleConfig`.

The schema is declared once, here, as pydantic models with a description per field
(``docs/scale.md`` is the annotated reference, and a test keeps it naming every field).
Checks that involve one model are its validators; checks across models (a checkpoint tier
for every failure scope, unique class names) run once the structure is valid. Every problem
is reported with the file and a location, as ``trainchaos validate`` reports scenarios, and
raised together as one :class:`~chaos.scale.issues.ScaleInputError` (exit code 2).

Whether a class has recovery figures depends on ``class_defaults`` and on what the
``--from-runs`` journals measured: the loader passes the measured fault types in the
validation context, so "no figures" is found in the same pass as every other problem.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from chaos.errors import ValidationIssue
from chaos.scale.engine import SCOPES
from chaos.scale.issues import ScaleInputError, issues_from, located
from chaos.scale.llama3 import LLAMA3_SOURCE, default_class_dicts, default_fault_types
from chaos.scale.yamlfile import read_yaml_mapping

__all__ = [
    "FIGURES",
    "Checkpoint",
    "ClassDefaults",
    "FailureClass",
    "Job",
    "Maintenance",
    "Recovery",
    "ScaleConfig",
    "Tier",
    "load_config",
    "read_config_yaml",
    "validate_config",
]

Scope = Literal["process", "device", "node", "domain"]
assert typing.get_args(Scope) == SCOPES, "the engine and the schema must name the same scopes"
FIGURES = ("detection_s", "restart_s")
"""The per-class recovery figures every class needs (by hand, class_defaults or --from-runs)."""

MAX_CHECKPOINTS = 5_000_000
"""Checkpoints per window the engine tabulates; a smaller interval is surely a typo."""

_NAME = r"^[a-z0-9][a-z0-9._-]{0,99}$"
NonNeg = Annotated[float, Field(ge=0)]
Positive = Annotated[float, Field(gt=0)]


class _Model(BaseModel):
    # strict: "5" is not a number, true is not 1; a typo'd key is an error, not ignored.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


class Job(_Model):
    devices: int = Field(ge=1, description="Accelerators in the job (GPUs), e.g. 16384.")
    devices_per_node: int = Field(8, ge=1, description="Accelerators per node; a node is what "
                                  "a host-side failure takes down and a spare replaces.")
    days: Positive = Field(description="Length of the simulated window in days (wall clock).")

    @model_validator(mode="after")
    def _whole_nodes(self) -> Job:
        if self.devices % self.devices_per_node:
            raise located("devices", f"{self.devices} devices do not fill whole nodes of "
                          f"{self.devices_per_node}: the model counts nodes for spares and domains")
        return self

    @property
    def nodes(self) -> int:
        return self.devices // self.devices_per_node

    @property
    def window_s(self) -> float:
        return self.days * 86_400.0


class FailureClass(_Model):
    name: str = Field(pattern=_NAME, description="Unique name of the class (faulty_gpu).")
    label: str | None = Field(None, description="Human-readable name for tables.")
    rate_per_device_hour: NonNeg | None = Field(
        None, description="Failures per device-hour (exactly one rate is set).")
    rate_per_node_hour: NonNeg | None = Field(None, description="Failures per node-hour.")
    rate_per_domain_hour: NonNeg | None = Field(
        None, description="Failures per domain-hour: a correlated event taking down all "
        "domain_nodes nodes of one domain at once (a power domain, a rack).")
    domain_nodes: int | None = Field(None, ge=1, description="Nodes per domain; required with "
                                     "rate_per_domain_hour.")
    scope: Scope | None = Field(None, description="What one failure destroys: process, device, "
                                "node or domain. Default: device, node or domain after the rate.")
    replace: bool | None = Field(None, description="Whether the failed nodes leave the job for "
                                 "repair (spares, elastic). Default: true unless scope is process.")
    detection_s: NonNeg | None = Field(None, description="Seconds from the failure until "
                                       "it is detected.")
    restart_s: NonNeg | None = Field(None, description="Seconds from detection until training "
                                     "makes progress again (restart, rendezvous, checkpoint load).")
    lost_work: Literal["rollback", "measured", "fixed"] = Field(
        "rollback", description="Work lost per failure: rollback (simulated: back to the last "
        "durable checkpoint that survives the scope), measured (median lost_steps x step time "
        "from --from-runs), fixed (lost_work_s).")
    lost_work_s: NonNeg | None = Field(None, description="Training seconds lost per failure "
                                       "with lost_work: fixed.")
    fault_types: list[str] | None = Field(
        None, description="trainchaos fault types whose --from-runs measurements stand for this "
        "class. Default: the Llama 3 mapping for a table class name, else none.")

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> FailureClass:
        rates = [k for k in ("rate_per_device_hour", "rate_per_node_hour", "rate_per_domain_hour")
                 if getattr(self, k) is not None]
        if not rates:
            raise located(None, "no failure rate: set one of rate_per_device_hour, "
                          "rate_per_node_hour, rate_per_domain_hour")
        if len(rates) > 1:
            raise located(rates[1], f"set exactly one failure rate; {rates[0]} is set already")
        if rates[0] == "rate_per_domain_hour" and self.domain_nodes is None:
            raise located("domain_nodes", "required with rate_per_domain_hour: the nodes one "
                          "correlated event takes down at once")
        if rates[0] != "rate_per_domain_hour" and self.domain_nodes is not None:
            raise located("domain_nodes", "only with rate_per_domain_hour (a correlated event "
                          f"per domain); this class sets {rates[0]}")
        if self.scope == "domain" and self.domain_nodes is None:
            raise located("scope", "scope domain needs rate_per_domain_hour and domain_nodes")
        if (self.lost_work == "fixed") != (self.lost_work_s is not None):
            raise located("lost_work_s", "lost_work_s is the fixed loss of lost_work: fixed; "
                          "set both or neither")
        context = info.context or {}
        known = context.get("known_fault_types")
        for i, name in enumerate(self.fault_types or ()):
            if known is not None and name not in known:
                close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else ";"
                raise located(f"fault_types[{i}]", f"unknown fault type {name!r}{hint} "
                              f"allowed: {', '.join(sorted(known))}")
        self._check_figures(context)
        return self

    def _check_figures(self, context: Mapping[str, Any]) -> None:
        measured = set(context.get("measured_types", ())) & set(self.mapped_fault_types())
        defaults = set(context.get("default_figures", ()))
        missing = [f for f in FIGURES if getattr(self, f) is None and not measured and f not in defaults]
        who = ("the built-in Llama 3 class" if context.get("builtin_classes") else "class") + f" {self.name!r}"
        types = self.mapped_fault_types()
        measure = f"journals of runs with a fault of type {' or '.join(types)}"
        if missing:
            runs = context.get("from_runs")
            if not types:
                found = ("or name the trainchaos fault types that measure it (fault_types) "
                         "and give --from-runs DIR")
            elif runs:
                found = f"or measure them: --from-runs {runs} holds no fault of type {' or '.join(types)}"
            else:
                found = f"or measure them with --from-runs DIR ({measure})"
            raise located(None, f"{who} has no recovery figures ({', '.join(missing)}): set "
                          f"them here or in class_defaults, {found}")
        lost_measured = set(context.get("measured_lost_types", ())) & set(types)
        if self.lost_work == "measured" and not lost_measured:
            raise located("lost_work", "lost_work: measured needs --from-runs DIR with "
                          + (f"{measure} and a step time in their metrics" if types
                             else "fault_types naming the trainchaos fault types that measure it"))

    def mapped_fault_types(self) -> tuple[str, ...]:
        return tuple(self.fault_types) if self.fault_types is not None else default_fault_types(self.name)

    @property
    def rate_kind(self) -> str:
        if self.rate_per_device_hour is not None:
            return "device"
        return "node" if self.rate_per_node_hour is not None else "domain"

    @property
    def effective_scope(self) -> str:
        return self.scope or self.rate_kind

    @property
    def nodes_out(self) -> int:
        """Nodes one failure takes out of the job for repair (0: it restarts in place)."""
        replace = self.replace if self.replace is not None else self.effective_scope != "process"
        if not replace:
            return 0
        if self.effective_scope == "domain" and self.domain_nodes is not None:
            return self.domain_nodes
        return 1

    def failures_per_hour(self, job: Job) -> float:
        """Expected failures per wall-clock hour for the whole job."""
        if self.rate_per_device_hour is not None:
            return self.rate_per_device_hour * job.devices
        if self.rate_per_node_hour is not None:
            return self.rate_per_node_hour * job.nodes
        assert self.rate_per_domain_hour is not None and self.domain_nodes is not None
        return self.rate_per_domain_hour * job.nodes / self.domain_nodes


class ClassDefaults(_Model):
    detection_s: NonNeg | None = Field(None, description="Detection seconds for every class "
                                       "that sets none and has no measurement.")
    restart_s: NonNeg | None = Field(None, description="Restart seconds for every class that "
                                     "sets none and has no measurement.")


class Maintenance(_Model):
    count: int | None = Field(None, ge=0, description="Planned interruptions in the window, "
                              "evenly spaced (exactly one of count and every_h).")
    every_h: Positive | None = Field(None, description="Hours between planned interruptions.")
    duration_s: NonNeg = Field(0.0, description="Seconds each planned interruption stops "
                               "training (drain, work, restart). Nothing is lost: the job "
                               "checkpoints before it stops.")

    @model_validator(mode="after")
    def _one_schedule(self) -> Maintenance:
        if (self.count is None) == (self.every_h is None):
            raise located("every_h" if self.every_h is not None else None,
                          "set exactly one of count and every_h")
        return self


class Tier(_Model):
    name: str = Field(pattern=_NAME, description="Tier name (memory, local, remote).")
    every: int = Field(1, ge=1, description="Write every n-th checkpoint to this tier.")
    blocking_s: NonNeg = Field(0.0, description="Training blocked per write to this tier.")
    persist_s: NonNeg = Field(0.0, description="After the blocking part, seconds until the "
                              "write is durable (async); a failure before that loses it.")
    survives: list[Scope] = Field(list(typing.get_args(Scope)), min_length=1, description="Failure scopes "
                                  "this tier's copies survive (memory: process; remote: all).")


class Checkpoint(_Model):
    interval_s: Positive = Field(description="Training seconds between two checkpoints "
                                 "(the tau of Young/Daly); each checkpoint then blocks "
                                 "training for its blocking cost.")
    mode: Literal["sync", "async"] = Field("sync", description="sync: the save blocks until "
                                           "durable; async: blocking_s, then persist_s in the background.")
    blocking_s: NonNeg | None = Field(None, description="Training blocked per checkpoint "
                                      "(single tier; default 0).")
    persist_s: NonNeg | None = Field(None, description="async, single tier: seconds after "
                                     "the blocking part until the checkpoint is durable (default 0).")
    tiers: list[Tier] | None = Field(None, min_length=1, description="Checkpoint tiers; "
                                     "default: one tier of blocking_s/persist_s that survives everything.")

    @model_validator(mode="after")
    def _consistent(self) -> Checkpoint:
        if self.tiers is not None:
            for key in ("blocking_s", "persist_s"):
                if getattr(self, key) is not None:
                    raise located(key, "set it per tier when tiers are given")
            names = [t.name for t in self.tiers]
            for i, name in enumerate(names):
                if name in names[:i]:
                    raise located(f"tiers[{i}].name", f"tier {name!r} is defined twice")
        if self.mode == "sync":
            for i, tier in enumerate(self.effective_tiers()):
                if tier.persist_s > 0:
                    field = f"tiers[{i}].persist_s" if self.tiers is not None else "persist_s"
                    raise located(field, "a sync checkpoint is durable when training resumes; "
                                  "persist_s is for mode: async")
        return self

    def effective_tiers(self) -> list[Tier]:
        if self.tiers is not None:
            return list(self.tiers)
        return [Tier(name="storage", blocking_s=self.blocking_s or 0.0,
                     persist_s=self.persist_s or 0.0)]


class Recovery(_Model):
    mode: Literal["restart", "spares", "elastic"] = Field(
        "restart", description="restart: a failed node is replaced, waiting replace_s; spares: "
        "swapped for a free hot spare at once; elastic: the job shrinks and goes on.")
    spare_nodes: int | None = Field(None, ge=1, description="Hot spare nodes (mode spares).")
    repair_h: Positive = Field(24.0, description="Hours a failed node is out for repair before "
                               "it is a spare again (spares) or back in the job (elastic).")
    replace_s: NonNeg | None = Field(None, description="Extra downtime to get a replacement "
                                     "node from outside the job: every replacing failure waits "
                                     "this long in mode restart (default 0); in mode spares, it "
                                     "caps the wait for a repaired node when no spare is free "
                                     "(default: no cap).")

    @model_validator(mode="after")
    def _spares(self) -> Recovery:
        if self.mode == "spares" and self.spare_nodes is None:
            raise located("spare_nodes", "mode spares needs spare_nodes (>= 1)")
        if self.mode != "spares" and self.spare_nodes is not None:
            raise located("spare_nodes", f"spare_nodes is for mode spares, not {self.mode}")
        return self


class ScaleConfig(_Model):
    name: str = Field(pattern=_NAME, description="Name of the model (names the output files).")
    description: str | None = Field(None, description="What is modelled.")
    source: str | None = Field(None, description="Where the rates come from (a citation).")
    seed: int = Field(0, ge=0, description="Random seed; --seed overrides.")
    trials: int = Field(1000, ge=1, le=100_000, description="Monte-Carlo trials; --trials overrides.")
    job: Job = Field(description="The job: devices, node shape, window.")
    classes: list[FailureClass] = Field(min_length=1, description="Failure classes. Default: "
                                        "the Llama 3 table (chaos/scale/llama3.py).")
    class_defaults: ClassDefaults | None = Field(None, description="Recovery figures for "
                                                 "classes that set none and have no measurement.")
    maintenance: Maintenance | None = Field(None, description="Planned interruptions.")
    checkpoint: Checkpoint = Field(description="Checkpoint policy.")
    recovery: Recovery = Field(Recovery(), description="What happens to failed nodes.")

    @model_validator(mode="before")
    @classmethod
    def _defaults_and_context(cls, data: Any, info: ValidationInfo) -> Any:
        # The figure check of each class (FailureClass._check_figures) needs class_defaults;
        # it runs before this model's fields are all valid, so the keys go by context.
        if not isinstance(data, dict):
            return data
        context = info.context if isinstance(info.context, dict) else None
        if "classes" not in data:
            data = {**data, "classes": default_class_dicts()}
            if "source" not in data:
                data["source"] = LLAMA3_SOURCE
            if context is not None:
                context["builtin_classes"] = True
        defaults = data.get("class_defaults")
        if context is not None and isinstance(defaults, dict):
            context["default_figures"] = {k for k in FIGURES if isinstance(defaults.get(k), int | float)
                                          and not isinstance(defaults.get(k), bool)}
        return data

    def unplanned_per_hour(self) -> float:
        return sum(c.failures_per_hour(self.job) for c in self.classes)


def _cross_checks(cfg: ScaleConfig) -> list[tuple[str, str]]:
    """(location, message) for rules spanning models; the structure is valid here."""
    problems = []
    names = [c.name for c in cfg.classes]
    for i, name in enumerate(names):
        if name in names[:i]:
            problems.append((f"classes[{i}].name", f"class {name!r} is defined twice"))
    tiers = cfg.checkpoint.effective_tiers()
    survived = {s for t in tiers for s in t.survives}
    for i, c in enumerate(cfg.classes):
        if c.effective_scope not in survived:
            where = "checkpoint.tiers" if cfg.checkpoint.tiers is not None else "checkpoint"
            problems.append((where, f"no tier survives a {c.effective_scope} failure "
                             f"(classes[{i}] {c.name}): add {c.effective_scope} to the survives "
                             "list of the most durable tier"))
        if c.domain_nodes is not None and c.domain_nodes > cfg.job.nodes:
            problems.append((f"classes[{i}].domain_nodes", f"{c.domain_nodes} is out of range: "
                             f"the job has {cfg.job.nodes} nodes"))
    if cfg.recovery.spare_nodes is not None and cfg.recovery.spare_nodes > cfg.job.nodes:
        problems.append(("recovery.spare_nodes", f"{cfg.recovery.spare_nodes} spares for "
                         f"{cfg.job.nodes} nodes: more than the job itself"))
    if cfg.job.window_s / cfg.checkpoint.interval_s > MAX_CHECKPOINTS:
        problems.append(("checkpoint.interval_s", f"{cfg.checkpoint.interval_s:g} s gives more "
                         f"than {MAX_CHECKPOINTS:,} checkpoints in {cfg.job.days:g} days"))
    return problems


def validate_config(data: Any, file: str, *, measured_types: Iterable[str] = (),
                    measured_lost_types: Iterable[str] = (),
                    from_runs: str | None = None) -> ScaleConfig:
    """Validate a parsed document; raises ScaleInputError with every issue found.

    ``measured_types``: fault types the ``--from-runs`` journals hold measurements of;
    ``measured_lost_types``: those whose lost work could be turned into seconds.
    """
    from chaos.faults.base import known_types

    context: dict[str, Any] = {"measured_types": frozenset(measured_types),
                               "measured_lost_types": frozenset(measured_lost_types),
                               "from_runs": from_runs, "known_fault_types": frozenset(known_types())}
    if not isinstance(data, dict):
        raise ScaleInputError([ValidationIssue(file, "", "expected a mapping with keys "
                                               f"{', '.join(ScaleConfig.model_fields)}")])
    try:
        cfg = ScaleConfig.model_validate(data, context=context)
    except ValidationError as exc:
        raise ScaleInputError(issues_from(exc, file, ScaleConfig)) from None
    problems = _cross_checks(cfg)
    if problems:
        raise ScaleInputError([ValidationIssue(file, loc, msg) for loc, msg in problems])
    return cfg


def read_config_yaml(path: str) -> dict[str, Any]:
    """The parsed YAML of a config file; a ScaleInputError when it cannot be read or parsed."""
    return read_yaml_mapping(path, "a scale config file", tuple(ScaleConfig.model_fields))


def load_config(path: str, *, measured_types: Iterable[str] = (),
                measured_lost_types: Iterable[str] = (), from_runs: str | None = None) -> ScaleConfig:
    """Read and validate a scale config file."""
    return validate_config(read_config_yaml(path), path, measured_types=measured_types,
                           measured_lost_types=measured_lost_types, from_runs=from_runs)
