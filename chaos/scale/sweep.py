"""``--sweep KEY=V1,V2,...``: parse, and set one value into a copy of the raw configuration.

KEY is a dotted path into the YAML: ``checkpoint.interval_s``, ``recovery.spare_nodes``,
``classes[0].restart_s``, or a class by name, ``classes.faulty_gpu.restart_s`` (also for the
built-in Llama 3 classes, which are materialised for it). The new value is validated with
the rest of the configuration, so a bad one is reported like a bad file entry.
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass
from typing import Any

import yaml

from chaos.errors import ValidationIssue
from chaos.scale.issues import ScaleInputError
from chaos.scale.llama3 import LLAMA3_SOURCE, default_class_dicts

__all__ = ["Sweep", "apply", "combinations", "parse_sweep"]

_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


@dataclass(frozen=True)
class Sweep:
    key: str
    values: tuple[Any, ...]


def parse_sweep(text: str) -> Sweep:
    key, sep, rest = text.partition("=")
    key = key.strip()
    values = tuple(_value(v.strip()) for v in rest.split(",") if v.strip())
    if not sep or not key or not values:
        raise ScaleInputError([ValidationIssue("--sweep", text, "expected KEY=V1,V2,... "
                                               "(e.g. checkpoint.interval_s=60,300,900)")])
    _path(key)
    return Sweep(key, values)


def combinations(sweeps: list[Sweep]) -> list[dict[str, Any]]:
    """Every combination of the sweeps' values, first sweep outermost."""
    if not sweeps:
        return []
    return [dict(zip((s.key for s in sweeps), combo, strict=True))
            for combo in itertools.product(*(s.values for s in sweeps))]


def apply(raw: dict[str, Any], assignments: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``raw`` with every assignment set."""
    data = copy.deepcopy(raw)
    for key, value in assignments.items():
        _set(data, key, value)
    return data


def _value(text: str) -> Any:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _path(key: str) -> list[str | int]:
    parts: list[str | int] = []
    pos = 0
    for match in _PART.finditer(key):
        between = key[pos:match.start()]
        if between not in ("", "."):
            break
        parts.append(int(match.group(2)) if match.group(2) is not None else match.group(1))
        pos = match.end()
    if not parts or pos != len(key):
        raise ScaleInputError([ValidationIssue("--sweep", key, "not a key path: use dots and "
                                               "[index], e.g. classes[0].restart_s")])
    return parts


def _set(data: dict[str, Any], key: str, value: Any) -> None:
    parts = _path(key)
    if parts[0] == "classes" and "classes" not in data:
        data["classes"] = default_class_dicts()
        data.setdefault("source", LLAMA3_SOURCE)
    node: Any = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        where = key if last else ".".join(str(p) for p in parts[: i + 1])
        if isinstance(node, list):
            index = part if isinstance(part, int) else _by_name(node, part)
            if index is None or not 0 <= index < len(node):
                names = [e.get("name") for e in node if isinstance(e, dict)]
                raise ScaleInputError([ValidationIssue("--sweep", where, f"no entry {part!r}: the "
                                                       f"list has {len(node)} ({', '.join(map(str, names))})")])
            if last:
                node[index] = value
            else:
                node = node[index]
            continue
        if not isinstance(node, dict) or isinstance(part, int):
            raise ScaleInputError([ValidationIssue("--sweep", where, "not a mapping in the configuration")])
        if last:
            node[part] = value
        else:
            node = node.setdefault(part, {})


def _by_name(entries: list[Any], name: str) -> int | None:
    for i, entry in enumerate(entries):
        if isinstance(entry, dict) and entry.get("name") == name:
            return i
    return None
