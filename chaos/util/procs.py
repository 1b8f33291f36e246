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

from chaos import contract

__all__ = ["ProcInfo", "controller_alive", "controller_tag", "find_run_processes",
           "kill_pids", "process_start_time", "process_state"]



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
    ppid: int = 0
    run_id: str | None = None
    controller: str | None = None
    """``TRAINCHAOS_CONTROLLER``: ``<pid>:<start time>`` of the controller that started it."""

    @property
    def orphaned(self) -> bool:
        """Its controller is gone (or unknown): nobody will ever stop it but cleanup."""
        return not controller_alive(self.controller)


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from field 3 (state) on; None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            raw = fh.read()
    except OSError:
        return None
    # comm may hold spaces and parens: fields after the last ')' are fixed.
    return raw[raw.rfind(")") + 2:].split()


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, session, parent pid)."""
    rest = _stat_fields(pid)
    return (rest[0], int(rest[3]), int(rest[1])) if rest else None


def process_state(pid: int) -> str | None:
    """Kernel state letter (R, S, T for stopped, Z...), None when gone."""
    st = _stat(pid)
    return st[0] if st else None


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot): with the pid, it names one
    process for good, where a pid alone may be recycled."""
    rest = _stat_fields(pid)
    return int(rest[19]) if rest else None


def find_run_processes(run_id: str | None = None) -> list[ProcInfo]:
    """Live processes of the run ``run_id`` (or of any trainchaos run when None)."""
    needle = f"{contract.RUN_ID_ENV}={run_id}".encode()
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
        found.append(ProcInfo(pid=pid, session=st[1], state=st[0], cmdline=cmd, ppid=st[2],
                              node=_env_int(env, contract.NODE_ENV.encode() + b"="), rank=_global_rank(env),
                              run_id=_env_str(env, contract.RUN_ID_ENV.encode() + b"="),
                              controller=_env_str(env, contract.CONTROLLER_ENV.encode() + b"=")))
    return found


def _global_rank(env: list[bytes]) -> int | None:
    """``RANK`` plus ``TRAINCHAOS_RANK_OFFSET`` (a per-group torchrun numbers from 0)."""
    rank = _env_int(env, b"RANK=")
    offset = _env_int(env, contract.RANK_OFFSET_ENV.encode() + b"=")
    return rank + offset if rank is not None and offset is not None else rank


def _env_str(env: list[bytes], prefix: bytes) -> str | None:
    value = next((e[len(prefix):] for e in env if e.startswith(prefix)), None)
    return value.decode(errors="replace") if value is not None else None


def _env_int(env: list[bytes], prefix: bytes) -> int | None:
    value = _env_str(env, prefix)
    return int(value) if value and value.isdigit() else None


def controller_tag(pid: int | None = None) -> str:
    """``<pid>:<start time>`` of a controller (this process by default), for ``contract.CONTROLLER_ENV``."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{process_start_time(pid)}"


def controller_alive(tag: str | None) -> bool:
    """Whether the controller named by a ``controller_tag`` still runs (same pid, same start)."""
    if not tag or ":" not in tag:
        return False
    pid, _, start = tag.partition(":")
    if not pid.isdigit():
        return False
    return str(process_start_time(int(pid))) == start


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
