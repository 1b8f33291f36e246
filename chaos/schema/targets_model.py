"""The targets of a scenario: what a run must achieve (bounds on measured values,
correctness against the fault-free twin, the data checker), one key per metric of the
catalogue that can be a target (``chaos.metrics.catalogue``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import ConfigDict, Discriminator, Field, Tag, create_model, model_validator

from chaos.metrics.catalogue import target_specs
from chaos.model import scenario as records
from chaos.model.types import (
    Expect,
    Noun,
    StrictModel,
    name_or_mapping,
    optional_key,
    record_default,
)

__all__ = ["BoundDoc", "DataBoundsDoc", "FractionBoundDoc", "LossWithinDoc", "TargetsDoc"]


def _check_bound(bound: BoundDoc) -> None:
    if bound.max is None and bound.min is None:
        raise ValueError("give max and/or min")
    if bound.max is not None and bound.min is not None and bound.min > bound.max:
        raise ValueError(f"min ({bound.min:g}) is greater than max ({bound.max:g}): "
                         "no value can pass")


class BoundDoc(StrictModel):
    """A bound on a measured value: max and/or min, min <= max."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    max: float = optional_key(ge=0)
    """The measured value must be at most this."""
    min: float = optional_key(ge=0)
    """The measured value must be at least this."""

    @model_validator(mode="after")
    def _some_bound(self) -> Self:
        _check_bound(self)
        return self


class FractionBoundDoc(StrictModel):
    """A bound on a fraction: max and/or min, between 0 and 1, min <= max."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    max: float = optional_key(ge=0, le=1)
    """The measured fraction must be at most this."""
    min: float = optional_key(ge=0, le=1)
    """The measured fraction must be at least this."""

    @model_validator(mode="after")
    def _some_bound(self) -> Self:
        # ignore: a fraction bound has the same min/max shape _check_bound reads of a BoundDoc.
        _check_bound(self)  # type: ignore[arg-type]
        return self


class LossWithinDoc(StrictModel):
    """Final loss within a relative tolerance of the baseline's."""

    loss_within: float = Field(gt=0)
    """The max relative loss deviation from the baseline, e.g. 0.05."""


class DataBoundsDoc(StrictModel):
    """How many samples the surviving training may lose or train twice (docs/checkers.md)."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    max_lost: int = optional_key(ge=0)
    """At most this many samples lost (never trained by the surviving training)."""
    max_duplicated: int = optional_key(ge=0)
    """At most this many extra trainings of a sample by the surviving training."""

    @model_validator(mode="after")
    def _some_bound(self) -> Self:
        if self.max_lost is None and self.max_duplicated is None:
            raise ValueError("give max_lost and/or max_duplicated")
        return self


def _metric_targets() -> type[StrictModel]:
    """One optional key per metric of the catalogue that can be a target
    (``chaos.metrics.catalogue.target_specs``): a ``{max, min}`` bound, or a bound on a
    fraction; its description is the metric's ``target_doc``."""
    forms = {"bound": BoundDoc, "fraction_bound": FractionBoundDoc}
    keys: dict[str, Any] = {
        spec.key: (forms[spec.target or "bound"], Field(None, description=" ".join(spec.target_doc.split())))
        for spec in target_specs()
    }
    return create_model("MetricTargetsDoc", __base__=StrictModel, **keys)


class TargetsDoc(_metric_targets()):  # type: ignore[misc]  # a base made at import from the metric catalogue: a value to mypy
    """What a run must achieve; every key is optional."""

    key_noun = "target"

    final_state: Annotated[
        Annotated[Literal["matches_baseline"], Tag("name")] | Annotated[LossWithinDoc, Tag("mapping")],
        Discriminator(name_or_mapping),
        Expect("matches_baseline or {loss_within: X}"),
    ] = optional_key()
    """Correctness against the fault-free baseline run (needs baseline: true):
    matches_baseline (bitwise equal final model) or {loss_within: X}."""
    attribution: Annotated[Literal["correct"], Noun("attribution target")] = optional_key()
    """correct: the first detection must blame the faulty rank/node and failure class."""
    data: Annotated[
        Annotated[Literal["exactly_once", "at_least_once"], Tag("name")] | Annotated[DataBoundsDoc, Tag("mapping")],
        Discriminator(name_or_mapping),
        Expect("exactly_once, at_least_once or {max_lost: N, max_duplicated: N}"),
    ] = optional_key()
    """The exactly-once data checker (the workload reports its samples: probe.samples or
    probe.track; docs/checkers.md): exactly_once (no sample lost or trained twice by the
    training that survived), at_least_once (none lost; repeats allowed) or
    {max_lost: N, max_duplicated: N}. Samples are counted against the fault-free twin's
    when baseline: true."""
    completes: bool = record_default(records.Targets, "completes")
    """The run must reach its last step within timeout_s."""
