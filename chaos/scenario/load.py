"""Scenario files (YAML) -> typed, validated :class:`chaos.model.scenario.Scenario`; suites of them.

Bad input never starts anything: every problem of every file is collected, each with the
file, a location (``faults[1].trigger.at_step``) and a message naming the allowed values,
in the order of the file, and raised together as one :class:`chaos.errors.ScenarioError`
(exit code 2).

The schema is declared once, in ``chaos.schema.models`` (docs/scenario.md has the reference
generated from it, ``trainchaos schema`` the JSON Schema). A document is validated by those
models (their errors told by ``chaos.schema.errors``), then checked across fields by
``chaos.schema.checks`` on every part that passed, then built into records by
``chaos.schema.build``.

A suite is a list of paths (``load_suite``): scenario files, directories (every ``*.yaml`` /
``*.yml`` in them, sorted, not recursive, skipping names that start with ``_``) and suite files
(a mapping with ``suite: [paths relative to the suite file]``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from chaos.errors import ScenarioError, ValidationIssue
from chaos.model.scenario import Scenario
from chaos.model.types import describe_value, model_keys
from chaos.scenario.variants import Variation, expand_documents
from chaos.schema.build import build_scenario
from chaos.schema.checks import cross_check
from chaos.schema.errors import Problem, file_order, translate
from chaos.schema.models import ScenarioDoc, SuiteDoc
from chaos.schema.suggest import misplaced_param
from chaos.util.yamlio import UNREADABLE, read_yaml

__all__ = ["SCENARIO_SUFFIXES", "load_documents", "load_scenario", "load_suite", "parse_scenario"]

SCENARIO_SUFFIXES = (".yaml", ".yml")

MAX_PROBLEMS_PER_FILE = 30
"""Problems told per file; the rest are counted. A file with thousands of bad faults is most
likely one mistake repeated: the first thirty show it, a wall of text would bury it."""

_BAD: Any = object()
"""Returned by ``_read_yaml`` after it reported an issue."""


# --------------------------------------------------------------------------- public API


def load_scenario(path: str) -> Scenario:
    """Read and validate one scenario file; raises ScenarioError with every issue found."""
    issues: list[ValidationIssue] = []
    data = _read_yaml(path, issues)
    if issues:
        raise ScenarioError(issues)
    return parse_scenario(data, path)


def parse_scenario(data: object, path: str) -> Scenario:
    """Validate an already-parsed YAML document; ``path`` is only used in messages."""
    scenario, issues = _check(data, path)
    if issues:
        raise ScenarioError(issues)
    assert scenario is not None
    return scenario


def load_suite(paths: Iterable[str], variation: Variation | None = None) -> list[Scenario]:
    """Scenarios of scenario files, directories and suite files, in order, each file once
    (with a ``variation``: each once per value, see ``chaos.scenario.variants``).

    Problems of all files (and duplicated scenario names) are raised together.
    """
    paths = list(paths)
    if not paths:
        raise ScenarioError([ValidationIssue("<suite>", "", "no scenario paths given")])
    issues: list[ValidationIssue] = []
    documents: list[tuple[str, Any]] = []
    seen: set[str] = set()
    for path in paths:
        _expand(path, documents, seen, issues, suite_stack=())
    if variation is not None:
        documents = expand_documents(documents, variation)
    return load_documents(documents, issues)


def load_documents(documents: list[tuple[str, Any]],
                   issues: list[ValidationIssue] | None = None) -> list[Scenario]:
    """Scenarios of already-read documents (file, parsed YAML), as ``load_suite`` checks
    them: every problem of every document (and duplicated scenario names, and ``issues``
    found before) raised together."""
    issues = list(issues or [])
    scenarios: list[Scenario] = []
    for file, data in documents:
        scenario, file_issues = _check(data, file)
        issues.extend(file_issues)
        if scenario is not None:
            scenarios.append(scenario)

    first_use: dict[str, str] = {}
    for scenario in scenarios:
        other = first_use.setdefault(scenario.name, scenario.path)
        if other != scenario.path:
            issues.append(ValidationIssue(
                scenario.path, "name",
                f"scenario name {scenario.name!r} is also used by {other}; names must be unique "
                "in a suite (each names its report folder)"))
    if issues:
        raise ScenarioError(issues)
    return scenarios


# --------------------------------------------------------------------------- one document


def _check(data: Any, file: str) -> tuple[Scenario | None, list[ValidationIssue]]:
    """The scenario of a parsed document, or None and every issue found, in file order."""
    keys = ", ".join(model_keys(ScenarioDoc))
    if data is None:
        return None, [ValidationIssue(file, "", f"the file is empty; expected a mapping with "
                                                f"keys {keys}")]
    if not isinstance(data, dict):
        return None, [ValidationIssue(file, "", f"expected a mapping at the top level (keys "
                                                f"{keys}); got {describe_value(data)}")]
    if "suite" in data:
        return None, [ValidationIssue(file, "suite", "this is a suite file; pass it where a suite "
                                      "is expected (trainchaos run), not as a single scenario")]
    try:
        doc: ScenarioDoc | None = ScenarioDoc.model_validate(data)
        errors = []
    except ValidationError as exc:
        doc, errors = None, exc.errors()
    problems = translate(errors, ScenarioDoc, key_hint=misplaced_param)
    problems += cross_check(data, [tuple(e["loc"]) for e in errors])
    if problems or doc is None:
        problems.sort(key=lambda p: file_order(data, p.path))
        return None, _capped(file, problems)
    return build_scenario(doc, file), []


def _capped(file: str, problems: list[Problem]) -> list[ValidationIssue]:
    issues = [_issue(file, p) for p in problems[:MAX_PROBLEMS_PER_FILE]]
    rest = len(problems) - MAX_PROBLEMS_PER_FILE
    if rest > 0:
        issues.append(ValidationIssue(file, "", f"and {rest} more problem{'s' if rest > 1 else ''} "
                                      f"not shown (at most {MAX_PROBLEMS_PER_FILE} are told per "
                                      "file; fix these and validate again)"))
    return issues


def _issue(file: str, problem: Problem) -> ValidationIssue:
    return ValidationIssue(file, problem.location, problem.message)


# --------------------------------------------------------------------------- files and suites


def _read_yaml(path: str, issues: list[ValidationIssue]) -> Any:
    """The parsed document, or _BAD after appending an issue."""
    data = read_yaml(path, issues, what="a scenario file")
    return _BAD if data is UNREADABLE else data


def _is_scenario_file(name: str) -> bool:
    return name.endswith(SCENARIO_SUFFIXES) and not name.startswith("_")


def _expand(path: str, documents: list[tuple[str, Any]], seen: set[str],
            issues: list[ValidationIssue], suite_stack: tuple[str, ...]) -> None:
    """Append (file, parsed YAML) for each scenario file ``path`` stands for, each file once."""
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path)
                       if _is_scenario_file(n) and os.path.isfile(os.path.join(path, n)))
        if not names:
            issues.append(ValidationIssue(
                path, "", "directory holds no scenario files (*.yaml, *.yml not starting with '_')"))
        for name in names:
            _expand(os.path.join(path, name), documents, seen, issues, suite_stack)
        return
    if not os.path.exists(path):
        issues.append(ValidationIssue(path, "", "no such file or directory"))
        return
    real = os.path.realpath(path)
    if real in seen:  # listed twice, or a suite next to the scenarios it names
        return
    seen.add(real)
    data = _read_yaml(path, issues)
    if data is _BAD:
        return
    if isinstance(data, dict) and "suite" in data:
        _expand_suite(path, data, documents, seen, issues, (*suite_stack, real))
    else:
        documents.append((path, data))


def _expand_suite(path: str, data: dict[Any, Any], documents: list[tuple[str, Any]],
                  seen: set[str], issues: list[ValidationIssue],
                  suite_stack: tuple[str, ...]) -> None:
    try:
        SuiteDoc.model_validate(data)
        problems: list[Problem] = []
    except ValidationError as exc:
        problems = translate(exc.errors(), SuiteDoc)
    entries = data["suite"] if isinstance(data["suite"], list) else []
    base = os.path.dirname(path)
    for i, entry in enumerate(entries):
        if not isinstance(entry, str) or not entry:
            continue  # told by the model
        target = os.path.join(base, entry)
        if os.path.realpath(target) in suite_stack:
            problems.append(Problem(("suite", i), f"{entry!r} is a suite that includes this one "
                                                  "(a cycle)"))
        elif not os.path.exists(target):
            problems.append(Problem(("suite", i), f"{entry!r} does not exist (looked for {target})"))
        else:
            _expand(target, documents, seen, issues, suite_stack)
    problems.sort(key=lambda p: file_order(data, p.path))
    issues.extend(_issue(path, p) for p in problems)
