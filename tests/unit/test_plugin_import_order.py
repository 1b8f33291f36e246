"""A plugin imports trainchaos back while trainchaos is still importing it.

``TRAINCHAOS_PLUGINS`` modules are imported on the first registry lookup, and that lookup can
happen at import time (``chaos.model.scenario`` builds its targets from the metric catalogue). A plugin
then imports ``chaos.faults.base`` for ``FaultType``: whichever chaos module a command imports
first, that module must already be complete. ``trainchaos cleanup`` once entered through
``chaos.runner.aborted`` -> ``chaos.faults.base`` and died on the circular import.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "tests" / "integration" / "plugins"

# The modules the CLI's commands import first.
ENTRY_MODULES = ("chaos.runner.cleanup", "chaos.runner.aborted", "chaos.faults.base", "chaos.runner.run", "chaos.cli",
                 "chaos.model.scenario", "chaos.scenario.load")


@pytest.mark.parametrize("module", ENTRY_MODULES)
def test_a_plugin_that_imports_fault_base_loads_whichever_module_comes_first(module: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(PLUGINS)]),
           "TRAINCHAOS_PLUGINS": "broken_fault"}
    code = (f"import {module}\n"
            "from chaos.faults.base import lookup\n"
            "print(lookup('broken_for_test').__name__)")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "BrokenFault"


def test_no_two_test_modules_share_a_basename() -> None:
    # pytest imports test modules by basename (rootdir-relative packages aside): a unit and an
    # integration module of one name make the second fail to collect ("import file mismatch").
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path.name in seen:
            clashes.append((seen[path.name], path))
        seen.setdefault(path.name, path)
    assert not clashes, clashes
