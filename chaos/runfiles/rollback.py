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

Both are read by whoever cleans up after a crash, so a damaged line (torn by a full disk,
garbage written by a broken tool or a hand) is skipped and *named*, file and line, and every
other record is still used: ``read_journal`` and ``FaultJournal.damaged``, ``registry_problems``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

from chaos import contract
from chaos.runfiles.journal_writer import JournalWriter, journal_line, needs_newline
from chaos.util.fileio import atomic_write_text
from chaos.util.procs import controller_alive, controller_tag

__all__ = ["DamagedLine", "FaultJournal", "active_runs", "append_record", "live_dir", "live_run_ids",
           "prune_live_marks", "read_journal", "read_records", "registry_problems", "run_is_live",
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
    # Whole or not at all: a cleanup beside it, or after a full disk cut the write short,
    # must never find half an entry.
    atomic_write_text(path, json.dumps(entry))
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
        # Whole or not at all (a reader skips the temp name), readable by every user.
        path = os.path.join(directory, f"{entry['run_id']}.json")
        with open(f"{path}.{os.getpid()}.tmp", "w", encoding="utf-8") as fh:
            json.dump(entry, fh)
        os.replace(fh.name, path)
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
        if not name.endswith(".json"):
            continue  # a mark being written (its temp file)
        path = os.path.join(directory, name)
        try:
            with open(path, encoding="utf-8") as fh:
                mark = json.load(fh)
        except OSError:
            continue
        except ValueError:
            mark = None
        # Marks are written whole (renamed into place): garbage names no live controller,
        # counts for nothing and is pruned like a dead one's.
        marks.append((path, mark if isinstance(mark, dict) else {}))
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


def _registry_entry(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """One registry file: its entry, or why it cannot be used."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None, None  # unregistered meanwhile: nothing to say
    except OSError as exc:
        return None, f"{path}: unreadable registry entry: {exc}"
    try:
        entry = json.loads(text)
    except ValueError as exc:
        return None, f"{path}:1: damaged registry entry (not JSON: {exc})"
    if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("run_id", "run_dir")):
        return None, f"{path}:1: damaged registry entry (not an object with a run_id and a run_dir)"
    return entry, None


def _registry_files() -> list[str]:
    directory = state_dir()
    return [os.path.join(directory, name) for name in sorted(os.listdir(directory)) if name.endswith(".json")]


def active_runs() -> list[dict[str, Any]]:
    """The registered runs; a damaged entry is left out (``registry_problems`` names it)."""
    entries = (_registry_entry(path)[0] for path in _registry_files())
    return [entry for entry in entries if entry is not None]


def registry_problems() -> list[str]:
    """Each registry entry that cannot be used, as ``file:line: what is wrong``."""
    problems = (_registry_entry(path)[1] for path in _registry_files())
    return [problem for problem in problems if problem is not None]


def append_record(path: str, record: dict[str, Any]) -> None:
    """Append one JSON line and fsync it: it is on disk before the action it announces."""
    with open(path, "ab+") as fh:  # +: readable, to see how the file ends
        # After a torn last line (a full disk cut it short), a new line of its own: glued to
        # the torn one, this record would be lost with it.
        line = journal_line(record)
        fh.write(b"\n" + line if needs_newline(fh.fileno()) else line)
        fh.flush()
        os.fsync(fh.fileno())


@dataclass(frozen=True)
class DamagedLine:
    """A journal line no reader can use: where it is, and why."""

    path: str
    line: int
    problem: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.problem}"


def read_journal(path: str) -> tuple[list[dict[str, Any]], list[DamagedLine]]:
    """Every record of a JSON-lines journal (each a JSON object), and every line that is
    not one. A torn last line, a garbage line in the middle: the records around it still
    tell what to undo."""
    numbered, damaged = _read_numbered(path)
    return [rec for _, rec in numbered], damaged


def _read_numbered(path: str) -> tuple[list[tuple[int, dict[str, Any]]], list[DamagedLine]]:
    """``read_journal``, each record with its line number."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 (closed below; a missing file is an empty journal)
    except FileNotFoundError:
        return [], []
    records: list[tuple[int, dict[str, Any]]] = []
    damaged: list[DamagedLine] = []
    with fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                torn = not raw.endswith(b"\n")
                damaged.append(DamagedLine(path, number, "torn (no end of line)" if torn else
                                           f"not JSON: {raw[:60]!r}"))
                continue
            if not isinstance(record, dict):
                damaged.append(DamagedLine(path, number, f"not a JSON object: {raw[:60]!r}"))
                continue
            records.append((number, record))
    return records, damaged


def read_records(path: str) -> list[dict[str, Any]]:
    """The records of a journal, its damaged lines skipped (``read_journal`` names them)."""
    return read_journal(path)[0]


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
        """Every usable record (``damaged`` names the lines left out)."""
        return self._read()[0]

    def damaged(self) -> list[DamagedLine]:
        """Each line that is not a record this journal writes (torn, garbage, a record
        without its ``op``, ``fault_id`` or, for ``apply``, ``type``)."""
        return self._read()[1]

    def _read(self) -> tuple[list[dict[str, Any]], list[DamagedLine]]:
        numbered, damaged = _read_numbered(self.path)
        records = []
        for number, rec in numbered:
            problem = _fault_record_problem(rec)
            if problem:
                damaged.append(DamagedLine(self.path, number, problem))
            else:
                records.append(rec)
        damaged.sort(key=lambda d: d.line)
        return records, damaged

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


_FAULT_OPS = ("apply", "applied", "reverted")


def _fault_record_problem(rec: dict[str, Any]) -> str | None:
    if rec.get("op") not in _FAULT_OPS:
        return f"not a fault journal record (op {rec.get('op')!r}; one of {', '.join(_FAULT_OPS)} expected)"
    if not isinstance(rec.get("fault_id"), str):
        return f"{rec['op']} record without a fault_id"
    if rec["op"] == "apply" and not isinstance(rec.get("type"), str):
        return "apply record without a fault type"
    if rec["op"] == "apply" and not isinstance(rec.get("target", {}), dict):
        return "apply record whose target is not an object"
    if rec["op"] == "applied" and not isinstance(rec.get("details", {}), dict):
        return "applied record whose details are not an object"
    return None

