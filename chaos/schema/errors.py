"""pydantic's validation errors, told the way a scenario author reads them.

Each pydantic error becomes one :class:`Problem`: a location in the user's terms
(``faults[0].trigger.at_step``: the union tags and ``[key]`` markers pydantic adds are
dropped) and a message in the project's words, built from the model's own declaration: the
allowed keys of the mapping, the field's type, bounds, enumerated values and description.

    unknown key 'fautls'; did you mean 'faults'? allowed: name, description, ...
    expected int, got str 'two'
    500 is out of range: must be between 1 and 100
    'SIGKIL' is not allowed; did you mean 'SIGKILL'? allowed values: SIGKILL, SIGTERM, ...
    required: the scenario's name, ...

One mistake, one message: a required key left out beside an unknown key is most likely
that key misspelt, so only the unknown key is told (with its did-you-mean and the allowed
keys), not also the missing one.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from chaos.model.types import (
    NAME_RULE,
    Expect,
    Noun,
    close_match,
    describe_value,
    expected_text,
    fmt_number,
    is_model,
    is_tagged_union,
    limits_text,
    literal_values,
    marker,
    model_keys,
    union_members,
    unwrap,
)

__all__ = ["Path", "Problem", "file_order", "location", "translate"]

Path = tuple[str | int, ...]
"""A location: mapping keys as str, list positions as int."""


@dataclass(frozen=True)
class Problem:
    path: Path
    message: str

    @property
    def location(self) -> str:
        return location(self.path)


def location(path: Iterable[str | int]) -> str:
    out = ""
    for part in path:
        key = str(part) or "''"  # an empty key (`'': 1`) still has a place to name
        out += f"[{part}]" if isinstance(part, int) else (f".{key}" if out else key)
    return out


_TYPE_ERRORS = frozenset({
    "int_type", "int_parsing", "int_from_float", "float_type", "float_parsing", "bool_type",
    "bool_parsing", "string_type", "list_type", "tuple_type", "dict_type", "model_type",
    "model_attributes_type", "dataclass_type", "is_instance_of", "none_required",
})
_UNKNOWN_KEY = frozenset({"extra_forbidden", "invalid_key"})
_RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})


@dataclass
class _Spot:
    """Where a pydantic ``loc`` points, in the declaration."""

    path: list[str | int] = field(default_factory=list)
    annotation: Any = Any
    metadata: list[Any] = field(default_factory=list)
    field: FieldInfo | None = None
    """Set when the spot is a model field itself (not an item of it)."""
    owner: type[BaseModel] | None = None
    """The model whose key this spot is."""


def _locate(root: type[BaseModel], loc: Sequence[str | int]) -> _Spot:
    spot = _Spot(annotation=root)
    parts = list(loc)
    while True:
        spot.annotation, spot.metadata = unwrap(spot.annotation, spot.metadata)
        if is_tagged_union(spot.annotation, spot.metadata) and parts:
            tag = parts.pop(0)
            member = dict(union_members(spot.annotation)).get(str(tag), Any)
            spot.annotation = member  # keep the field's metadata: its Expect still applies
            continue
        if not parts:
            return spot
        part = parts.pop(0)
        ann = spot.annotation
        origin = typing.get_origin(ann)
        if is_model(ann):
            spot.owner = ann
            spot.path.append(str(part))
            found = next((f for name, f in ann.model_fields.items()
                          if (f.alias or name) == part), None)
            spot.field = found
            spot.annotation = found.annotation if found else Any
            spot.metadata = list(found.metadata) if found else []
            continue
        spot.field, spot.metadata = None, []
        if origin in (list, tuple) and isinstance(part, int):
            spot.path.append(part)
            spot.annotation = typing.get_args(ann)[0]
        elif origin is dict:
            spot.path.append(str(part))
            key_type, value_type = typing.get_args(ann)
            if parts and parts[0] == "[key]":
                parts.pop(0)
                spot.annotation = key_type
            else:
                spot.annotation = value_type
        else:
            spot.path.append(part if isinstance(part, int) else str(part))
            spot.annotation = Any


def _description(info: FieldInfo | None) -> str:
    text = " ".join((info.description or "").split()) if info else ""
    text = text.rstrip(".")
    return text[:1].lower() + text[1:]


Suggest = Callable[[Any, list[str]], str]
"""(unknown key, allowed keys) -> "; did you mean ...?" or ";" (``chaos.schema.suggest``)."""


KeyHint = Callable[[type[BaseModel], Any], "str | None"]
"""(model, unknown key) -> "; why the key is not here;" or None."""


def _message(error: ErrorDetails, spot: _Spot, key_noun: str | None, none_text: str | None,
             suggest: Suggest | None = None, key_hint: KeyHint | None = None) -> str:
    kind = error["type"]
    value = error.get("input")
    ctx = error.get("ctx") or {}
    if kind in _UNKNOWN_KEY:
        owner = spot.owner
        worded = getattr(owner, "unknown_key_message", None)
        if worded is not None:  # a mapping that words its own (the workload section: kinds)
            return str(worded(spot.path[-1]))
        allowed = model_keys(owner) if owner is not None else []
        noun = key_noun if owner is not None and key_noun and len(spot.path) == 1 else None
        noun = noun or (getattr(owner, "key_noun", "key") if owner is not None else "key")
        key = spot.path[-1]
        if not allowed:
            return f"unknown {noun} {key!r}: {none_text or 'no keys are allowed here'}"
        hint = close_match(key, allowed)
        if suggest is not None and len(spot.path) == 1:
            hint = suggest(key, allowed)
        elif hint == ";" and key_hint is not None and owner is not None:
            hint = key_hint(owner, key) or hint
        return f"unknown {noun} {key!r}{hint} allowed: {', '.join(allowed)}"
    if kind == "missing":
        text = _description(spot.field)
        values = literal_values(unwrap(spot.annotation)[0])
        if values is not None:
            text += "; allowed: " + ", ".join(map(str, values))
        if key_noun and len(spot.path) == 1:
            return f"required {key_noun}" + (f": {text}" if text else "")
        return "required" + (f": {text}" if text else "")
    if kind == "finite_number":
        return f"expected a finite number, got {value}"
    if kind in _RANGE_ERRORS:
        return f"{fmt_number(value)} is out of range: must be {limits_text(spot.metadata)}"
    if kind == "literal_error":
        if marker(spot.metadata, Expect) is not None:
            return f"expected {expected_text(spot.annotation, spot.metadata)}, got {describe_value(value)}"
        allowed = [str(v) for v in literal_values(spot.annotation) or ()]
        shown = repr(value) if isinstance(value, str) else describe_value(value)
        noun = marker(spot.metadata, Noun)
        if noun is not None:
            return f"unknown {noun.text} {shown}{close_match(value, allowed)} allowed: {', '.join(allowed)}"
        return f"{shown} is not allowed{close_match(value, allowed)} allowed values: {', '.join(allowed)}"
    if kind in _TYPE_ERRORS or (kind in ("too_short", "too_long")
                                and marker(spot.metadata, Expect) is not None):
        return f"expected {expected_text(spot.annotation, spot.metadata)}, got {describe_value(value)}"
    if kind == "too_short":
        return f"expected at least {ctx.get('min_length')} item(s), got {describe_value(value)}"
    if kind == "too_long":
        return f"expected at most {ctx.get('max_length')} item(s), got {len(value)}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "string_pattern_mismatch":
        return f"{value!r} is not a valid name: use {NAME_RULE}"
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    return str(error["msg"])


def translate(errors: Iterable[ErrorDetails], root: type[BaseModel], base: Path = (), *,
              key_noun: str | None = None, none_text: str | None = None,
              suggest: Suggest | None = None, key_hint: KeyHint | None = None) -> list[Problem]:
    """One Problem per pydantic error of validating ``root``, located under ``base``.

    ``key_noun`` names the root's own keys (``kill_rank parameter``) and ``none_text`` says
    why a model without fields has no keys (``crash_during_checkpoint takes no parameters``);
    ``suggest`` replaces the spelling did-you-mean for the root's own unknown keys;
    ``key_hint`` explains an unknown key no allowed key is spelt like.
    """
    spotted = [(e, _locate(root, e["loc"])) for e in errors]
    with_unknown_keys = {tuple(spot.path[:-1]) for error, spot in spotted
                         if error["type"] in _UNKNOWN_KEY}
    return [Problem((*base, *spot.path), _message(error, spot, key_noun, none_text, suggest, key_hint))
            for error, spot in spotted
            if not (error["type"] == "missing" and tuple(spot.path[:-1]) in with_unknown_keys)]


def file_order(data: Any, path: Path) -> tuple[int, ...]:
    """Sort key: where ``path`` is in the document (a key not written sorts after its siblings)."""
    key: list[int] = []
    node = data
    for part in path:
        if isinstance(node, dict):
            keys = [str(k) for k in node]
            if str(part) not in keys:
                key.append(len(keys))
                break
            index = keys.index(str(part))
            key.append(index)
            node = list(node.values())[index]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            key.append(part)
            node = node[part]
        else:
            break
    return tuple(key)
