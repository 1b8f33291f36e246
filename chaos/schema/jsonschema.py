"""The JSON Schema of scenario files (``trainchaos schema``), for editors.

Generated, never written by hand: the scenario's sections from ``chaos.schema.models``, each
fault type's params from its ``params_model`` (chosen by ``type``, with the target kinds and
triggers the type takes), each backend's options from its ``options_model``, the workload section from the kinds
registered (``chaos.schema.workload_doc``), and a workload kind's options
(``workload.harness``) from the dataclasses its kind declares (``Workload.options_type``:
the harness's own configuration) or from the pydantic model its key is declared with. Cross-field
rules (a rank outside the world, at_step beyond the run) are left to ``trainchaos validate``.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import core_schema

from chaos.faults.base import FaultType, known_types
from chaos.schema.models import ScenarioDoc
from chaos.schema.workload_doc import workload_doc_model
from chaos.workload import Workload, known_workloads

__all__ = ["SCHEMA_DIALECT", "SCHEMA_ID", "scenario_json_schema"]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID = "urn:trainchaos:scenario"
_REF = "#/$defs/{model}"

_TARGET_KEYS = {"rank": ["rank", "ranks", "replica_group"],
                "node": ["node", "nodes", "replica_group", "rack", "power_domain"], "job": ["job"]}
_RANDOM_PICKS = {"rank": ["rank"], "node": ["node", "rack", "power_domain"], "job": []}


class _Generator(GenerateJsonSchema):
    """pydantic's generator, minus the noise: no per-field titles, no ``default: null`` on a
    key that may be left out but not written as null."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> dict[str, Any]:
        json_schema = super().default_schema(schema)
        if "default" in json_schema and json_schema["default"] is None and not _nullable(json_schema):
            del json_schema["default"]
        return json_schema


def _nullable(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "null" or any(s.get("type") == "null"
                                               for s in schema.get("anyOf", ()))


def _model_schema(model: type[BaseModel], defs: dict[str, Any]) -> dict[str, Any]:
    schema = model.model_json_schema(schema_generator=_Generator, ref_template=_REF)
    defs.update(schema.pop("$defs", {}))
    return schema


def scenario_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a scenario file."""
    defs: dict[str, Any] = {}
    body = _model_schema(ScenarioDoc, defs)
    workload = workload_doc_model()
    defs[workload.__name__] = _model_schema(workload, defs)
    body["properties"]["workload"] = {"$ref": _REF.format(model=workload.__name__),
                                      "description": body["properties"]["workload"].get("description")}
    for kind in known_workloads().values():
        if kind.options_type() is not None:
            _add_workload_options(kind, defs["WorkloadDoc"]["properties"][kind.kind], defs)
    _add_fault_types(defs["FaultDoc"], defs)
    _add_backends(body["properties"], defs)
    body.pop("title", None)
    schema = {
        "$schema": SCHEMA_DIALECT,
        "$id": SCHEMA_ID,
        "title": "trainchaos scenario",
        **body,
        "$defs": dict(sorted(defs.items())),
    }
    _tidy(schema)
    return schema


# --------------------------------------------------------------------------- workload options


def _sections(cls: type) -> dict[str, type]:
    """A workload's options dataclass and the dataclasses nested in it, by name."""
    found = {cls.__name__: cls}
    for hint in typing.get_type_hints(cls).values():
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            found.update(_sections(hint))
    return found


def _add_workload_options(kind: type[Workload], prop: dict[str, Any], defs: dict[str, Any]) -> None:
    options = kind.options_type()
    assert options is not None
    schema = TypeAdapter(options).json_schema(schema_generator=_Generator, ref_template=_REF)
    option_defs = {**schema.pop("$defs", {}), options.__name__: schema}
    sections = _sections(options)
    for name, section in option_defs.items():
        cls = sections[name]
        section["additionalProperties"] = False
        section["description"] = kind.options_description.format(section=name)
        for field, doc in kind.option_docs(cls).items():
            if field in section.get("properties", {}):
                section["properties"][field]["description"] = doc
        for field, field_schema in section.get("properties", {}).items():
            field_schema.setdefault("description", f"The {field} section.")
    defs.update(option_defs)
    description = prop.get("description")
    prop.clear()
    prop.update({"anyOf": [{"$ref": _REF.format(model=options.__name__)}, {"type": "null"}],
                 "default": None, "description": description})


# --------------------------------------------------------------------------- fault types


def _add_fault_types(fault: dict[str, Any], defs: dict[str, Any]) -> None:
    types = known_types()
    fault["properties"]["type"]["enum"] = list(types)
    fault["allOf"] = [_fault_type_rule(name, cls, defs) for name, cls in types.items()]


def _fault_type_rule(name: str, cls: type[FaultType], defs: dict[str, Any]) -> dict[str, Any]:
    params = _model_schema(cls.params_model, defs)
    params["title"] = f"{name} params"
    params["description"] = f"Parameters of {name}: {cls.summary}"
    defs[f"{name}.params"] = params
    kinds = [k for k in cls.target_kinds if k in _TARGET_KEYS]
    keys = list(cls.target_keys) if cls.target_keys else list(dict.fromkeys(
        key for k in kinds for key in _TARGET_KEYS[k]))
    picks = [pick for k in kinds for pick in _RANDOM_PICKS[k]
             if not cls.target_keys or pick in cls.target_keys]
    target = {
        "propertyNames": {"enum": [*keys, "random"]},
        "properties": {"random": {"enum": picks}},
    }
    then: dict[str, Any] = {"properties": {
        "params": {"anyOf": [{"$ref": _REF.format(model=f"{name}.params")}, {"type": "null"}]},
        "target": target,
    }}
    if cls.in_process:
        then["properties"]["trigger"] = {"required": ["at_step"]}
    return {"if": {"properties": {"type": {"const": name}}, "required": ["type"]}, "then": then}


# --------------------------------------------------------------------------- backends


def _add_backends(props: dict[str, Any], defs: dict[str, Any]) -> None:
    from chaos.cluster import known_backends

    backends = known_backends()
    options: dict[str, Any] = {}
    for name, cls in backends.items():
        model = getattr(cls, "options_model", None)
        if model is None:
            schema: dict[str, Any] = {"type": "object", "maxProperties": 0}
        else:
            defs[f"{name}.options"] = _model_schema(model, defs)
            defs[f"{name}.options"]["title"] = f"{name} options"
            schema = {"$ref": _REF.format(model=f"{name}.options")}
        options[name] = {"anyOf": [schema, {"type": "null"}]}
    props["backend"] = {
        "description": props["backend"].get("description"),
        "anyOf": [
            {"enum": list(backends)},
            {"type": "object", "minProperties": 1, "maxProperties": 1,
             "properties": options, "additionalProperties": False},
            {"type": "null"},
        ],
        "default": None,
    }


def _tidy(node: Any) -> None:
    """Descriptions on one line (they come from indented docstrings)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                node[key] = " ".join(value.split())
            else:
                _tidy(value)
    elif isinstance(node, list):
        for item in node:
            _tidy(item)
