"""A failed integration test's report carries what its runs' node logs say went wrong.

Why: CI keeps only pytest's output; the run directories under the test's tmp_path, with the
torchrun agents' and the ranks' logs (``<run>/logs/node-N.log``, chaos.runfiles.rundir), are gone with its machine.
A test that fails there once in twenty runs (a stack's in-process restart that met a port
in use, a rendezvous that restarted a healthy group) could only be guessed at from its
assertion. The lines kept are the ones that tell a run's story: errors and tracebacks'
last lines, the launcher's restarts and rendezvous rounds, the stacks' restart warnings.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest

from chaos.runfiles.rundir import LOGS_SUBDIR

SECTION = "run logs (the test's node logs: errors, restarts, rendezvous)"
LINES_PER_FILE = 25
"""The last this many telling lines of each log: a restart loop repeats itself."""
MAX_FILES = 8
LINE_CHARS = 300
_TELLING = re.compile(
    r"Error|Exception|Traceback|EADDRINUSE|[Ss]ignal|[Kk]illed|[Tt]imed? ?out"
    r"|restart|Restart|Detected \d+ new nodes|has joined round|Rendezvous complete|WARNING|CRITICAL"
)
_NOISE = ("FutureWarning", "import pynvml", "warnings.warn")


def telling_lines(log: Path) -> list[str]:
    """The last LINES_PER_FILE lines of ``log`` that tell of errors, restarts or rounds."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    kept = [line[:LINE_CHARS] for line in text.splitlines()
            if _TELLING.search(line) and not any(n in line for n in _NOISE)]
    return kept[-LINES_PER_FILE:]


def run_logs_section(root: Path) -> str:
    """Each node log under ``root`` (newest first, MAX_FILES of them) with its telling lines."""
    logs = sorted(root.glob(f"**/{LOGS_SUBDIR}/*.log"), key=lambda p: p.stat().st_mtime, reverse=True)[:MAX_FILES]
    parts = []
    for log in logs:
        lines = telling_lines(log)
        if lines:
            parts.append(f"== {log.relative_to(root)}\n" + "\n".join(lines))
    return "\n".join(parts)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()
    # setup too: a module-scoped fixture that runs a suite fails there
    if report.when == "teardown" or not report.failed or item.get_closest_marker("integration") is None:
        return
    for root in _roots(item):
        if section := run_logs_section(root):
            report.sections.append((SECTION, f"(under {root})\n{section}"))
            return


def _roots(item: pytest.Item) -> list[Path]:
    """Where the test's runs are: its tmp_path, else (a module-scoped fixture's runs, in a
    directory of tmp_path_factory) this process's base temp dir, whose newest logs are the
    latest tests' of this worker."""
    roots = []
    tmp_path = getattr(item, "funcargs", {}).get("tmp_path")
    if isinstance(tmp_path, Path):
        roots.append(tmp_path)
    factory = getattr(item.config, "_tmp_path_factory", None)
    with contextlib.suppress(Exception):  # no base temp dir made yet: nothing to read
        if factory is not None:
            roots.append(factory.getbasetemp())
    return roots
