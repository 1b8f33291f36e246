"""A controller SIGKILLed with a fault in effect: what a crash or an OOM kill leaves for
``trainchaos cleanup`` to find."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.runfiles.rundir import RunDir
from chaos.util.procs import find_run_processes, kill_pids


@contextlib.contextmanager
def sigkilled_after_apply(argv: list[str], env: dict[str, str], cwd: Path, run_dir: Path, what: str,
                          apply_wait_s: float = 90) -> Iterator[str]:
    """Run ``argv`` (a ``trainchaos run``), SIGKILL it once its fault journal shows the fault
    applied, and yield the run's id. Whatever of the run the test leaves is killed after it."""
    controller = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    run_id = None
    try:
        deadline = time.monotonic() + apply_wait_s
        while time.monotonic() < deadline:
            journal = Path(RunDir(str(run_dir)).fault_journal)
            if journal.exists() and '"applied"' in journal.read_text():
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the {what} was never applied")
        run_id = json.loads(Path(RunDir(str(run_dir)).run_start).read_text())["run_id"]
        os.kill(controller.pid, signal.SIGKILL)  # no handler, no finally
        controller.wait(timeout=10)
        yield run_id
    finally:
        if controller.poll() is None:
            controller.kill()
        if run_id:
            kill_pids([p.pid for p in find_run_processes(run_id)])
