"""The reference section of docs/scenario.md (``trainchaos schema --markdown``), generated
from the same declarations as validation and the JSON Schema: the scenario models, each
fault type's ``params_model``, each backend's ``options_model`` and each workload kind's
options dataclasses (``Workload.options_type``: the harness's configuration).

The generated text sits between two markers in docs/scenario.md; ``replace_reference``
swaps it in place, and a unit test fails when the file is out of date.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from chaos.faults.base import known_types
from chaos.metrics.catalogue import target_specs
from chaos.model.types import is_model, limits_text, literal_values, type_text, unwrap
from chaos.schema.fault_model import (
    AfterEventDoc,
    EveryDoc,
    FaultDoc,
    PoissonDoc,
    RandomDoc,
    TargetDoc,
    TriggerDoc,
)
from chaos.schema.models import ScenarioDoc, TopologyDoc
from chaos.schema.targets_model import (
    BoundDoc,
    DataBoundsDoc,
    FractionBoundDoc,
    LossWithinDoc,
    TargetsDoc,
)
from chaos.schema.workload_doc import workload_doc_model
from chaos.workload import Workload, known_workloads

__all__ = ["BEGIN", "END", "reference_markdown", "replace_reference"]

BEGIN = ("<!-- BEGIN REFERENCE: generated from chaos/schema by "
         "`trainchaos schema --markdown --out docs/scenario.md`; do not edit by hand -->")
END = "<!-- END REFERENCE -->"

# (heading, model, what the section says beyond the model's own docstring)
def _targets_note() -> str:
    """Which targets are bounds and which are fractions, from the metric catalogue."""
    bounds = [s.key for s in target_specs() if s.target == "bound"]
    fractions = [s.key for s in target_specs() if s.target == "fraction_bound"]
    return (f"Bounds ({', '.join(bounds)}) are `{{max, min}}` mappings; "
            + ", ".join(f"{k}'s" for k in fractions) + " are fractions.")


def _workload_note() -> str:
    """Where each kind's options are listed (the kinds that document theirs)."""
    listed = [kind for kind in known_workloads().values() if _options_model(kind) or kind.options_type()]
    return "Each kind's options are listed under " + ", ".join(
        f"[`workload.{kind.kind}`](#{_anchor(kind.kind)})" for kind in listed) + "." if listed else ""


def _anchor(kind: str) -> str:
    """GitHub's anchor of the heading ``workload.<kind>` options``."""
    return f"workload{kind}-options"


_SECTIONS: list[tuple[str, type[BaseModel] | Callable[[], type[BaseModel]], str | Callable[[], str]]] = [
    ("Top level", ScenarioDoc, ""),
    # built from the kinds registered when the reference is generated
    ("`workload`", workload_doc_model, _workload_note),
    ("`topology`", TopologyDoc, ""),
    ("`faults[]`", FaultDoc, "The params of each type are listed under "
     "[Fault types](#fault-types)."),
    ("`faults[].target`", TargetDoc, ""),
    ("`faults[].trigger`", TriggerDoc, ""),
    ("`trigger.after_event`", AfterEventDoc, ""),
    ("`trigger.random`", RandomDoc, ""),
    ("`trigger.poisson`", PoissonDoc, ""),
    ("`trigger.every`", EveryDoc, ""),
    ("`targets`", TargetsDoc, _targets_note()),
    ("Bound: `{max, min}`", BoundDoc, ""),
    ("Fraction bound: `{max, min}`", FractionBoundDoc, ""),
    ("`targets.final_state: {loss_within}`", LossWithinDoc, ""),
    ("`targets.data: {max_lost, max_duplicated}`", DataBoundsDoc, ""),
]


def reference_markdown() -> str:
    """The generated reference, markers included."""
    out = [BEGIN, "", "## Reference", "",
           "Every key, its type, default and allowed values, generated from the schema "
           "(`trainchaos schema` prints the same as JSON Schema). A key marked *required* "
           "must be given; *—* in the default column means the key is simply left out.", ""]
    for heading, declared, noted in _SECTIONS:
        model = declared if isinstance(declared, type) else declared()
        note = noted if isinstance(noted, str) else noted()
        out += [f"### {heading}", "", _doc(model.__doc__)]
        if note:
            out += ["", note]
        out += ["", *_model_table(model), ""]
    for kind in known_workloads().values():
        options_model = _options_model(kind)
        if kind.options_type() is not None:
            out += _workload_options_section(kind)
        elif options_model is not None:
            out += [f"### `workload.{kind.kind}` options", "", kind.options_intro or _doc(options_model.__doc__),
                    "", *_model_table(options_model, "option"), ""]
    out += _fault_types_section()
    out += _backends_section()
    out += [END]
    return "\n".join(out) + "\n"


def replace_reference(text: str) -> str:
    """``text`` (docs/scenario.md) with its generated section replaced by the current one."""
    if BEGIN not in text or END not in text:
        raise ValueError("no reference markers in the file: add the two lines\n"
                         f"{BEGIN}\n{END}\nwhere the reference belongs")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + reference_markdown().rstrip("\n") + tail


# --------------------------------------------------------------------------- tables


def _doc(text: str | None) -> str:
    return " ".join((text or "").split())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _value(value: Any) -> str:
    if isinstance(value, BaseModel):
        return "defaults"
    if value is None or value == "" or isinstance(value, bool | dict | list):
        return f"`{json.dumps(value)}`"
    return f"`{value}`"


def _row(key: str, type_name: str, default: str, allowed: str, doc: str) -> str:
    return "| " + " | ".join(_cell(c) for c in (f"`{key}`", type_name, default, allowed, doc)) + " |"


def _header(first: str = "key") -> list[str]:
    return [f"| {first} | type | default | allowed | description |", "|---|---|---|---|---|"]


def _allowed(annotation: Any, metadata: list[Any]) -> str:
    value_type, metadata = unwrap(annotation, metadata)
    values = literal_values(value_type)
    if values is not None:
        return ", ".join(f"`{v}`" for v in values)
    return limits_text(metadata)


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "*required*"
    default = info.get_default(call_default_factory=True)
    if default is None and "null" not in type_text(info.annotation):
        return "—"
    return _value(default)


def _model_table(model: type[BaseModel], first: str = "key") -> list[str]:
    if not model.model_fields:
        return [f"Takes no {first}s."]
    rows = _header(first)
    for name, info in model.model_fields.items():
        rows.append(_row(info.alias or name, type_text(info.annotation, list(info.metadata)),
                         _default(info), _allowed(info.annotation, list(info.metadata)),
                         _doc(info.description)))
    return rows


# --------------------------------------------------------------------------- derived parts


def _options_model(kind: type[Workload]) -> type[BaseModel] | None:
    """The pydantic model a kind declares its own key's options with, if it does."""
    declared = kind.section_fields().get(kind.kind)
    model = unwrap(declared[0])[0] if declared is not None else None
    return model if is_model(model) else None


def _workload_options_section(kind: type[Workload]) -> list[str]:
    options = kind.options_type()
    assert options is not None
    out = [f"### `workload.{kind.kind}` options", "", kind.options_intro, ""]
    sections: list[tuple[str, type]] = [("", options)]
    hints = typing.get_type_hints(options)
    sections += [(f.name, hints[f.name]) for f in dataclasses.fields(options)
                 if dataclasses.is_dataclass(hints[f.name])]
    for prefix, cls in sections:
        if prefix:
            out += [f"Section `{prefix}`:", ""]
        docs = kind.option_docs(cls)
        section_hints = typing.get_type_hints(cls)
        out += _header("option")
        for f in dataclasses.fields(cls):
            hint = section_hints[f.name]
            if dataclasses.is_dataclass(hint):
                continue
            default = f.default if f.default is not dataclasses.MISSING else None
            out.append(_row(f.name, type_text(hint), _value(default), _allowed(hint, []),
                            docs.get(f.name, "")))
        out.append("")
    return out


def _support_table() -> list[str]:
    """Fault type -> family, backends, capabilities, triggers: from the registry
    (``FaultType.requires``, ``supported_backends()``, ``in_process``) and each backend's
    declared ``capabilities``, so the family pages link here instead of keeping lists."""
    out = ["### Where each fault type runs", "",
           "Backends: the registered backends that declare every capability the type "
           "requires (`chaos/cluster/capabilities.py`); validation refuses any other. "
           "In-process types are delivered by the probe inside the rank and fire only at "
           "`at_step`; the others are injected from outside the job and take every trigger.",
           "", "| type | family | backends | requires | triggers |", "|---|---|---|---|---|"]
    for name, cls in sorted(known_types().items(), key=lambda kv: (kv[1].family, kv[0])):
        requires = ", ".join(f"`{c.__name__}`" for c in cls.requires) or "—"
        backends = ", ".join(f"`{b}`" for b in cls.supported_backends())
        triggers = "`at_step` only (in-process)" if cls.in_process else "any"
        out.append(f"| [`{name}`](#{name}) | {cls.family} | {backends} | {requires} | {triggers} |")
    return [*out, ""]


def _fault_types_section() -> list[str]:
    out = ["### Fault types", "",
           "`trainchaos faults -v` prints the same with each type's fidelity statement.", "",
           *_support_table()]
    for name, cls in known_types().items():
        triggers = "at_step only (in-process)" if cls.in_process else "any"
        out += [f"#### `{name}`", "", _doc(cls.summary), "",
                f"Targets: {cls.describe_targets()}. Triggers: {triggers}.", "",
                *_model_table(cls.params_model, "param"), ""]
    return out


def _backends_section() -> list[str]:
    from chaos.cluster import known_backends

    out = ["### Backends", "",
           "`backend: NAME`, or `backend: {NAME: {options}}` with the backend's options.", ""]
    for name, cls in known_backends().items():
        summary = getattr(cls, "summary", None) or _doc(cls.__doc__).split(". ")[0]
        summary = _doc(summary).rstrip(".")
        out += [f"#### `{name}`", "", summary[:1].upper() + summary[1:] + ".", ""]
        model = getattr(cls, "options_model", None)
        out += [*(_model_table(model, "option") if model is not None else ["Takes no options."]),
                ""]
    return out
