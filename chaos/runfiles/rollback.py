"""The fault journal: every fault is written down before it takes effect, and reverted from it.

``<run>/fault_journal.jsonl`` holds ``apply`` (before injecting), ``applied`` (with what the
fault did: pids, rules) and ``reverted`` records, each fsynced: a controller killed between
two lines must leave enough for ``trainchaos cleanup`` to undo what it did. Only ``apply`` is
waited for; with a ``JournalWriter`` (the run loop's) the others are synced from its thread,
and an ``apply`` may be written ahead of the fault's time (``armed``, see
``chaos.runner.lifecycle.FaultLifecycle.arm``): its ``applied`` record then carries the target as
resolved and the time the fault took effect. Active runs are also registered in a state
directory so that cleanup finds them without being told where, and marked live in one
directory of the whole machine (``live_dir``), so that a cleanup of any state directory
knows a run of another one (another user's, a test's beside it) is alive.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from chaos import contract
from chaos.runfiles.journal_writer import JournalWriter, journal_line
from chaos.util.procs import controller_alive, controller_tag

__all__ = ["FaultJournal", "active_runs", "append_record", "live_dir", "live_run_ids", "prune_live_marks",
           "read_records", "run_is_live", "register_run", "state_base", "state_dir", "unregister_run"]


def state_base() -> str:
    """Where trainchaos keeps machine-wide state (``TRAINCHAOS_STATE_DIR``, else the XDG state
    directory): the active-run registry and node-local scratch space."""
    return os.environ.get(contract.STATE_DIR_ENV) or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "trainchaos"
    )


def state_dir() -> str:
    path = os.path.join(state_base(), "active")
    os.makedirs(path, exist_ok=True)
    return path


def run_is_live(entry: dict[str, Any]) -> bool:
    """Whether the controller that registered ``entry`` still runs (same pid, same start)."""
    return controller_alive(entry.get("controller"))


def live_dir() -> str:
    """The machine's one directory of live-run marks. On tmpfs: a reboot, which ends every
    controller, empties it; a mark a SIGKILLed controller left names a dead controller and
    counts for nothing."""
    # A fixed name every controller of the machine finds (docs/security.md).
    return os.environ.get(contract.LIVE_DIR_ENV) or "/dev/shm/trainchaos-live"  # nosec B108


def register_run(run_id: str, run_dir: str) -> str:
    path = os.path.join(state_dir(), f"{run_id}.json")
    entry = {"run_id": run_id, "run_dir": os.path.abspath(run_dir), "pid": os.getpid(),
             "controller": controller_tag(), "started": time.time()}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(entry, fh)
        fh.flush()
        os.fsync(fh.fileno())
    _mark_live(entry)
    return path


def _mark_live(entry: dict[str, Any]) -> None:
    # Best effort: without the mark (no /dev/shm, not writable) a cleanup of another state
    # dir cannot tell this run from a dead one's leftovers, as before the marks existed.
    directory = live_dir()
    try:
        if not os.path.isdir(directory):
            os.makedirs(directory, exist_ok=True)
            # Sticky and world-writable as /tmp: every user's controllers mark here, each removes
            # its own (docs/security.md: what a forged mark can do).
            os.chmod(directory, 0o1777)  # nosec B103
        with open(os.path.join(directory, f"{entry['run_id']}.json"), "w", encoding="utf-8") as fh:
            json.dump(entry, fh)
    except OSError:
        pass


def unregister_run(run_id: str) -> None:
    for directory in (state_dir(), live_dir()):
        try:
            os.remove(os.path.join(directory, f"{run_id}.json"))
        except (FileNotFoundError, PermissionError):
            pass


def _live_marks() -> list[tuple[str, dict[str, Any]]]:
    directory = live_dir()
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    marks = []
    for name in names:
        path = os.path.join(directory, name)
        try:
            with open(path, encoding="utf-8") as fh:
                marks.append((path, json.load(fh)))
        except (OSError, ValueError):
            continue
    return marks


def live_run_ids() -> set[str]:
    """Every run on this machine whose controller still runs: this state dir's registry and
    the machine's live marks (runs of any state dir)."""
    live = {r["run_id"] for r in active_runs() if run_is_live(r)}
    return live | {m["run_id"] for _, m in _live_marks() if "run_id" in m and run_is_live(m)}


def prune_live_marks() -> int:
    """Remove the marks of dead controllers (SIGKILLed, crashed); how many went."""
    pruned = 0
    for path, mark in _live_marks():
        if not run_is_live(mark):
            try:
                os.remove(path)
                pruned += 1
            except OSError:
                continue
    return pruned


def active_runs() -> list[dict[str, Any]]:
    runs = []
    directory = state_dir()
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json"):
            try:
                with open(os.path.join(directory, name), encoding="utf-8") as fh:
                    runs.append(json.load(fh))
            except (OSError, json.JSONDecodeError):
                continue
    return runs


def append_record(path: str, record: dict[str, Any]) -> None:
    """Append one JSON line and fsync it: it is on disk before the action it announces."""
    with open(path, "ab") as fh:
        fh.write(journal_line(record))
        fh.flush()
        os.fsync(fh.fileno())


def read_records(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a torn last line: the record before it still tells what to undo
    return out


class FaultJournal:
    """One run's (or game day's) fault journal. Without a ``writer`` every record is synced
    before its method returns; with one, only ``apply`` waits (unless armed ahead)."""

    def __init__(self, path: str, writer: JournalWriter | None = None) -> None:
        self.path = path
        self.writer = writer
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)

    def _append(self, record: dict[str, Any], durable: bool = False) -> int:
        """Append ``record``; its sequence number for ``wait`` (0: on disk already)."""
        if self.writer is None:
            append_record(self.path, record)
            return 0
        seq = self.writer.append(record)
        if durable:
            self.writer.wait(seq)
        return seq

    def apply(self, fault_id: str, fault_type: str, target: dict[str, Any], armed: float | None = None,
              wait: bool = True) -> int:
        """The fault may be in effect from now on: on disk when this returns (``wait``), else
        once ``wait(seq)`` returns. ``armed``: written ahead for a fault planned at that time,
        ``target`` being the planned one (the ``applied`` record tells what it hit)."""
        record: dict[str, Any] = {"op": "apply", "fault_id": fault_id, "type": fault_type, "target": target}
        if armed is not None:
            record["armed"] = armed
        return self._append(record, durable=wait)

    def wait(self, seq: int) -> None:
        """Until record ``seq`` (an ``apply``'s number) is on disk."""
        if self.writer is not None and seq:
            self.writer.wait(seq)

    def applied(self, fault_id: str, details: dict[str, Any], target: dict[str, Any] | None = None,
                t_inject: float | None = None) -> None:
        record: dict[str, Any] = {"op": "applied", "fault_id": fault_id, "details": details}
        if target is not None:  # an armed fault: its apply named the planned target only
            record.update(target=target, t_inject=t_inject)
        self._append(record)

    def reverted(self, fault_id: str, error: str | None = None, note: str | None = None) -> None:
        record: dict[str, Any] = {"op": "reverted", "fault_id": fault_id, "error": error}
        if note:
            record["note"] = note
        self._append(record)

    def close(self) -> None:
        """Every record on disk; raises ``JournalWriteError`` if one could not be written."""
        if self.writer is not None:
            self.writer.close()

    def records(self) -> list[dict[str, Any]]:
        return read_records(self.path)

    def pending(self) -> list[dict[str, Any]]:
        """Faults applied (or being applied) and not reverted: {fault_id, type, details}."""
        state: dict[Any, dict[str, Any]] = {}  # by fault_id, as journaled
        for rec in self.records():
            fid = rec.get("fault_id")
            if rec.get("op") == "apply":
                state[fid] = {"fault_id": fid, "type": rec.get("type"), "details": {}}
            elif rec.get("op") == "applied" and fid in state:
                state[fid]["details"] = rec.get("details", {})
            elif rec.get("op") == "reverted":
                state.pop(fid, None)
        return list(state.values())
