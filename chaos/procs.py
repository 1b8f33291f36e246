"""Find and end the processes of one run by the run id in their environment.

Only processes whose environment carries ``TRAINCHAOS_RUN_ID=<id>`` are ever touched: a
recycled pid or a user's own training job can never be hit by cleanup.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass

__all__ = ["ProcInfo", "find_run_processes", "kill_pids", "process_state"]


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    session: int
    state: str
    cmdline: str
    node: int | None = None
    """The simulated node (``TRAINCHAOS_NODE``) the process belongs to."""
    rank: int | None = None
    """Global rank (``RANK``) for a worker; None for an agent."""


def _stat(pid: int) -> tuple[str, int] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            raw = fh.read()
    except OSError:
        return None
    # comm may hold spaces and parens: fields after the last ')' are fixed.
    rest = raw[raw.rfind(")") + 2:].split()
    return rest[0], int(rest[3])


def process_state(pid: int) -> str | None:
    """Kernel state letter (R, S, T for stopped, Z...), None when gone."""
    st = _stat(pid)
    return st[0] if st else None


def find_run_processes(run_id: str | None = None) -> list[ProcInfo]:
    """Live processes of the run ``run_id`` (or of any trainchaos run when None)."""
    needle = f"TRAINCHAOS_RUN_ID={run_id}".encode() if run_id else b"TRAINCHAOS_RUN_ID="
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        if run_id and needle not in env or not run_id and not any(e.startswith(needle) for e in env):
            continue
        st = _stat(pid)
        if st is None or st[0] == "Z":
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = ""
        found.append(ProcInfo(pid=pid, session=st[1], state=st[0], cmdline=cmd,
                              node=_env_int(env, b"TRAINCHAOS_NODE="), rank=_env_int(env, b"RANK=")))
    return found


def _env_int(env: list[bytes], prefix: bytes) -> int | None:
    value = next((e[len(prefix):] for e in env if e.startswith(prefix)), None)
    return int(value) if value and value.isdigit() else None


def kill_pids(pids: list[int], timeout_s: float = 5.0) -> list[int]:
    """SIGKILL each pid (stopped ones included) and wait until they are gone."""
    killed = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(process_state(p) in (None, "Z") for p in killed):
            break
        time.sleep(0.02)
    return killed
