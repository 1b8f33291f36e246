"""The ``workload`` section of a scenario, declared by the registered workload kinds.

``workload: {KIND: options}`` names any registered kind, a built-in one or a plugin's
(``chaos.workload``). No kind is named here: the section's model is built from the kinds
registered when it is asked for (``workload_doc_model``), each kind contributing the keys it
owns (``Workload.section_fields``: its own key; ``command`` also ``progress_regex`` and
``steps`` beside it). Validation, the JSON Schema and the reference in docs/scenario.md all
read that one model, so a plugin's kind is validated, listed and documented as a built-in
one is.

What the model checks: each key's value by its annotation, and that exactly one kind is
given. What needs the kind (``section_problems``): a key of another kind written beside it,
in the kind's words (``Workload.misplaced_key``). The kind's own ``validate`` comes after
(``chaos.schema.checks``).
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, ClassVar, Self

from pydantic import ConfigDict, PlainValidator, create_model, model_validator

from chaos.model.types import Deferred, StrictModel
from chaos.schema.suggest import spelling
from chaos.workload import Workload, known_workloads

__all__ = ["WorkloadField", "section_problems", "workload_doc_model"]


class _WorkloadDocBase(StrictModel):
    """What every built section shares; ``owners`` and ``kinds`` are set per build."""

    model_config = ConfigDict(json_schema_extra=lambda schema, cls: _one_kind_schema(schema, cls.owners))

    owners: ClassVar[dict[str, type[Workload]]] = {}
    """Key -> the kind that owns it."""
    kinds: ClassVar[dict[str, type[Workload]]] = {}
    """Kind name -> its class, in the order the reference lists them."""

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        given = [name for name in self.kinds if name in self.model_fields_set]
        if len(given) != 1:
            told = ", ".join(f"'{name}' ({cls.kind_hint})" if cls.kind_hint else f"'{name}'"
                             for name, cls in self.kinds.items())
            raise ValueError(f"give exactly one workload kind: {told}; got "
                             + (" and ".join(f"'{k}'" for k in given) if given else "none"))
        return self

    @classmethod
    def unknown_key_message(cls, key: Any) -> str:
        """An unknown key: a misspelt key of a kind that takes keys beside its own, or else
        an unknown kind, told with the kinds known."""
        kinds = list(cls.kinds)
        beside = {name: owner for name, owner in cls.owners.items() if name not in cls.kinds}
        close = spelling(key, cls.owners)
        if close in beside:
            owner = beside[close]
            keys = [name for name, cls_ in cls.owners.items() if cls_ is owner]
            return f"unknown key {key!r}; did you mean {close!r}? {owner.kind} takes {', '.join(keys)}"
        hint = f"; did you mean {close!r}?" if close else ";"
        also = "; ".join(f"{owner.kind} also takes {', '.join(n for n, o in beside.items() if o is owner)}"
                         for owner in dict.fromkeys(beside.values()))
        return (f"unknown workload kind {key!r}{hint} known: {', '.join(kinds)}"
                + (f" ({also} beside it)" if also else ""))


def workload_doc_model() -> type[_WorkloadDocBase]:
    """The model of the ``workload`` section for the kinds registered now."""
    return _model_for(tuple(known_workloads().values()))


@functools.cache
def _model_for(kinds: tuple[type[Workload], ...]) -> type[_WorkloadDocBase]:
    fields: dict[str, Any] = {}
    owners: dict[str, type[Workload]] = {}
    for cls in kinds:
        for name, definition in cls.section_fields().items():
            if name in owners:
                raise TypeError(f"workload kinds {owners[name].kind!r} and {cls.kind!r} both declare "
                                f"the key {name!r} under workload:")
            fields[name], owners[name] = definition, cls
        if cls.kind not in owners:
            raise TypeError(f"workload kind {cls.kind!r} declares no key of its own name "
                            "(Workload.section_fields)")
    doc = ("The training job under test: exactly one kind, by its key (`workload: {KIND: options}`): "
           + ", ".join(f"`{cls.kind}`" for cls in kinds)
           + ". Any registered kind may be named; `trainchaos schema` lists them.")
    model = create_model("WorkloadDoc", __base__=_WorkloadDocBase, __doc__=doc, **fields)
    model.owners = owners
    model.kinds = {cls.kind: cls for cls in kinds}
    return model


def _one_kind_schema(schema: dict[str, Any], owners: dict[str, type[Workload]]) -> None:
    """Exactly one kind's key; a key a kind owns beside its own only with that kind."""
    beside = {name: owner for name, owner in owners.items() if owner.kind != name}
    schema["oneOf"] = []
    for name, owner in owners.items():
        if owner.kind != name:
            continue
        foreign = [key for key, other in beside.items() if other is not owner]
        rule: dict[str, Any] = {"required": [name]}
        if foreign:
            rule["not"] = {"anyOf": [{"required": [key]} for key in foreign]}
        schema["oneOf"].append(rule)


def _validate(value: Any) -> Any:
    return workload_doc_model().model_validate(value)


WorkloadField = Annotated[Any, PlainValidator(_validate), Deferred(workload_doc_model)]
"""The annotation of ``ScenarioDoc.workload``: validated by the model of the kinds registered
when a scenario is read."""


def section_problems(section: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """Keys of another kind written beside the section's one kind, each in that kind's words.
    Read from the section as written, so that a bad value elsewhere in it hides none."""
    if not isinstance(section, dict):
        return []
    model = workload_doc_model()
    given = [name for name in model.kinds if name in section]
    if len(given) != 1:
        return []  # the model's own error says which kinds to choose from
    cls = model.kinds[given[0]]
    return [(("workload", key), cls.misplaced_key(key, model.owners[key]))
            for key in section if key in model.owners and model.owners[key] is not cls]
