"""Scenario files (YAML) -> typed, validated :class:`chaos.model.Scenario`; suites of them.

Bad input never starts anything: every problem of every file is collected, each with the
file, a location (``faults[1].trigger.at_step``) and a message naming the allowed values,
and raised together as one :class:`chaos.errors.ScenarioError` (exit code 2).

Schema (``docs/scenario.md`` has the annotated version)::

    name: rank-kill-mid-step           # required; [a-z0-9][a-z0-9._-]* (names the report folder)
    description: "..."                 # optional string
    seed: 7                            # int >= 0, default 0
    workload:                          # optional, default {harness: {}}; exactly one of:
      harness: {steps: 300, checkpoint: {every_steps: 20}}   # harness options (python -m harness --help)
      # command: "python my_train.py"  # a user's own job, started by torchrun on each node
      # progress_regex: 'step (?P<step>\\d+) loss (?P<loss>[\\d.]+)'   # command only; group `step` required
    topology:                          # optional
      nodes: 2                         # 1..8, default 2
      ranks_per_node: 2                # 1..8, default 2
      min_nodes: 1                     # 1..nodes, default: all nodes required
      max_restarts: 3                  # 0..20, default 3
    baseline: true                     # bool, default false: also run a fault-free twin
    faults:                            # optional list
      - type: kill_rank                # a registered fault type (`trainchaos faults`)
        name: first-kill               # optional, unique among the faults
        target: {rank: 3}              # exactly one of {rank: R} {ranks: [R, ...]} {node: N}
                                       #   {nodes: [N, ...]} {random: rank|node}
        trigger: {at_step: 120}        # exactly one of at_step: int >= 1 | at_time: seconds > 0
                                       #   | after_event: {event, count: 1, delay_s: 0}
                                       #   | random: {window_s: [lo, hi]} | poisson: {mtbf_s, max_faults: 1}
        probability: 1.0               # 0 < p <= 1, default 1
        params: {signal: SIGKILL}      # the type's parameters; defaults filled in
    targets:                           # optional; every key optional
      detection_s: {max: 2}            # bounds: {max: X} and/or {min: Y}, numbers >= 0
      recovery_s: {max: 15}
      catchup_s: {max: 30}
      lost_steps: {max: 20}
      goodput: {min: 0.5}              # 0..1
      final_state: matches_baseline    # or {loss_within: 0.05}; needs baseline: true
      attribution: correct
      completes: true                  # default true
    repeat: 3                          # 1..100, default 1
    timeout_s: 300                     # seconds > 0, default 300

A suite is a list of paths (``load_suite``): scenario files, directories (every ``*.yaml`` /
``*.yml`` in them, sorted, not recursive, skipping names that start with ``_``) and suite files
(a mapping with ``suite: [paths relative to the suite file]``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from collections.abc import Iterable
from typing import Any

import yaml

from chaos.errors import ScenarioError, ValidationIssue
from chaos.events import KINDS as EVENT_KINDS
from chaos.faults.base import FaultType, ParamSpec, UnknownFaultType, known_types, lookup
from chaos.model import Bound, FaultSpec, Scenario, Targets, Topology, Trigger, Workload
from harness.config import ConfigError, HarnessConfig, config_from_mapping

__all__ = [
    "FAULT_KEYS",
    "SCENARIO_KEYS",
    "SCENARIO_SUFFIXES",
    "TARGET_KEYS",
    "TRIGGER_KINDS",
    "load_scenario",
    "load_suite",
    "parse_scenario",
]

SCENARIO_SUFFIXES = (".yaml", ".yml")

SCENARIO_KEYS = ("name", "description", "seed", "workload", "topology", "baseline", "faults",
                 "targets", "repeat", "timeout_s")
WORKLOAD_KEYS = ("harness", "command", "progress_regex")
TOPOLOGY_KEYS = ("nodes", "ranks_per_node", "min_nodes", "max_restarts")
FAULT_KEYS = ("type", "name", "target", "trigger", "probability", "params")
FAULT_TARGET_KEYS = ("rank", "ranks", "node", "nodes", "random")
TRIGGER_KINDS = ("at_step", "at_time", "after_event", "random", "poisson")
AFTER_EVENT_KEYS = ("event", "count", "delay_s")
RANDOM_KEYS = ("window_s",)
POISSON_KEYS = ("mtbf_s", "max_faults")
BOUND_TARGETS = ("detection_s", "recovery_s", "catchup_s", "lost_steps", "goodput")
TARGET_KEYS = (*BOUND_TARGETS, "final_state", "attribution", "completes")
BOUND_KEYS = ("max", "min")
SUITE_KEYS = ("suite", "name", "description")

# The name becomes a report folder: no path separators, no leading dot ("." / "..").
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")
_NAME_RULE = ("lowercase letters, digits, '.', '_' and '-', starting with a letter or digit, "
              "at most 100 characters; it names the report folder")

# Limits of the local backend: every node is a torchrun agent with its own processes.
_MAX_NODES = 8
_MAX_RANKS_PER_NODE = 8
_MAX_RESTARTS = 20
_MAX_REPEAT = 100

_HARNESS_FIELDS = frozenset(f.name for f in dataclasses.fields(HarnessConfig))

_BAD: Any = object()
"""Returned by a check that reported an issue; callers skip dependent checks."""


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
    checker = _ScenarioChecker(path)
    scenario = checker.scenario(data)
    if checker.issues:
        raise ScenarioError(checker.issues)
    assert scenario is not None
    return scenario


def load_suite(paths: Iterable[str]) -> list[Scenario]:
    """Scenarios of scenario files, directories and suite files, in order, each file once.

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

    scenarios: list[Scenario] = []
    for file, data in documents:
        checker = _ScenarioChecker(file)
        scenario = checker.scenario(data)
        issues.extend(checker.issues)
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


# --------------------------------------------------------------------------- files and suites


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, but a key written twice in one mapping is an error, not a silent override."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
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


def _read_yaml(path: str, issues: list[ValidationIssue]) -> Any:
    """The parsed document, or _BAD after appending an issue."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        issues.append(ValidationIssue(path, "", "no such file"))
        return _BAD
    except IsADirectoryError:
        issues.append(ValidationIssue(path, "", "is a directory, expected a scenario file"))
        return _BAD
    except (OSError, UnicodeDecodeError) as exc:
        issues.append(ValidationIssue(path, "", f"cannot read: {exc}"))
        return _BAD
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        issues.append(_yaml_issue(path, exc))
        return _BAD


def _yaml_issue(path: str, exc: yaml.YAMLError) -> ValidationIssue:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    location = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    if problem:
        message = f"invalid YAML: {problem}" + (f" ({context})" if context else "")
    else:
        message = f"invalid YAML: {str(exc).splitlines()[0]}"
    return ValidationIssue(path, location, message)


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
    checker = _Checker(path)
    checker.keys(data, "", SUITE_KEYS, what="suite key")
    for key in ("name", "description"):
        if key in data:
            checker.string(data[key], key)
    entries = data["suite"]
    if not isinstance(entries, list) or not entries:
        checker.add("suite", "expected a non-empty list of scenario files, directories or suite "
                    f"files (relative to this file), got {_describe(entries)}")
        entries = []
    base = os.path.dirname(path)
    for i, entry in enumerate(entries):
        loc = f"suite[{i}]"
        if not isinstance(entry, str) or not entry:
            checker.add(loc, f"expected a path, got {_describe(entry)}")
            continue
        target = os.path.join(base, entry)
        if os.path.realpath(target) in suite_stack:
            checker.add(loc, f"{entry!r} is a suite that includes this one (a cycle)")
            continue
        if not os.path.exists(target):
            checker.add(loc, f"{entry!r} does not exist (looked for {target})")
            continue
        _expand(target, documents, seen, issues, suite_stack)
    issues.extend(checker.issues)


# --------------------------------------------------------------------------- value checks


def _describe(value: Any) -> str:
    """A value as a YAML user would name it: ``str 'abc'``, ``mapping``, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"bool {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list" if value else "an empty list"
    return f"{type(value).__name__} {value!r}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _join(loc: str, key: Any) -> str:
    return f"{loc}.{key}" if loc else str(key)


def _limits(minimum: float | None, maximum: float | None, exclusive_min: bool = False) -> str:
    if minimum is not None and maximum is not None and not exclusive_min:
        return f"between {minimum:g} and {maximum:g}"
    parts = []
    if minimum is not None:
        parts.append(f"{'>' if exclusive_min else '>='} {minimum:g}")
    if maximum is not None:
        parts.append(f"<= {maximum:g}")
    return " and ".join(parts)


class _Checker:
    """Collects issues of one file; each check returns the (converted) value or _BAD."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.issues: list[ValidationIssue] = []

    def add(self, location: str, message: str) -> Any:
        self.issues.append(ValidationIssue(self.file, location, message))
        return _BAD

    def mapping(self, value: Any, loc: str, allowed: Iterable[str], what: str = "key") -> bool:
        """True when ``value`` is a mapping (unknown keys reported); else reports and False."""
        allowed = tuple(allowed)
        if not isinstance(value, dict):
            self.add(loc, f"expected a mapping with keys {', '.join(allowed)}; got {_describe(value)}")
            return False
        self.keys(value, loc, allowed, what)
        return True

    def keys(self, value: dict[Any, Any], loc: str, allowed: tuple[str, ...], what: str = "key") -> None:
        for key in value:
            if key in allowed:
                continue
            text = str(key)
            close = difflib.get_close_matches(text, allowed, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ";"
            self.add(_join(loc, text), f"unknown {what} {text!r}{hint} allowed: {', '.join(allowed)}")

    def int_(self, value: Any, loc: str, minimum: int | None = None,
             maximum: int | None = None) -> Any:
        if not _is_int(value):
            return self.add(loc, f"expected int, got {_describe(value)}")
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            return self.add(loc, f"{value} is out of range: must be {_limits(minimum, maximum)}")
        return value

    def number(self, value: Any, loc: str, minimum: float | None = None,
               maximum: float | None = None, exclusive_min: bool = False) -> Any:
        """An int or float (as float); bool is not a number here, nor are inf and nan."""
        if isinstance(value, float) and not math.isfinite(value):
            return self.add(loc, f"expected a finite number, got {value}")
        if not _is_number(value):
            return self.add(loc, f"expected int or float, got {_describe(value)}")
        below = minimum is not None and (value <= minimum if exclusive_min else value < minimum)
        above = maximum is not None and value > maximum
        if below or above:
            return self.add(loc, f"{value:g} is out of range: must be "
                            f"{_limits(minimum, maximum, exclusive_min)}")
        return float(value)

    def bool_(self, value: Any, loc: str) -> Any:
        if not isinstance(value, bool):
            return self.add(loc, f"expected true or false, got {_describe(value)}")
        return value

    def string(self, value: Any, loc: str, non_empty: bool = True) -> Any:
        if not isinstance(value, str):
            return self.add(loc, f"expected a string, got {_describe(value)}")
        if non_empty and not value.strip():
            return self.add(loc, "must not be empty")
        return value

    def choice(self, value: Any, loc: str, allowed: Iterable[str], what: str = "value") -> Any:
        allowed = tuple(allowed)
        if isinstance(value, str) and value in allowed:
            return value
        close = (difflib.get_close_matches(value, allowed, n=1, cutoff=0.6)
                 if isinstance(value, str) else [])
        hint = f"; did you mean {close[0]!r}?" if close else ";"
        shown = repr(value) if isinstance(value, str) else _describe(value)
        return self.add(loc, f"unknown {what} {shown}{hint} allowed: {', '.join(allowed)}")


class _ScenarioChecker(_Checker):
    """One scenario document -> Scenario (or None when any issue was found)."""

    def scenario(self, data: Any) -> Scenario | None:
        if data is None:
            self.add("", f"the file is empty; expected a mapping with keys {', '.join(SCENARIO_KEYS)}")
            return None
        if not isinstance(data, dict):
            self.add("", f"expected a mapping at the top level (keys {', '.join(SCENARIO_KEYS)}); "
                     f"got {_describe(data)}")
            return None
        if "suite" in data:
            self.add("suite", "this is a suite file; pass it where a suite is expected "
                     "(trainchaos run), not as a single scenario")
            return None
        self.keys(data, "", SCENARIO_KEYS)

        name = _BAD
        if "name" not in data:
            self.add("name", f"required: the scenario's name, {_NAME_RULE}")
        elif self.string(data["name"], "name") is not _BAD:
            name = data["name"]
            if not _NAME_RE.fullmatch(name):
                name = self.add("name", f"{name!r} is not a valid name: use {_NAME_RULE}")

        description = ""
        if "description" in data:
            description = self.string(data["description"], "description", non_empty=False)
        seed = self.int_(data.get("seed", 0), "seed", minimum=0)
        baseline = self.bool_(data.get("baseline", False), "baseline")
        repeat = self.int_(data.get("repeat", 1), "repeat", minimum=1, maximum=_MAX_REPEAT)
        timeout_s = self.number(data.get("timeout_s", 300.0), "timeout_s", minimum=0,
                                exclusive_min=True)

        topology = self.topology(data.get("topology", {}))
        workload, harness_config = self.workload(data.get("workload", {"harness": {}}))
        if harness_config is not None and topology is not None:
            try:
                harness_config.check_world_size(topology.world_size)
            except ConfigError as exc:
                self.add("workload.harness.global_batch", str(exc))
        faults = self.faults(data.get("faults", []), topology, harness_config)
        targets = self.targets(data.get("targets", {}), baseline)

        if self.issues:
            return None
        return Scenario(
            name=name, path=self.file, description=description, seed=seed, workload=workload,
            topology=topology, faults=faults, targets=targets, baseline=baseline, repeat=repeat,
            timeout_s=timeout_s,
        )

    # ---------------------------------------------------------------- workload, topology

    def workload(self, data: Any) -> tuple[Workload | None, HarnessConfig | None]:
        loc = "workload"
        if not self.mapping(data, loc, WORKLOAD_KEYS):
            return None, None
        has_harness, has_command = "harness" in data, "command" in data
        if has_harness == has_command:
            got = "both" if has_harness else "neither"
            self.add(loc, f"give exactly one of 'harness' (options of the bundled training job) "
                     f"or 'command' (your own training command); got {got}")
            return None, None
        if has_harness:
            if "progress_regex" in data:
                self.add(_join(loc, "progress_regex"),
                         "only for 'command': the harness reports its progress through the probe")
            harness = data["harness"]
            if harness is None:  # `harness:` with nothing after it means all defaults
                harness = {}
            where = _join(loc, "harness")
            try:
                config = config_from_mapping(harness, where=where)
            except ConfigError as exc:
                self._config_issue(where, str(exc))
                return None, None
            return Workload(harness=dict(harness)), config

        command = self.string(data["command"], _join(loc, "command"))
        regex = None
        if "progress_regex" in data:
            regex = self.regex(data["progress_regex"], _join(loc, "progress_regex"))
        if command is _BAD or regex is _BAD:
            return None, None
        return Workload(command=command, progress_regex=regex), None

    def _config_issue(self, where: str, message: str) -> None:
        """Re-locate a harness ConfigError ('workload.harness.x.y: msg') as location + message.

        Cross-field checks name their field at the start of the message instead
        ('workload.harness.model: model.d_model (10) must be ...'); point at that field.
        """
        head, sep, rest = message.partition(": ")
        if not (sep and (head == where or head.startswith(where + ".")) and " " not in head):
            self.add(where, message)
            return
        field_name = re.match(r"[a-z_.]+", rest)
        # "a and b must be >= 0" names two fields: keep the section as the location
        if field_name and not rest[field_name.end():].startswith(" and "):
            parts = field_name.group(0).split(".")
            section = head[len(where) + 1:] if head != where else ""
            if section and parts[0] == section and len(parts) == 2:
                head = f"{head}.{parts[1]}"
            elif not section and len(parts) == 1 and parts[0] in _HARNESS_FIELDS:
                head = f"{head}.{parts[0]}"
        self.add(head, rest)

    def regex(self, value: Any, loc: str) -> Any:
        if self.string(value, loc) is _BAD:
            return _BAD
        try:
            compiled = re.compile(value)
        except re.error as exc:
            return self.add(loc, f"not a valid regular expression: {exc}")
        if "step" not in compiled.groupindex:
            return self.add(loc, "needs a named group 'step', e.g. 'step (?P<step>\\d+)' "
                            "(optionally also 'loss': '(?P<loss>[\\d.]+)')")
        return value

    def topology(self, data: Any) -> Topology | None:
        loc = "topology"
        if not self.mapping(data, loc, TOPOLOGY_KEYS):
            return None
        defaults = Topology()
        nodes = self.int_(data.get("nodes", defaults.nodes), _join(loc, "nodes"), 1, _MAX_NODES)
        per_node = self.int_(data.get("ranks_per_node", defaults.ranks_per_node),
                             _join(loc, "ranks_per_node"), 1, _MAX_RANKS_PER_NODE)
        restarts = self.int_(data.get("max_restarts", defaults.max_restarts),
                             _join(loc, "max_restarts"), 0, _MAX_RESTARTS)
        min_nodes = data.get("min_nodes")
        if min_nodes is not None:
            upper = nodes if nodes is not _BAD else _MAX_NODES
            min_nodes = self.int_(min_nodes, _join(loc, "min_nodes"), 1, upper)
        if _BAD in (nodes, per_node, restarts, min_nodes):
            return None
        return Topology(nodes=nodes, ranks_per_node=per_node, min_nodes=min_nodes,
                        max_restarts=restarts)

    # ---------------------------------------------------------------- faults

    def faults(self, data: Any, topology: Topology | None,
               harness: HarnessConfig | None) -> tuple[FaultSpec, ...]:
        if data is None:
            return ()
        if not isinstance(data, list):
            self.add("faults", f"expected a list of faults, got {_describe(data)}")
            return ()
        specs: list[FaultSpec] = []
        names: dict[str, int] = {}
        for index, entry in enumerate(data):
            spec = self.fault(index, entry, topology, harness)
            if spec is None:
                continue
            if spec.name is not None:
                if spec.name in names:
                    self.add(f"faults[{index}].name", f"{spec.name!r} is already the name of "
                             f"faults[{names[spec.name]}]; fault names must be unique")
                names.setdefault(spec.name, index)
            specs.append(spec)
        return tuple(specs)

    def fault(self, index: int, data: Any, topology: Topology | None,
              harness: HarnessConfig | None) -> FaultSpec | None:
        loc = f"faults[{index}]"
        if not self.mapping(data, loc, FAULT_KEYS):
            return None
        before = len(self.issues)

        fault_type: type[FaultType] | None = None
        if "type" not in data:
            self.add(_join(loc, "type"), "required: the fault type; known: "
                     + ", ".join(known_types()))
        elif self.string(data["type"], _join(loc, "type")) is not _BAD:
            try:
                fault_type = lookup(data["type"])
            except UnknownFaultType:
                known = list(known_types())
                close = difflib.get_close_matches(data["type"], known, n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else ";"
                self.add(_join(loc, "type"), f"unknown fault type {data['type']!r}{hint} "
                         f"known: {', '.join(known)}")

        name = None
        if "name" in data:
            name = self.string(data["name"], _join(loc, "name"))

        if "target" not in data:
            target = self.add(_join(loc, "target"), "required: which rank(s) or node(s) to hit, "
                              "one of {rank: R}, {ranks: [R, ...]}, {node: N}, {nodes: [N, ...]}, "
                              "{random: rank|node}")
        else:
            target = self.target(data["target"], _join(loc, "target"), fault_type, topology)

        if "trigger" not in data:
            trigger = self.add(_join(loc, "trigger"), "required: when to inject, one of "
                               + ", ".join(TRIGGER_KINDS))
        else:
            trigger = self.trigger(data["trigger"], _join(loc, "trigger"), fault_type, harness)

        probability = self.number(data.get("probability", 1.0), _join(loc, "probability"),
                                  minimum=0, maximum=1, exclusive_min=True)

        params: Any = _BAD
        raw_params = data.get("params", {})
        if raw_params is None:
            raw_params = {}
        if fault_type is not None:
            params = self.params(raw_params, _join(loc, "params"), fault_type)
        elif not isinstance(raw_params, dict):
            self.add(_join(loc, "params"), f"expected a mapping, got {_describe(raw_params)}")

        if len(self.issues) != before or fault_type is None:
            return None
        return FaultSpec(index=index, type=fault_type.type_name, target=target, trigger=trigger,
                         params=params, probability=probability, name=name)

    def target(self, data: Any, loc: str, fault_type: type[FaultType] | None,
               topology: Topology | None) -> Any:
        if not self.mapping(data, loc, FAULT_TARGET_KEYS, what="target key"):
            return _BAD
        given = [k for k in FAULT_TARGET_KEYS if k in data]
        if len(given) != 1:
            if len(given) == 0 and len(data) > 0:
                return _BAD  # only unknown keys: already reported
            return self.add(loc, "give exactly one of rank, ranks, node, nodes, random; got "
                            + (", ".join(given) if given else "none"))
        key = given[0]
        value = data[key]
        kind = "node" if key in ("node", "nodes") else "rank"
        if key == "random":
            kind = self.choice(value, _join(loc, "random"), ("rank", "node"), what="random target")
            if kind is _BAD:
                return _BAD
        if fault_type is not None and kind not in fault_type.target_kinds:
            forms = {"rank": "{rank: R}, {ranks: [R, ...]} or {random: rank}",
                     "node": "{node: N}, {nodes: [N, ...]} or {random: node}"}
            wanted = " or ".join(fault_type.target_kinds)
            return self.add(_join(loc, key), f"{fault_type.type_name} targets a {wanted}, not a "
                            f"{kind}; use " + "; ".join(forms[k] for k in fault_type.target_kinds))
        if key == "random":
            return dict(data)

        if key in ("rank", "node"):
            items = [(value, _join(loc, key))]
        else:
            if not isinstance(value, list) or not value:
                return self.add(_join(loc, key), f"expected a non-empty list of {kind} numbers, "
                                f"got {_describe(value)}")
            items = [(v, f"{_join(loc, key)}[{i}]") for i, v in enumerate(value)]
            if all(_is_int(v) for v in value) and len(set(value)) != len(value):
                return self.add(_join(loc, key), f"lists the same {kind} twice: {value}")
        ok = True
        for item, item_loc in items:
            if self.int_(item, item_loc, minimum=0) is _BAD:
                ok = False
            elif topology is not None:
                ok = self._in_topology(item, item_loc, kind, topology) and ok
        return dict(data) if ok else _BAD

    def _in_topology(self, number: int, loc: str, kind: str, topology: Topology) -> bool:
        if kind == "rank" and number >= topology.world_size:
            self.add(loc, f"rank {number} does not exist: the job has {topology.world_size} ranks "
                     f"(0-{topology.world_size - 1})")
            return False
        if kind == "node" and number >= topology.nodes:
            self.add(loc, f"node {number} does not exist: the job has {topology.nodes} nodes "
                     f"(0-{topology.nodes - 1})")
            return False
        return True

    def trigger(self, data: Any, loc: str, fault_type: type[FaultType] | None,
                harness: HarnessConfig | None) -> Any:
        if not self.mapping(data, loc, TRIGGER_KINDS, what="trigger"):
            return _BAD
        given = [k for k in TRIGGER_KINDS if k in data]
        if len(given) != 1:
            if len(given) == 0 and len(data) > 0:
                return _BAD  # only unknown keys: already reported
            return self.add(loc, "give exactly one trigger of at_step, at_time, after_event, random, "
                            "poisson; got " + (" and ".join(given) if given else "none"))
        kind = given[0]
        value = data[kind]
        kloc = _join(loc, kind)
        if fault_type is not None and fault_type.in_process and kind != "at_step":
            return self.add(kloc, f"{fault_type.type_name} is delivered in-process by the probe and "
                            f"fires only at an exact step: use trigger {{at_step: N}}, not {kind}")

        if kind == "at_step":
            upper = harness.steps - 1 if harness is not None else None
            step = self.int_(value, kloc, minimum=1)
            if step is _BAD:
                return _BAD
            if upper is not None and step > upper:
                return self.add(kloc, f"step {step} is never reached: the harness trains "
                                f"{harness.steps} steps (workload.harness.steps), so at_step must "
                                f"be between 1 and {upper}")
            return Trigger(kind="at_step", at_step=step)
        if kind == "at_time":
            seconds = self.number(value, kloc, minimum=0, exclusive_min=True)
            return _BAD if seconds is _BAD else Trigger(kind="at_time", at_time_s=seconds)
        if kind == "after_event":
            if not self.mapping(value, kloc, AFTER_EVENT_KEYS):
                return _BAD
            if "event" not in value:
                return self.add(_join(kloc, "event"), "required: the event kind to wait for; "
                                "allowed: " + ", ".join(EVENT_KINDS))
            event = self.choice(value["event"], _join(kloc, "event"), EVENT_KINDS, what="event kind")
            count = self.int_(value.get("count", 1), _join(kloc, "count"), minimum=1)
            delay = self.number(value.get("delay_s", 0.0), _join(kloc, "delay_s"), minimum=0)
            if _BAD in (event, count, delay):
                return _BAD
            return Trigger(kind="after_event", event=event, count=count, delay_s=delay)
        if kind == "random":
            if not self.mapping(value, kloc, RANDOM_KEYS):
                return _BAD
            wloc = _join(kloc, "window_s")
            window = value.get("window_s")
            if not (isinstance(window, list) and len(window) == 2):
                return self.add(wloc, "expected [lo, hi]: seconds after the first step, "
                                f"0 <= lo < hi; got {_describe(window)}")
            lo = self.number(window[0], f"{wloc}[0]", minimum=0)
            hi = self.number(window[1], f"{wloc}[1]", minimum=0)
            if _BAD in (lo, hi):
                return _BAD
            if lo >= hi:
                return self.add(wloc, f"[{lo:g}, {hi:g}] is empty: need lo < hi")
            return Trigger(kind="random", window_s=(lo, hi))
        # poisson
        if not self.mapping(value, kloc, POISSON_KEYS):
            return _BAD
        if "mtbf_s" not in value:
            return self.add(_join(kloc, "mtbf_s"), "required: mean seconds between faults (> 0)")
        mtbf = self.number(value["mtbf_s"], _join(kloc, "mtbf_s"), minimum=0, exclusive_min=True)
        max_faults = self.int_(value.get("max_faults", 1), _join(kloc, "max_faults"), minimum=1)
        if _BAD in (mtbf, max_faults):
            return _BAD
        return Trigger(kind="poisson", mtbf_s=mtbf, max_faults=max_faults)

    def params(self, data: Any, loc: str, fault_type: type[FaultType]) -> Any:
        specs = {p.name: p for p in fault_type.params_spec}
        if not isinstance(data, dict):
            return self.add(loc, f"expected a mapping of {fault_type.type_name} parameters, got "
                            f"{_describe(data)}")
        if not specs and data:
            return self.add(loc, f"{fault_type.type_name} takes no parameters; got "
                            + ", ".join(map(str, data)))
        self.keys(data, loc, tuple(specs), what=f"{fault_type.type_name} parameter")
        result: dict[str, Any] = {}
        ok = True
        for name, spec in specs.items():
            if name not in data:
                if spec.required:
                    self.add(_join(loc, name), f"required {spec.type_name()} parameter of "
                             f"{fault_type.type_name}: {spec.doc}")
                    ok = False
                else:
                    result[name] = spec.default
                continue
            value = self.param(data[name], _join(loc, name), spec)
            if value is _BAD:
                ok = False
            else:
                result[name] = value
        return result if ok and all(k in specs for k in data) else _BAD

    def param(self, value: Any, loc: str, spec: ParamSpec) -> Any:
        types = spec.type if isinstance(spec.type, tuple) else (spec.type,)
        if value is None:
            if type(None) in types:
                return None
            return self.add(loc, f"expected {spec.type_name()}, got null")
        matched = any(
            isinstance(value, t) and not (isinstance(value, bool) and t is not bool)
            for t in types if t is not type(None)
        )
        if not matched and float in types and _is_int(value):
            value, matched = float(value), True  # ints are fine where floats are expected
        if not matched:
            return self.add(loc, f"expected {spec.type_name()}, got {_describe(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            return self.add(loc, f"expected a finite number, got {value}")
        if spec.choices is not None and value not in spec.choices:
            close = (difflib.get_close_matches(value, [str(c) for c in spec.choices], n=1)
                     if isinstance(value, str) else [])
            hint = f"; did you mean {close[0]!r}?" if close else ";"
            return self.add(loc, f"{value!r} is not allowed{hint} allowed values: "
                            + ", ".join(map(str, spec.choices)))
        if _is_number(value) and (
                (spec.minimum is not None and value < spec.minimum)
                or (spec.maximum is not None and value > spec.maximum)):
            return self.add(loc, f"{value} is out of range: must be "
                            f"{_limits(spec.minimum, spec.maximum)}")
        return value

    # ---------------------------------------------------------------- targets

    def targets(self, data: Any, baseline: Any) -> Targets:
        loc = "targets"
        if data is None:
            return Targets()
        if not self.mapping(data, loc, TARGET_KEYS, what="target"):
            return Targets()
        kwargs: dict[str, Any] = {}
        for key in BOUND_TARGETS:
            if key in data:
                upper = 1.0 if key == "goodput" else None
                kwargs[key] = self.bound(data[key], _join(loc, key), upper)
        if "final_state" in data:
            floc = _join(loc, "final_state")
            value = data["final_state"]
            if isinstance(value, dict):
                if self.mapping(value, floc, ("loss_within",)):
                    if "loss_within" not in value:
                        self.add(_join(floc, "loss_within"), "required: the max relative loss "
                                 "deviation from the baseline, e.g. {loss_within: 0.05}")
                    else:
                        tol = self.number(value["loss_within"], _join(floc, "loss_within"),
                                          minimum=0, exclusive_min=True)
                        kwargs["final_state"] = "loss_within"
                        kwargs["loss_tolerance"] = tol
            elif value == "matches_baseline":
                kwargs["final_state"] = value
            else:
                self.add(floc, f"expected matches_baseline or {{loss_within: X}}, got "
                         f"{_describe(value)}")
            if "final_state" in kwargs and baseline is False:
                self.add(floc, "compares against the fault-free baseline run: set baseline: true "
                         "at the top level")
        if "attribution" in data:
            kwargs["attribution"] = self.choice(data["attribution"], _join(loc, "attribution"),
                                                ("correct",), what="attribution target")
        if "completes" in data:
            kwargs["completes"] = self.bool_(data["completes"], _join(loc, "completes"))
        if any(v is _BAD for v in kwargs.values()):
            return Targets()
        return Targets(**kwargs)

    def bound(self, data: Any, loc: str, upper: float | None) -> Any:
        if not isinstance(data, dict):
            example = "{min: 0.5}" if upper is not None else "{max: 10}"
            return self.add(loc, f"expected a mapping with max and/or min, e.g. {example}; got "
                            f"{_describe(data)}")
        self.keys(data, loc, BOUND_KEYS)
        if not any(k in data for k in BOUND_KEYS):
            return self.add(loc, "give max and/or min") if not data else _BAD
        values = {k: self.number(data[k], _join(loc, k), minimum=0, maximum=upper)
                  for k in BOUND_KEYS if k in data}
        if _BAD in values.values() or any(k not in BOUND_KEYS for k in data):
            return _BAD
        lo, hi = values.get("min"), values.get("max")
        if lo is not None and hi is not None and lo > hi:
            return self.add(loc, f"min ({lo:g}) is greater than max ({hi:g}): no value can pass")
        return Bound(max=hi, min=lo)
