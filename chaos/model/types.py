"""Building blocks of the schema: the strict base model, shared value types, the markers
that shape error messages, and the words messages and the reference use for types and limits.

Nothing here imports the rest of trainchaos: fault and backend modules build their parameter
models on :class:`StrictModel` without import cycles.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Union

import annotated_types
from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, StringConstraints
from pydantic.fields import FieldInfo

__all__ = [
    "MAX_BYTES",
    "MAX_SECONDS",
    "MAX_STEPS",
    "NAME_RULE",
    "Deferred",
    "Expect",
    "Name",
    "NodeList",
    "Noun",
    "RankList",
    "StrictModel",
    "accepts_none",
    "close_match",
    "describe_value",
    "expected_text",
    "fmt_number",
    "given_keys",
    "index_list",
    "is_model",
    "is_tagged_union",
    "limits_text",
    "literal_values",
    "marker",
    "model_keys",
    "name_or_mapping",
    "optional_key",
    "record_default",
    "type_text",
    "union_members",
    "unwrap",
]


class StrictModel(BaseModel):
    """Base of every model of the schema (scenario sections, fault parameters).

    Unknown keys are errors (a typo must not silently drop a setting); no coercion: ``true``
    is not a number and ``"3"`` is not an int (an int is fine where a number is expected);
    ``.inf`` and ``.nan`` are rejected. Each field's docstring is its documentation: the
    JSON Schema description, the reference in docs/scenario.md, ``trainchaos faults``.
    """

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False,
                              use_attribute_docstrings=True, frozen=True)

    key_noun: ClassVar[str] = "key"
    """How messages name this mapping's keys: "unknown trigger 'at_stp'; allowed: ..."."""

    misplaced_params_where: ClassVar[str | None] = None
    """Set on the mappings a fault's own parameter is often written in by mistake (target,
    the fault's envelope): an unknown key there that is some fault type's parameter says it
    belongs in params (``chaos.schema.suggest.misplaced_param``)."""


@dataclass(frozen=True)
class Deferred:
    """``Annotated[Any, PlainValidator(...), Deferred(model)]``: a key whose model is built when
    asked (``model()``), from what is registered then: errors are located, types named and
    docs written from that model (``unwrap`` resolves it), as for a model declared in place."""

    model: typing.Callable[[], type[BaseModel]]


@dataclass(frozen=True)
class Noun:
    """Marks an enumerated value: an unknown one reads "unknown <text> 'x'; allowed: ..."
    (without it: "'x' is not allowed; allowed values: ...")."""

    text: str


@dataclass(frozen=True)
class Expect:
    """What a wrong-shaped value should have been: "expected <text>, got int 3"."""

    text: str


# Upper bounds for numbers that have no natural one, so that every number a scenario can
# hold has a documented range (a typo's 10**30 is refused, not carried into a plan).
MAX_SECONDS = 7 * 24 * 3600
"""Durations, delays and timeouts: a week, longer than any run of this tool."""
MAX_STEPS = 10_000_000
"""Step counts: more than any run of this tool trains in its timeout."""
MAX_BYTES = 2**50
"""Byte counts and offsets: a PiB."""

NAME_RULE = ("lowercase letters, digits, '.', '_' and '-', starting with a letter or digit, "
             "at most 100 characters")
# Names become report folders and rack/domain labels: no path separators, no leading dot.
Name = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,99}$")]


def _no_repeats(noun: str) -> AfterValidator:
    def check(items: list[Any]) -> list[Any]:
        if len(set(items)) != len(items):
            raise ValueError(f"lists the same {noun} twice: {items}")
        return items
    return AfterValidator(check)


def index_list(noun: str) -> Any:
    """A non-empty list of distinct numbers >= 0 (ranks, nodes); upper bounds are the
    topology's, checked across fields."""
    return Annotated[
        list[Annotated[int, Field(ge=0)]],
        Field(min_length=1, json_schema_extra={"uniqueItems": True}),
        _no_repeats(noun),
        Expect(f"a non-empty list of {noun} numbers"),
    ]


def record_default(record: type, name: str) -> Any:
    """The default of a ``chaos.model.scenario`` record's field: declared there, once."""
    (found,) = (f for f in dataclasses.fields(record) if f.name == name)
    assert found.default is not dataclasses.MISSING, f"{record.__name__}.{name} has no plain default"
    return found.default


def optional_key(**constraints: Any) -> Any:
    """A key that may be left out but not written as null (``rank: null`` is an error): the
    None default is never validated, and the JSON Schema shows no default for it."""
    return Field(None, **constraints)


def given_keys(model: StrictModel) -> list[str]:
    return [name for name in type(model).model_fields if name in model.model_fields_set]


def name_or_mapping(value: Any) -> str:
    return "mapping" if isinstance(value, dict) else "name"


RankList = index_list("rank")
NodeList = index_list("node")


# --------------------------------------------------------------------------- annotations


def unwrap(annotation: Any, metadata: list[Any] | None = None) -> tuple[Any, list[Any]]:
    """Strip ``Annotated`` (collecting its metadata) and ``X | None`` down to the value type.

    A tagged union (``Discriminator`` in the metadata) is returned as the union itself.
    """
    metadata = list(metadata or [])
    while True:
        if typing.get_origin(annotation) is Annotated:
            annotation, *extra = typing.get_args(annotation)
            for item in extra:
                metadata.extend(item.metadata if isinstance(item, FieldInfo) else [item])
                if isinstance(item, FieldInfo) and item.discriminator is not None:
                    metadata.append(item.discriminator)
            continue
        if _is_union(annotation):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) == 1:
                annotation = members[0]
                continue
        deferred = marker(metadata, Deferred)
        if annotation is Any and deferred is not None:
            return deferred.model(), [m for m in metadata if m is not deferred]
        return annotation, metadata


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (Union, types.UnionType)


def union_members(annotation: Any) -> list[tuple[str | None, Any]]:
    """(tag, member) of a union, ``None`` excluded; the tag is the member's ``Tag``, if any."""
    out = []
    for member in typing.get_args(annotation):
        if member is type(None):
            continue
        tag = None
        if typing.get_origin(member) is Annotated:
            tag = next((getattr(m, "tag", None) for m in typing.get_args(member)[1:]
                        if type(m).__name__ == "Tag"), None)
        out.append((tag, member))
    return out


def is_tagged_union(annotation: Any, metadata: list[Any]) -> bool:
    return _is_union(annotation) and any(isinstance(m, Discriminator) for m in metadata)


def literal_values(annotation: Any) -> tuple[Any, ...] | None:
    return typing.get_args(annotation) if typing.get_origin(annotation) is Literal else None


def model_keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def marker(metadata: list[Any], kind: type) -> Any:
    return next((m for m in metadata if isinstance(m, kind)), None)


# --------------------------------------------------------------------------- words


def describe_value(value: Any) -> str:
    """A value as a YAML user would name it: ``str 'abc'``, ``a mapping``, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"bool {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list" if value else "an empty list"
    return f"{type(value).__name__} {value!r}"


def fmt_number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def close_match(word: Any, candidates: typing.Iterable[str]) -> str:
    """"; did you mean 'x'?" when a candidate is close, else ";"."""
    if not isinstance(word, str):
        return ";"
    return _close_match(word, tuple(candidates))


@functools.lru_cache(maxsize=1024)
def _close_match(word: str, candidates: tuple[str, ...]) -> str:
    # Cached: a file with thousands of the same misspelling asks once.
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ";"


def limits_text(metadata: list[Any]) -> str:
    """``between 1 and 100``, ``> 0 and <= 1``, ``>= 0``: the bounds in ``metadata``."""
    lo: Any = None  # each bound is any comparable number pydantic kept
    hi: Any = None
    exclusive = False
    for m in metadata:
        if isinstance(m, annotated_types.Ge):
            lo = m.ge
        elif isinstance(m, annotated_types.Gt):
            lo, exclusive = m.gt, True
        elif isinstance(m, annotated_types.Le):
            hi = m.le
        elif isinstance(m, annotated_types.Lt):
            hi = m.lt
    if lo is not None and hi is not None and not exclusive:
        return f"between {fmt_number(lo)} and {fmt_number(hi)}"
    parts = []
    if lo is not None:
        parts.append(f"{'>' if exclusive else '>='} {fmt_number(lo)}")
    if hi is not None:
        parts.append(f"<= {fmt_number(hi)}")
    return " and ".join(parts)


def expected_text(annotation: Any, metadata: list[Any]) -> str:
    """What a value of this type looks like, for "expected <...>, got <...>"."""
    expect = marker(metadata, Expect)
    if expect is not None:
        return expect.text
    annotation, metadata = unwrap(annotation, metadata)
    if is_tagged_union(annotation, metadata) or _is_union(annotation):
        return " or ".join(expected_text(m, []) for _, m in union_members(annotation))
    values = literal_values(annotation)
    if values is not None:
        return "one of " + ", ".join(map(str, values))
    if is_model(annotation):
        return "a mapping with keys " + ", ".join(model_keys(annotation))
    return {bool: "true or false", int: "int", float: "int or float", str: "a string"}.get(
        annotation, {list: "a list", dict: "a mapping", tuple: "a list"}.get(
            typing.get_origin(annotation), "a valid value"))


def type_text(annotation: Any, metadata: list[Any] | None = None, *, nested: bool = False) -> str:
    """The type as the reference names it: ``int``, ``number``, ``list of int``, ``name``."""
    nullable = accepts_none(annotation) and not nested
    annotation, metadata = unwrap(annotation, metadata)
    if _is_union(annotation):
        text = " or ".join(type_text(m, nested=True) for _, m in union_members(annotation))
    elif literal_values(annotation) is not None:
        text = "string"
    elif is_model(annotation):
        text = "mapping"
    elif annotation is str and any(getattr(m, "pattern", None) for m in metadata):
        text = "name"
    elif typing.get_origin(annotation) in (list, tuple):
        text = "list of " + type_text(typing.get_args(annotation)[0], nested=True)
    elif typing.get_origin(annotation) is dict:
        key, value = typing.get_args(annotation)
        text = "mapping" if value is Any else (
            f"mapping of {type_text(key, nested=True)} to {type_text(value, nested=True)}")
    else:
        text = {bool: "bool", int: "int", float: "number", str: "string"}.get(annotation, "any")
    return text + (" or null" if nullable else "")


def accepts_none(annotation: Any) -> bool:
    """Whether ``annotation`` (before unwrapping) allows null."""
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    return _is_union(annotation) and type(None) in typing.get_args(annotation)
