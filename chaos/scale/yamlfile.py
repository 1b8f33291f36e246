"""Reading a YAML file of the scale model through ``chaos.util.yamlio`` (YAML 1.2 numbers,
duplicate keys refused), every failure as a located ScaleInputError."""

from __future__ import annotations

from typing import Any

from chaos.errors import ValidationIssue
from chaos.scale.issues import ScaleInputError
from chaos.util.yamlio import read_yaml

__all__ = ["read_yaml_mapping"]


def read_yaml_mapping(path: str, what: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """The parsed YAML mapping in ``path``; a ScaleInputError when it cannot be read or parsed,
    or is not a mapping (``what`` and ``keys`` name what was expected)."""
    issues: list[ValidationIssue] = []
    data = read_yaml(path, issues, what=what)
    if issues:
        raise ScaleInputError(issues)
    if not isinstance(data, dict):
        raise ScaleInputError([ValidationIssue(path, "", f"expected a mapping with keys {', '.join(keys)}")])
    return data
