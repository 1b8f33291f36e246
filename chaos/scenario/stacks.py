"""The same fault on several training stacks (``trainchaos bench-stacks``).

The standard suites share one layout: ``<root>/<stack>/<fault>.yaml``, the same file name
for the same fault on every stack (``kill-rank.yaml`` in ``torchrun/``, ``torchft/``...),
each scenario with the workload, topology and targets its stack claims; a fault that cannot
apply to a stack is left out (docs/stacks.md says why). ``<root>/<stack>/sustained/`` holds
the stack's sustained-failure scenario(s) the same way (N failures at a fixed mean interval,
a ``poisson`` trigger), run only when asked for: they are long.

Why not ``run --compare workload=...``: ``--compare`` copies *one* scenario once per value of
*one* key. Stacks differ in the whole workload section (its kind and options), often in the
topology (replica groups) and in the targets each claims, so the unit compared is a file name
across stack folders, not a value. What is shared is everything after loading: the copies
are named ``<fault>--<stack>`` (as ``--compare`` names ``<scenario>--<value>``), validated
as any scenario, and run as one suite (its verdict table, JUnit, suite page, baseline gate,
expected failures); ``chaos.report.stacks`` then puts them side by side.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from chaos.errors import ScenarioError, ValidationIssue
from chaos.model.scenario import Scenario
from chaos.scenario.load import SCENARIO_SUFFIXES, load_documents
from chaos.scenario.variants import SEPARATOR
from chaos.util.yamlio import UNREADABLE, read_yaml

__all__ = ["REFERENCE", "STANDARD_FAULTS", "SUSTAINED", "StackMatrix", "load_stacks"]

REFERENCE = "torchrun"
"""The reference column: the bundled harness restarted by torchrun from its checkpoint."""

STANDARD_FAULTS = ("kill-rank", "kill-node", "freeze-rank", "partition-node", "stall-checkpoint-io",
                   "flip-weight-bit")
"""The standard suite's faults, in the order the tables list them (others follow, sorted)."""

SUSTAINED = "sustained"
"""The sub-folder of a stack's sustained-failure scenarios."""


@dataclass
class StackMatrix:
    """Which scenario ran which fault on which stack."""

    stacks: list[str]
    """Reference first, then the others in the order asked (else sorted)."""
    faults: list[str]
    cells: dict[tuple[str, str], str] = field(default_factory=dict)
    """(fault, stack) -> the scenario's name (``<fault>--<stack>``); absent: no such file."""
    scenarios: list[Scenario] = field(default_factory=list)

    def cell_of(self, scenario_name: str) -> tuple[str, str] | None:
        return next((key for key, name in self.cells.items() if name == scenario_name), None)


def _scenario_files(folder: str) -> dict[str, str]:
    """Fault name -> file, for the scenario files directly in ``folder``."""
    if not os.path.isdir(folder):
        return {}
    return {os.path.splitext(name)[0]: os.path.join(folder, name) for name in sorted(os.listdir(folder))
            if name.endswith(SCENARIO_SUFFIXES) and not name.startswith("_")
            and os.path.isfile(os.path.join(folder, name))}


def _fault_order(name: str) -> tuple[int, str]:
    return (STANDARD_FAULTS.index(name) if name in STANDARD_FAULTS else len(STANDARD_FAULTS), name)


def load_stacks(root: str, stacks: list[str] | None = None, faults: list[str] | None = None,
                sustained: bool = False) -> StackMatrix:
    """The scenarios of ``root``'s stack folders (``sustained``: of their ``sustained/``
    sub-folders), each named ``<fault>--<stack>``; ``stacks`` and ``faults`` narrow it. Bad
    input (a stack or fault that is not there, a scenario that does not validate) is one
    ScenarioError with every problem, located, before anything runs."""
    issues: list[ValidationIssue] = []
    if not os.path.isdir(root):
        raise ScenarioError([ValidationIssue(root, "", "not a directory of stack folders "
                                             "(<root>/<stack>/<fault>.yaml)")])
    present = sorted(name for name in os.listdir(root) if os.path.isdir(os.path.join(root, name))
                     and not name.startswith((".", "_")))
    folders = {name: os.path.join(root, name, SUSTAINED) if sustained else os.path.join(root, name)
               for name in present}
    files = {name: _scenario_files(folder) for name, folder in folders.items()}
    present = [name for name in present if files[name]]
    if stacks:
        unknown = [s for s in stacks if s not in present]
        if unknown:
            where = "with a sustained/ folder " if sustained else ""
            issues.append(ValidationIssue(root, "--stacks", f"no stack folder {where}named "
                                          f"{', '.join(map(repr, unknown))}; present: {', '.join(present) or 'none'}"))
        chosen = [s for s in stacks if s in present]
    else:
        chosen = present
    ordered = ([REFERENCE] if REFERENCE in chosen else []) + [s for s in chosen if s != REFERENCE]
    all_faults = sorted({f for s in ordered for f in files[s]}, key=_fault_order)
    if faults:
        unknown = [f for f in faults if f not in all_faults]
        if unknown:
            issues.append(ValidationIssue(root, "--faults", f"no scenario file for {', '.join(map(repr, unknown))} "
                                          f"in the stacks chosen; present: {', '.join(all_faults) or 'none'}"))
        all_faults = [f for f in all_faults if f in faults]
    if not ordered and not issues:
        issues.append(ValidationIssue(root, "", "no stack folder holds a scenario file"
                                      + (f" in its {SUSTAINED}/ folder" if sustained else "")))
    matrix = StackMatrix(stacks=ordered, faults=all_faults)
    documents: list[tuple[str, Any]] = []
    for fault in all_faults:
        for stack in ordered:
            path = files[stack].get(fault)
            if path is None:
                continue
            data = read_yaml(path, issues, what="a scenario file")
            if data is UNREADABLE:
                continue
            name = f"{fault}{SEPARATOR}{stack}"
            if isinstance(data, dict):
                data = {**data, "name": name}
            matrix.cells[(fault, stack)] = name
            documents.append((path, data))
    if issues:
        raise ScenarioError(issues)
    matrix.scenarios = load_documents(documents)
    return matrix
