"""Scale-model input errors in the project's style: every problem, located, exit code 2.

The configuration schema is declared once, as pydantic models (``chaos.scale.config``);
pydantic's own messages ("Input should be greater than 0") are translated here into the
wording ``trainchaos validate`` uses for scenarios (``classes[2].rate_per_device_hour: -1 is
out of range: must be >= 0``), with the allowed keys and values named and a did-you-mean.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from chaos.errors import ScenarioError, ValidationIssue
from chaos.model.types import describe_value

__all__ = ["LOCATED", "ScaleInputError", "format_loc", "issues_from", "located"]

LOCATED = "located"
"""Error type of a model validator's message about one of the model's fields (see ``located``)."""


class ScaleInputError(ScenarioError):
    """Bad ``trainchaos simulate`` input (configuration, ``--sweep``, ``--from-runs``): exit 2."""


def located(field: str | None, message: str) -> PydanticCustomError:
    """An error a model validator raises about ``field`` of its model (``None``: the model).

    pydantic locates a model validator's error at the model; ``field`` (``lost_work_s``,
    ``fault_types[1]``) is appended to that location when the issue is reported.
    """
    return PydanticCustomError(LOCATED, "{message}", {"field": field or "", "message": message})


def format_loc(loc: tuple[Any, ...]) -> str:
    """``('classes', 2, 'rate_per_device_hour')`` -> ``classes[2].rate_per_device_hour``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part:
            out += f".{part}" if out and not str(part).startswith("[") else str(part)
    return out


def issues_from(exc: ValidationError, file: str, root: type[BaseModel],
                prefix: tuple[Any, ...] = ()) -> list[ValidationIssue]:
    """Every error of ``exc`` as a located issue in the project's wording."""
    issues = []
    for err in exc.errors(include_url=False):
        loc = prefix + tuple(err["loc"])
        ctx = err.get("ctx") or {}
        if err["type"] == LOCATED:
            where = format_loc(loc)
            field = ctx.get("field", "")
            if field:
                where = f"{where}.{field}" if where and not field.startswith("[") else where + field
            issues.append(ValidationIssue(file, where, str(ctx.get("message", err["msg"]))))
            continue
        issues.append(ValidationIssue(file, format_loc(loc), _message(err, root, tuple(err["loc"]))))
    return issues


def _message(err: Mapping[str, Any], root: type[BaseModel], loc: tuple[Any, ...]) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    bounds = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"),
              "less_than": ("<", "lt"), "less_than_equal": ("<=", "le")}
    if kind in bounds:
        op, key = bounds[kind]
        shown = f"{value:g}" if isinstance(value, int | float) else repr(value)
        bound = ctx.get(key)
        bound = f"{bound:g}" if isinstance(bound, int | float) else bound
        return f"{shown} is out of range: must be {op} {bound}"
    if kind == "finite_number":
        return f"expected a finite number, got {value}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"expected int, got {describe_value(value)}"
    if kind in ("float_type", "float_parsing"):
        return f"expected int or float, got {describe_value(value)}"
    if kind in ("bool_type", "bool_parsing"):
        return f"expected true or false, got {describe_value(value)}"
    if kind in ("string_type",):
        return f"expected a string, got {describe_value(value)}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "string_pattern_mismatch":
        return (f"{value!r} is not a valid name: use lowercase letters, digits, '.', '_' and '-', "
                "starting with a letter or digit")
    if kind == "list_type":
        return f"expected a list, got {describe_value(value)}"
    if kind == "too_short":
        return "expected a non-empty list"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        model = _model_at(root, loc)
        keys = ", ".join(model.model_fields) if model else ""
        return f"expected a mapping{' with keys ' + keys if keys else ''}; got {describe_value(value)}"
    if kind == "missing":
        model = _model_at(root, loc[:-1])
        field = model.model_fields.get(str(loc[-1])) if model else None
        doc = f" ({field.description.split('. ')[0].rstrip('.')})" if field and field.description else ""
        return f"required{doc}"
    if kind == "extra_forbidden":
        model = _model_at(root, loc[:-1])
        allowed = tuple(model.model_fields) if model else ()
        name = str(loc[-1])
        close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ";"
        return f"unknown key {name!r}{hint} allowed: {', '.join(allowed)}"
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        close = (difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
                 if isinstance(value, str) else [])
        hint = f"; did you mean {close[0]!r}?" if close else ";"
        shown = repr(value) if isinstance(value, str) else describe_value(value)
        return f"unknown value {shown}{hint} allowed: {', '.join(choices)}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    return str(err["msg"])


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that validates the value at ``loc`` (list indices skipped)."""
    model: type[BaseModel] | None = root
    for part in loc:
        if isinstance(part, int):
            continue
        if model is None or part not in model.model_fields:
            return None
        model = _inner_model(model.model_fields[part].annotation)
    return model


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (list, tuple, typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _inner_model(arg)
            if found is not None:
                return found
    return None

