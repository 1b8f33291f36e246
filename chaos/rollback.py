"""The fault journal: every fault is written down before it takes effect, and reverted from it.

``<run>/fault_journal.jsonl`` holds ``apply`` (before injecting), ``applied`` (with what the
fault did: pids, rules) and ``reverted`` records, each fsynced: a controller killed between
two lines must leave enough for ``trainchaos cleanup`` to undo what it did. Active runs are
also registered in a state directory so that cleanup finds them without being told where.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from chaos import contract
from chaos.procs import controller_alive, controller_tag

__all__ = ["FaultJournal", "active_runs", "append_record", "read_records", "run_is_live",
           "register_run", "state_base", "state_dir", "unregister_run"]


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


def register_run(run_id: str, run_dir: str) -> str:
    path = os.path.join(state_dir(), f"{run_id}.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"run_id": run_id, "run_dir": os.path.abspath(run_dir), "pid": os.getpid(),
                   "controller": controller_tag(), "started": time.time()}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    return path


def unregister_run(run_id: str) -> None:
    try:
        os.remove(os.path.join(state_dir(), f"{run_id}.json"))
    except FileNotFoundError:
        pass


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
    record = {"t": time.time(), **record}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, default=str) + "\n")
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
    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)

    def _append(self, record: dict[str, Any]) -> None:
        append_record(self.path, record)

    def apply(self, fault_id: str, fault_type: str, target: dict[str, Any]) -> None:
        self._append({"op": "apply", "fault_id": fault_id, "type": fault_type, "target": target})

    def applied(self, fault_id: str, details: dict[str, Any]) -> None:
        self._append({"op": "applied", "fault_id": fault_id, "details": details})

    def reverted(self, fault_id: str, error: str | None = None) -> None:
        self._append({"op": "reverted", "fault_id": fault_id, "error": error})

    def records(self) -> list[dict[str, Any]]:
        return read_records(self.path)

    def pending(self) -> list[dict[str, Any]]:
        """Faults applied (or being applied) and not reverted: {fault_id, type, details}."""
        state: dict[str, dict[str, Any]] = {}
        for rec in self.records():
            fid = rec.get("fault_id")
            if rec.get("op") == "apply":
                state[fid] = {"fault_id": fid, "type": rec.get("type"), "details": {}}
            elif rec.get("op") == "applied" and fid in state:
                state[fid]["details"] = rec.get("details", {})
            elif rec.get("op") == "reverted":
                state.pop(fid, None)
        return list(state.values())
