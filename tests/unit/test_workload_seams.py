"""The workload seam (docs/design.md, "The Workload seam"): the engine asks the workload kind,
it never spells one. Read from the source with ``ast``, like the fault-family seam test
(``test_family_seams.py``): docstrings are prose, the code strings are what is checked."""

from __future__ import annotations

import re
from pathlib import Path

from chaos.workload import known_workloads
from tests.unit.test_family_seams import _code_strings

ROOT = Path(__file__).resolve().parents[2]

ENGINE = ("chaos/schema", "chaos/cluster", "chaos/runner/run.py", "chaos/runner/state.py", "chaos/runner/measure.py",
          "chaos/runner/aborted.py", "chaos/runner/suite.py", "chaos/cli/__init__.py", "chaos/cli/run.py", "chaos/cli/scenario.py",
          "chaos/runner/lifecycle.py", "chaos/runner/plan.py", "chaos/gameday", "chaos/scale", "chaos/pytest_plugin.py")
"""Where no workload kind may be spelled: the schema, the backends and the runner."""

# Where a built-in kind's name is spelled in that code on purpose, each with why; shrink-only
# (an entry whose string is gone fails too). The same word meaning something else:
SAME_WORD_OTHER_THING = {
    ("chaos/cluster/docker.py", "command"): "a container's command (the docker SDK's key)",
    ("chaos/cluster/slurm_cli.py", "command"): "a shell's 'command not found'",
    ("chaos/cluster/slurm_testbed.py", "command"): "a container's command (the docker SDK's key)",
    ("chaos/cli/run.py", "harness"): "--vary's and --crash-points' help, whose examples are the "
                                     "bundled job's options",
}


def _builtin_kinds() -> list[str]:
    return [name for name, cls in known_workloads().items() if cls.__module__.startswith("chaos.workload.")]


def _engine_files() -> list[Path]:
    files: list[Path] = []
    for entry in ENGINE:
        path = ROOT / entry
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def _kind_spellings() -> set[tuple[str, str]]:
    """(file, kind) for each code string of the engine that names a built-in kind as a word."""
    patterns = {name: re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])") for name in _builtin_kinds()}
    found = set()
    for path in _engine_files():
        where = path.relative_to(ROOT).as_posix()
        for _, text in _code_strings(path):
            found |= {(where, name) for name, pattern in patterns.items() if pattern.search(text)}
    return found


def test_the_builtin_kinds_are_the_ones_checked() -> None:
    assert {"harness", "command", "lightning", "torchft"} <= set(_builtin_kinds())
    assert all(path.is_file() for path in _engine_files()) and len(_engine_files()) > 40


def test_the_engine_spells_no_workload_kind() -> None:
    found = _kind_spellings()
    unexpected = found - set(SAME_WORD_OTHER_THING)
    assert unexpected == set(), ("ask the workload kind (a Workload class attribute or method: "
                                 "replica_groups, resource_modules, section_fields...) instead of naming it")
    stale = set(SAME_WORD_OTHER_THING) - found
    assert stale == set(), "remove the allowance: the spelling is gone"


def test_the_check_finds_a_spelling(tmp_path: Path) -> None:
    # The finder itself: a kind named in code is found, the same name in a docstring is not.
    source = tmp_path / "x.py"
    source.write_text('"""Only a torchft job."""\nKIND = "torchft"\nWHY = "a lightning job"\n')
    strings = [text for _, text in _code_strings(source)]
    assert strings == ["torchft", "a lightning job"]
