"""The fault journal's writer (chaos.runfiles.journal_writer): records written at once in the order
given, synced by a thread of its own (a burst with one sync), durability waited for only
where asked, a failed write raised to whoever waits instead of passing silently; and the one
thing that does wait: a fault is not touched before its ``apply`` is synced."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from chaos.cluster.base import ResolvedTarget
from chaos.runfiles import journal_writer
from chaos.runfiles.journal_writer import JournalWriteError, JournalWriter
from chaos.runfiles.rollback import FaultJournal
from chaos.runner.lifecycle import FaultLifecycle, Injection


class _GatedSync:
    """Stands in for fdatasync: counts syncs and holds the first one until released."""

    def __init__(self, real) -> None:
        self.real = real
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self.entered.set()
        self.release.wait()
        self.real(fd)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_records_reach_the_disk_in_order_and_close_writes_what_is_queued(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    writer = JournalWriter(str(path))
    seqs = [writer.append({"op": "x", "i": i}) for i in range(50)]
    assert seqs == list(range(1, 51))
    writer.wait(seqs[9])
    assert writer.durable(seqs[9])
    assert [r["i"] for r in _lines(path)][:10] == list(range(10))
    writer.close()
    records = _lines(path)
    assert [r["i"] for r in records] == list(range(50))
    assert all(isinstance(r["t"], float) for r in records)  # stamped when appended
    with pytest.raises(JournalWriteError, match="closed"):
        writer.append({"op": "late"})


def test_a_burst_written_during_a_sync_is_synced_with_one_more(tmp_path: Path, monkeypatch) -> None:
    gate = _GatedSync(journal_writer._sync)
    monkeypatch.setattr(journal_writer, "_sync", gate)
    path = tmp_path / "j.jsonl"
    writer = JournalWriter(str(path))
    first = writer.append({"op": "first"})
    assert gate.entered.wait(30)  # the writer is inside the first record's sync
    rest = [writer.append({"op": "burst", "i": i}) for i in range(20)]
    # Appending did not wait for the sync: the lines are there for a reader (and survive a
    # SIGKILLed controller), yet none counts as synced.
    assert [r["op"] for r in _lines(path)] == ["first"] + ["burst"] * 20
    assert not writer.durable(first) and not writer.durable(rest[-1])
    gate.release.set()
    writer.wait(rest[-1])
    assert gate.calls == 2
    writer.close()
    assert [r["op"] for r in _lines(path)] == ["first"] + ["burst"] * 20


def test_a_failed_write_is_raised_to_every_waiter_and_by_close(tmp_path: Path) -> None:
    writer = JournalWriter(str(tmp_path))  # a directory: the open fails
    seq = writer.append({"op": "apply"})
    with pytest.raises(JournalWriteError, match="Is a directory"):
        writer.wait(seq)
    writer.append({"op": "reverted"})  # a revert that went through is not failed for its record
    with pytest.raises(JournalWriteError):
        writer.wait()
    with pytest.raises(JournalWriteError):
        writer.close()


def test_close_without_records_starts_no_thread_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    writer = JournalWriter(str(path))
    writer.close()
    writer.wait()
    assert not path.exists()


def test_an_armed_fault_is_not_touched_before_its_apply_is_on_disk(tmp_path: Path, monkeypatch) -> None:
    touched: list[str] = []

    class _Fault:
        fault_id, type_name, target_spec, target = "f0", "test_fault", {"rank": 1}, None

        def inject(self, ctx: object) -> dict:
            touched.append("inject")
            return {}

    class _Ctx:
        def emit(self, kind: str, **fields: object) -> None:
            pass

    gate = _GatedSync(journal_writer._sync)
    monkeypatch.setattr(journal_writer, "_sync", gate)
    path = str(tmp_path / "fault_journal.jsonl")
    journal = FaultJournal(path, JournalWriter(path))
    lifecycle = FaultLifecycle(_Ctx(), journal)  # type: ignore[arg-type]
    injection = Injection(_Fault(), ResolvedTarget(ranks=(1,), pids={1: 4242}))  # type: ignore[arg-type]
    lifecycle.arm(injection.fault)
    assert gate.entered.wait(30)  # the apply is being synced, and stays so until released
    worker = threading.Thread(target=lifecycle.inject, args=(injection,))
    worker.start()
    worker.join(0.2)
    assert touched == []
    gate.release.set()
    worker.join(30)
    assert touched == ["inject"]
    journal.close()
    assert [r["op"] for r in journal.records()] == ["apply", "applied"]
