"""The one fault lifecycle the runner and the game day share (chaos.runner.lifecycle): journal
before the fault acts, never cut in half by a signal, a raising inject still reverted, what
is left reverted newest first."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from chaos.cluster.base import ResolvedTarget
from chaos.faults.base import FaultType
from chaos.runfiles.journal_writer import JournalWriter
from chaos.runfiles.rollback import FaultJournal
from chaos.runner.lifecycle import FaultLifecycle, Injection
from chaos.util import interrupts

LOG: list[tuple[str, str]] = []


@dataclass
class _Fault(FaultType):
    type_name: ClassVar[str] = "test_lifecycle_fault"
    family: ClassVar[str] = "test"
    failure_class: ClassVar[str] = "crash"
    fidelity: ClassVar[str] = "a test double"

    def inject(self, ctx: Any) -> dict[str, Any]:
        LOG.append(("inject", self.fault_id))
        if self.params.get("signal_during_inject"):
            os.kill(os.getpid(), signal.SIGINT)  # arrives while the fault is being applied
            LOG.append(("inject finished", self.fault_id))
        if self.params.get("raise"):
            raise RuntimeError("half applied")
        return {"done": self.fault_id}

    def revert(self, ctx: Any, record: dict[str, Any]) -> None:
        LOG.append(("revert", self.fault_id))


class _Ctx:
    def __init__(self) -> None:
        self.emitted: list[tuple[str, dict[str, Any]]] = []

    def emit(self, kind: str, **fields: Any) -> None:
        self.emitted.append((kind, fields))

    def due_reverts(self) -> list[Any]:
        return []


def _lifecycle(tmp_path: Path) -> tuple[FaultLifecycle, FaultJournal, _Ctx]:
    LOG.clear()
    ctx = _Ctx()
    journal = FaultJournal(str(tmp_path / "fault_journal.jsonl"))
    return FaultLifecycle(ctx, journal), journal, ctx  # type: ignore[arg-type]


def _injection(fault_id: str, **params: Any) -> Injection:
    fault = _Fault(fault_id=fault_id, target=ResolvedTarget(ranks=(1,)), params=params, target_spec={"rank": 1})
    return Injection(fault, ResolvedTarget(ranks=(1,), pids={1: 4242}))


def test_a_signal_during_inject_waits_for_its_end_and_then_interrupts(tmp_path: Path) -> None:
    lifecycle, journal, ctx = _lifecycle(tmp_path)
    injection = _injection("f0", signal_during_inject=True)
    with interrupts.installed(), pytest.raises(interrupts.Interrupted):
        lifecycle.inject(injection)
    # The inject ran to its end and is on record before the signal took effect.
    assert LOG == [("inject", "f0"), ("inject finished", "f0")]
    assert [r["op"] for r in journal.records()] == ["apply", "applied"]
    assert injection.active and injection.record == {"done": "f0"}
    assert [kind for kind, _ in ctx.emitted] == ["fault_injected"]
    assert lifecycle.revert_all() == [injection] and LOG[-1] == ("revert", "f0")
    assert journal.pending() == []


def test_a_signal_while_teardown_holds_is_left_to_the_holder(tmp_path: Path) -> None:
    lifecycle, journal, _ = _lifecycle(tmp_path)
    with interrupts.installed():
        interrupts.hold()
        try:
            lifecycle.inject(_injection("f0", signal_during_inject=True))  # does not raise
            assert interrupts.take_pending() == "SIGINT"
        finally:
            interrupts.release()
    assert lifecycle.revert_all()[0].revert_error is None


def test_a_raising_inject_is_journaled_and_still_reverted(tmp_path: Path) -> None:
    lifecycle, journal, _ = _lifecycle(tmp_path)
    injection = lifecycle.inject(_injection("f0", **{"raise": True}))
    assert injection.inject_error == "RuntimeError: half applied" and isinstance(injection.exception, RuntimeError)
    assert injection.active and journal.pending() == [{"fault_id": "f0", "type": "test_lifecycle_fault", "details": {}}]
    lifecycle.revert_all()
    assert LOG == [("inject", "f0"), ("revert", "f0")] and journal.pending() == []


def test_what_is_left_is_reverted_newest_first_and_once(tmp_path: Path) -> None:
    lifecycle, journal, ctx = _lifecycle(tmp_path)
    first, second, third = (lifecycle.inject(_injection(f"f{i}")) for i in range(3))
    assert lifecycle.revert(second) is None
    assert lifecycle.revert(second) is None  # no longer active: nothing happens
    assert lifecycle.revert_all() == [third, first]
    assert [e for e in LOG if e[0] == "revert"] == [("revert", "f1"), ("revert", "f2"), ("revert", "f0")]
    assert lifecycle.history == [first, second, third] and not lifecycle.active
    assert all(i.t_revert is not None and i.t_inject is not None and i.t_inject <= i.t_revert
               for i in lifecycle.history)
    assert [f["fault"] for kind, f in ctx.emitted if kind == "fault_reverted"] == ["f1", "f2", "f0"]


def _queued_lifecycle(tmp_path: Path) -> tuple[FaultLifecycle, FaultJournal]:
    LOG.clear()
    path = str(tmp_path / "fault_journal.jsonl")
    journal = FaultJournal(path, JournalWriter(path))
    return FaultLifecycle(_Ctx(), journal), journal  # type: ignore[arg-type]


def test_an_armed_fault_is_journaled_before_it_is_due_and_injected_without_a_second_apply(tmp_path: Path) -> None:
    lifecycle, journal = _queued_lifecycle(tmp_path)
    injection = _injection("f0")
    lifecycle.arm(injection.fault, planned=1234.5)
    lifecycle.arm(injection.fault, planned=1234.5)  # once per fault
    journal.wait(lifecycle.armed["f0"])
    # From here on cleanup after a killed controller reverts it (nothing done: no details).
    assert journal.pending() == [{"fault_id": "f0", "type": "test_lifecycle_fault", "details": {}}]
    lifecycle.inject(injection)
    journal.close()
    apply, applied = journal.records()
    assert (apply["op"], apply["armed"], apply["target"]) == ("apply", 1234.5, {"rank": 1})
    # What it hit and when it took effect come with the record written after it.
    assert applied["op"] == "applied" and applied["details"] == {"done": "f0"}
    assert applied["target"]["pids"] == {"1": 4242} and applied["t_inject"] == injection.t_inject
    assert not lifecycle.armed and journal.pending()[0]["details"] == {"done": "f0"}


def test_teardown_closes_armed_faults_that_never_came(tmp_path: Path) -> None:
    lifecycle, journal = _queued_lifecycle(tmp_path)
    came, never = _injection("f0"), _injection("f1")
    lifecycle.arm(came.fault)
    lifecycle.arm(never.fault)
    lifecycle.inject(came)
    assert lifecycle.revert_all() == [came]
    journal.close()
    assert journal.pending() == []
    assert [(r["op"], r["fault_id"], r.get("note")) for r in journal.records() if r["op"] == "reverted"] == [
        ("reverted", "f0", None), ("reverted", "f1", "armed, never injected")]


def test_an_armed_fault_whose_target_was_gone_is_closed_with_its_one_apply(tmp_path: Path) -> None:
    lifecycle, journal = _queued_lifecycle(tmp_path)
    fault = _injection("f0").fault
    lifecycle.arm(fault)
    lifecycle.never_applied(fault, "rank 1 has no live process")
    journal.close()
    assert [r["op"] for r in journal.records()] == ["apply", "reverted"] and journal.pending() == []
