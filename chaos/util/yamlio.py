"""Reading the YAML files users write (scenarios, suites, scale-model configs).

One loader for all of them: ``safe_load`` where a key written twice in one mapping is an
error (not a silent override), and numbers as YAML 1.2 reads them, so that ``7e-6`` or
``1e3`` is a float (PyYAML follows YAML 1.1, where they are strings, and a rate of ``7e-6``
would be rejected as "expected float, got str"). Problems come back as located
``ValidationIssue``s (``line 3, column 7: invalid YAML: ...``).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from chaos.errors import ValidationIssue

__all__ = ["UNREADABLE", "read_yaml"]

UNREADABLE: Any = object()
"""Returned by ``read_yaml`` after it appended an issue."""


class _Loader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in keys
            except TypeError:  # unhashable key: let the base class report it
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"found duplicate key {key!r}", key_node.start_mark)
            keys.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                  |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                  |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                  |[-+]?\.(?:inf|Inf|INF)
                  |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def read_yaml(path: str, issues: list[ValidationIssue], what: str = "a YAML file") -> Any:
    """The parsed document, or UNREADABLE after appending one located issue."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        issues.append(ValidationIssue(path, "", "no such file"))
        return UNREADABLE
    except IsADirectoryError:
        issues.append(ValidationIssue(path, "", f"is a directory, expected {what}"))
        return UNREADABLE
    except (OSError, UnicodeDecodeError) as exc:
        issues.append(ValidationIssue(path, "", f"cannot read: {exc}"))
        return UNREADABLE
    if len(text) > MAX_CHARS:
        issues.append(ValidationIssue(
            path, "", f"{len(text):,} characters is too large for {what} (at most {MAX_CHARS:,}; "
            "the shipped ones are a few hundred)"))
        return UNREADABLE
    try:
        # The reader checks every character as it is built: a NUL byte raises here.
        loader = _Loader(text)
    except yaml.YAMLError as exc:
        issues.append(_yaml_issue(path, exc, text))
        return UNREADABLE
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node, {})
        if size > MAX_VALUES:
            issues.append(ValidationIssue(
                path, "", f"the document holds more than {MAX_VALUES:,} values once its YAML "
                "aliases are expanded; a scenario needs far fewer (an alias bomb?)"))
            return UNREADABLE
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        issues.append(_yaml_issue(path, exc))
        return UNREADABLE
    except RecursionError:
        issues.append(ValidationIssue(path, "", "invalid YAML: nested too deeply"))
        return UNREADABLE
    except ValueError as exc:  # e.g. an integer beyond Python's 4,300-digit conversion limit
        digits = re.search(r"\d{4300,}", text)  # the error names no place: the longest digits are it
        issues.append(ValidationIssue(path, _line_column(text, digits.start()) if digits else "",
                                      f"invalid YAML: {str(exc)[:200]}"))
        return UNREADABLE
    finally:
        loader.dispose()


MAX_CHARS = 256 * 1024
"""Larger files are refused before parsing: PyYAML needs seconds for a megabyte of deeply
indented text, and no scenario comes near this."""

MAX_VALUES = 100_000
"""Values a document may expand to. Aliases share one object when loaded, so a "billion
laughs" file loads in microseconds, and then anything that walks it (a message quoting the
value, a JSON journal, a copy) runs for hours."""


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """How many values ``node`` stands for with every alias expanded (each shared node is
    sized once, so a bomb is measured without being expanded)."""
    known = memo.get(id(node))
    if known is not None:
        return known
    memo[id(node)] = MAX_VALUES + 1  # a cycle (a node inside itself) counts as too large
    if isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(item, memo) for item in node.value)
    else:
        size = 1
    memo[id(node)] = min(size, MAX_VALUES + 1)
    return memo[id(node)]


def _line_column(text: str, position: int) -> str:
    line = text.count("\n", 0, position)
    return f"line {line + 1}, column {position - (text.rfind(chr(10), 0, position) + 1) + 1}"


def _yaml_issue(path: str, exc: yaml.YAMLError, text: str = "") -> ValidationIssue:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    location = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    if mark is None and isinstance(getattr(exc, "position", None), int):  # the reader's: a character it refuses
        location = _line_column(text, exc.position)
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    if problem:
        message = f"invalid YAML: {problem}" + (f" ({context})" if context else "")
    else:
        message = f"invalid YAML: {str(exc).splitlines()[0]}"
    return ValidationIssue(path, location, message)
