"""One scenario under several values of one option (``trainchaos run --compare KEY=V1,V2``).

Each scenario document is copied once per value with the option set, and named
``<scenario>--<value>``; every copy is validated like any scenario (a value the option does
not take is a located error naming the copy, exit 2, nothing started). The runs then go
side by side in one comparison table: the same outage under each checkpoint placement
policy, the same partition under two collective timeouts.

KEY is a dotted path in the scenario document (``workload.harness.checkpoint.placement``,
``topology.spares``); a path that does not start with a top-level scenario key is taken
under ``workload.harness`` (``checkpoint.placement``), where most of what is worth
comparing lives.
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass
from typing import Any

import yaml

from chaos.schema.models import ScenarioDoc

__all__ = ["Variation", "parse_variation", "expand_documents"]

HARNESS_PREFIX = ("workload", "harness")
SEPARATOR = "--"


class VariationError(ValueError):
    """A --compare argument that cannot be read."""


@dataclass(frozen=True)
class Variation:
    key: str
    """As the user wrote it: the comparison's title."""
    path: tuple[str, ...]
    """Where in the scenario document the value goes."""
    values: tuple[Any, ...]

    def label(self, value: Any) -> str:
        return value_text(value)

    def variant_name(self, base: str, value: Any) -> str:
        """The copy's scenario name (and report folder): a scenario name's characters only."""
        slug = re.sub(r"[^a-z0-9._-]+", "-", value_text(value).lower()).strip("-") or "value"
        return f"{base}{SEPARATOR}{slug}"

    def split(self, name: str) -> tuple[str, str]:
        """A variant's scenario name -> (the scenario's own name, the value's label)."""
        for value in self.values:
            suffix = self.variant_name("", value)
            if name.endswith(suffix):
                return name[: -len(suffix)], self.label(value)
        return name, ""


def value_text(value: Any) -> str:
    """A value as the user wrote it: ``null``, ``true``, and a mapping or list in YAML's flow
    style (``backend={docker: {cpus: 1.0}}`` is labelled ``{docker: {cpus: 1.0}}``, not
    Python's repr)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict | list):
        return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1 << 16).strip()
    return str(value)


def parse_variation(spec: str) -> Variation:
    """``KEY=V1,V2,...``; each value read as YAML (``5`` is an int, ``true`` a bool)."""
    key, sep, rest = spec.partition("=")
    key = key.strip()
    if not sep or not key or not rest.strip():
        raise VariationError(f"--compare {spec!r}: expected KEY=V1,V2,... "
                             "(e.g. checkpoint.placement=local,replicated)")
    parts = tuple(p for p in key.split("."))
    if any(not p for p in parts):
        raise VariationError(f"--compare {spec!r}: {key!r} is not a dotted key")
    raw = [v.strip() for v in rest.split(",")]
    if any(not v for v in raw):
        raise VariationError(f"--compare {spec!r}: an empty value in {rest!r}")
    values = tuple(yaml.safe_load(v) for v in raw)
    if len(set(map(value_text, values))) != len(values):
        raise VariationError(f"--compare {spec!r}: a value is listed twice")
    if len(values) < 2:
        raise VariationError(f"--compare {spec!r}: give at least two values to compare")
    top = set(ScenarioDoc.model_fields)
    path = parts if parts[0] in top else (*HARNESS_PREFIX, *parts)
    return Variation(key=key, path=path, values=values)


def _with_value(data: Any, path: tuple[str, ...], value: Any) -> Any:
    """A copy of ``data`` with ``value`` at ``path`` (mappings made on the way; a number
    indexes a list: ``faults.0.params.placement``); anything else on the way is left for
    validation to report."""
    out = copy.deepcopy(data)
    node = out
    for key in path[:-1]:
        if isinstance(node, list):
            nxt = node[int(key)] if key.isdigit() and int(key) < len(node) else None
        else:
            nxt = node.get(key) if isinstance(node, dict) else None
            if nxt is None and isinstance(node, dict):
                nxt = node[key] = {}
        if not isinstance(nxt, dict | list):
            return out
        node = nxt
    if isinstance(node, dict):
        node[path[-1]] = value
    elif isinstance(node, list) and path[-1].isdigit() and int(path[-1]) < len(node):
        node[int(path[-1])] = value
    return out


def expand_documents(documents: list[tuple[str, Any]], variation: Variation) -> list[tuple[str, Any]]:
    """Each document once per value, named ``<name>--<value>``, in scenario-then-value order."""
    out: list[tuple[str, Any]] = []
    for file, data in documents:
        if not isinstance(data, dict):
            out.append((file, data))  # validation says what is wrong with it
            continue
        base = data.get("name") or os.path.splitext(os.path.basename(file))[0]
        for value in variation.values:
            copy_ = _with_value(data, variation.path, value)
            copy_["name"] = variation.variant_name(str(base), value)
            out.append((f"{file} [{variation.key}={variation.label(value)}]", copy_))
    return out
