"""Real runs that several test modules read (session fixtures, imported by ``conftest.py``).

A run costs tens of seconds of two busy cores; when two modules need the same scenario run
the same way, it runs once and each asserts its own part of it.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from chaos.runfiles.events import read_events
from chaos.util.procs import find_run_processes
from tests.integration._support import REPO, cli_env, run_trainchaos

__all__ = ["SmokeRun", "smoke_device_error"]


@dataclass(frozen=True)
class SmokeRun:
    out: Path
    """The ``--out`` folder (what ``simulate --from-runs`` reads)."""
    result: subprocess.CompletedProcess[str]
    journal: dict[str, Any]
    events: list[dict[str, Any]]


@pytest.fixture(scope="session")
def smoke_device_error(tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
    """``scenarios/smoke/device-error.yaml`` as ``make demo`` runs it (the installed command,
    its own report folder): read by test_process_faults (what the fault must show) and
    test_scale_from_runs (the Llama 3 model fed with its measured figures)."""
    root = tmp_path_factory.mktemp("smoke-device-error")
    out = root / "reports"
    result = run_trainchaos(["run", str(REPO / "scenarios" / "smoke" / "device-error.yaml"),
                             "--out", str(out)],
                            env=cli_env(root / "state"), cwd=REPO, timeout=220)
    # A missed timing target (exit 1) still measures; anything else is the tool failing.
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
    (journal_path,) = out.glob("**/journal.json")
    journal = json.loads(journal_path.read_text())
    assert not find_run_processes(journal["run_id"]), "processes of the run left behind"
    return SmokeRun(out, result, journal, read_events(str(journal_path.parent / "events")))
