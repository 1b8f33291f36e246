"""A validated scenario document -> the ``chaos.model.scenario`` records the runner reads."""

from __future__ import annotations

from typing import Any

from chaos.faults.base import lookup
from chaos.metrics.catalogue import target_specs
from chaos.model import scenario as records
from chaos.model.triggers import TRIGGER_FORMS
from chaos.schema.fault_model import FaultDoc, TriggerDoc
from chaos.schema.models import ScenarioDoc, TopologyDoc
from chaos.schema.targets_model import (
    BoundDoc,
    DataBoundsDoc,
    FractionBoundDoc,
    LossWithinDoc,
    TargetsDoc,
)
from chaos.workload import kind_of, lookup_workload

__all__ = ["build_scenario", "topology_record"]


def build_scenario(doc: ScenarioDoc, path: str) -> records.Scenario:
    """The records of a document that passed every check (``chaos.schema.checks`` too)."""
    return records.Scenario(
        name=doc.name, path=path, description=doc.description, seed=doc.seed,
        workload=_workload(doc.workload, doc.topology.nodes * doc.topology.ranks_per_node),
        topology=topology_record(doc.topology),
        faults=tuple(_fault(i, f) for i, f in enumerate(doc.faults or ())),
        targets=_targets(doc.targets), baseline=doc.baseline, repeat=doc.repeat,
        timeout_s=float(doc.timeout_s), backend=_backend(doc.backend),
        expect=None if doc.expect is None else records.Expectation(doc.expect.fail, doc.expect.issue),
    )


def topology_record(doc: TopologyDoc) -> records.Topology:
    return records.Topology(
        nodes=doc.nodes, ranks_per_node=doc.ranks_per_node, min_nodes=doc.min_nodes,
        max_restarts=doc.max_restarts, spares=doc.spares,
        racks={name: tuple(members) for name, members in doc.racks.items()},
        power_domains={name: tuple(members) for name, members in doc.power_domains.items()},
    )


def _workload(doc: Any, world_size: int) -> records.Workload:
    """The record of the section as its kind reads it (the kind validated it already; the
    world size may settle a default, as the harness's warm start from 16 ranks)."""
    workload, problems = lookup_workload(kind_of(doc)).validate(doc, world_size)
    assert workload is not None and not problems, problems
    return workload.spec


def trigger_kind(doc: TriggerDoc) -> str:
    (kind,) = (name for name in TriggerDoc.model_fields if name in doc.model_fields_set)
    return kind


def _trigger(doc: TriggerDoc) -> records.Trigger:
    kind = trigger_kind(doc)
    return TRIGGER_FORMS[kind].build(getattr(doc, kind))


def _fault(index: int, doc: FaultDoc) -> records.FaultSpec:
    fault_type = lookup(doc.type)
    params = fault_type.params_model.model_validate(doc.params or {}).model_dump()
    return records.FaultSpec(
        index=index, type=fault_type.type_name, target=doc.target.model_dump(exclude_unset=True),
        trigger=_trigger(doc.trigger), params=params, probability=float(doc.probability),
        name=doc.name,
    )


def _bound(doc: BoundDoc | FractionBoundDoc | None) -> records.Bound | None:
    if doc is None:
        return None
    return records.Bound(max=None if doc.max is None else float(doc.max),
                         min=None if doc.min is None else float(doc.min))


def _targets(doc: TargetsDoc | None) -> records.Targets:
    if doc is None:
        return records.Targets()
    extra: dict[str, Any] = {}
    if isinstance(doc.final_state, LossWithinDoc):
        extra = {"final_state": "loss_within", "loss_tolerance": float(doc.final_state.loss_within)}
    elif doc.final_state is not None:
        extra = {"final_state": doc.final_state}
    if isinstance(doc.data, DataBoundsDoc):
        extra.update(data="bounds", data_max_lost=doc.data.max_lost, data_max_duplicated=doc.data.max_duplicated)
    elif doc.data is not None:
        extra.update(data=doc.data, data_max_lost=0, data_max_duplicated=0 if doc.data == "exactly_once" else None)
    # Every metric target of the catalogue is a key of the document (chaos.schema.models).
    bounds = {spec.key: _bound(getattr(doc, spec.key, None)) for spec in target_specs()}
    return records.Targets.with_bounds(bounds, attribution=doc.attribution, completes=doc.completes, **extra)


def backend_choice(choice: str | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``local`` or ``{docker: {...}}`` -> (name, options as written)."""
    if isinstance(choice, str):
        return choice, {}
    ((name, options),) = choice.items()
    return name, dict(options or {})


def _backend(choice: str | dict[str, Any] | None) -> records.Backend:
    if choice is None:
        return records.Backend()
    from chaos.cluster import lookup_backend

    name, options = backend_choice(choice)
    options_model = getattr(lookup_backend(name), "options_model", None)
    if options_model is not None:
        options = options_model.model_validate(options).model_dump()
    return records.Backend(name=name, options=options)
