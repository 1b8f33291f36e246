"""``journal.json``: the complete, machine-readable record of one run.

The runner builds the journal as a plain dict (shape documented by the ``TypedDict``s below)
and writes it for every run, also a failed or interrupted one (as chaostoolkit does): a run
without a journal is a run nobody can explain. Values inside ``metrics`` and ``verdict``, or
those dicts themselves, may be None when the run ended before they could be computed.
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal, TypedDict

from chaos.errors import EXIT_BAD_INPUT, ChaosError
from chaos.report._format import atomic_write_text, jsonable

__all__ = [
    "JOURNAL_FORMAT",
    "JOURNAL_NAME",
    "Baseline",
    "Check",
    "FaultMetrics",
    "FaultRecord",
    "Journal",
    "JournalError",
    "Metrics",
    "PlannedFault",
    "RunStatus",
    "ScenarioInfo",
    "Verdict",
    "Versions",
    "read_journal",
    "write_journal",
]

JOURNAL_FORMAT = 1
"""Bumped when a field changes meaning; readers refuse journals newer than they know."""
JOURNAL_NAME = "journal.json"

RunStatus = Literal["completed", "hung", "failed", "interrupted", "tool_error", "aborted"]
"""tool_error: trainchaos itself failed (see ``tool_errors``); such a run has no verdict."""
Precision = Literal["exact", "next_step", "late"]


class ScenarioInfo(TypedDict):
    name: str
    path: str
    description: str
    seed: int
    topology: dict[str, Any]
    workload: dict[str, Any]
    targets: dict[str, Any]
    faults: list[dict[str, Any]]


class Versions(TypedDict):
    trainchaos: str
    torch: str | None
    python: str
    platform: str


class PlannedFault(TypedDict):
    fault_id: str
    type: str
    target: dict[str, list[int]]
    """Resolved: ``{"ranks": [3], "nodes": [1]}``."""
    trigger: dict[str, Any]
    params: dict[str, Any]


class FaultRecord(TypedDict):
    """A fault as it actually happened (from the injector's events)."""

    fault_id: str
    type: str
    failure_class: str
    target_srcs: list[str]
    planned_step: int | None
    step_at_inject: int | None
    t_inject: float | None
    t_revert: float | None
    mechanism: str | None
    fidelity: str | None
    """The fault type's fidelity statement: what it stands for and what it does not prove."""
    precision: Precision | None
    """exact: landed on the planned step; next_step: one later (signals); late: later still."""
    details: dict[str, Any]


class FaultMetrics(TypedDict):
    fault_id: str
    detection_s: float | None
    """None: undetected inside the run window."""
    detected_by: str | None
    detection_reason: str | None
    attribution: str | None
    attribution_detail: str | None
    recovery_s: float | None
    catchup_s: float | None
    lost_steps: int | None
    restarted: bool | None


class Metrics(TypedDict):
    detection_s: float | None
    recovery_s: float | None
    catchup_s: float | None
    lost_steps: int | None
    goodput: float | None
    """Productive step time / wall time, 0..1."""
    lost_work_rank_s: float | None
    wall_s: float | None
    completed: bool | None
    final_step: int | None
    final_digest: str | None
    restart_count: int | None
    digest_match: bool | None
    max_rel_loss_dev: float | None
    false_detections: int
    """Detections that blamed a process no fault hit (``chaos.metrics``)."""
    false_detection_events: list[dict[str, Any]]
    faults: list[FaultMetrics]


class Check(TypedDict):
    name: str
    ok: bool
    value: Any
    bound: Any
    reason: str | None


class Verdict(TypedDict):
    passed: bool
    checks: list[Check]


class Baseline(TypedDict):
    digest: str | None
    wall_s: float | None
    run_dir: str


class Journal(TypedDict):
    format: int
    scenario: ScenarioInfo
    repeat_index: int
    run_dir: str
    """``reports/<suite>/<scenario>/<repeat>``."""
    status: RunStatus
    error: str | None
    tool_errors: list[str]
    """What of trainchaos failed (inject, target resolution, revert, teardown, the runner)."""
    traceback: str | None
    backend: dict[str, Any]
    """``{"name": "local", "options": {}}``."""
    started_at: str
    ended_at: str
    wall_s: float
    versions: Versions
    seed: int
    plan: list[PlannedFault]
    faults: list[FaultRecord]
    metrics: Metrics | None
    verdict: Verdict | None
    baseline: Baseline | None


class JournalError(ChaosError):
    """A journal file that is missing, unreadable, or from a newer trainchaos."""

    exit_code = EXIT_BAD_INPUT


def write_journal(run_dir: str, journal: dict[str, Any]) -> str:
    """Write ``<run_dir>/journal.json`` atomically; returns its path.

    Non-finite floats become null and unknown objects their ``str()``, so that writing the
    journal cannot fail on an odd value in the one file that must always exist.
    """
    path = os.path.join(run_dir, JOURNAL_NAME)
    text = json.dumps(jsonable(journal), indent=2, default=str, allow_nan=False)
    return atomic_write_text(path, text + "\n")


def read_journal(path: str) -> dict[str, Any]:
    """Read a journal from its file or from the run directory that holds it."""
    if os.path.isdir(path):
        path = os.path.join(path, JOURNAL_NAME)
    try:
        with open(path, encoding="utf-8") as fh:
            journal = json.load(fh)
    except FileNotFoundError:
        raise JournalError(f"{path}: no journal here (is this a run directory?)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise JournalError(f"{path}: unreadable journal: {exc}") from None
    if not isinstance(journal, dict):
        raise JournalError(f"{path}: not a journal (expected a JSON object)")
    fmt = journal.get("format")
    if isinstance(fmt, int) and fmt > JOURNAL_FORMAT:
        raise JournalError(
            f"{path}: journal format {fmt} is newer than this trainchaos reads "
            f"({JOURNAL_FORMAT}); upgrade trainchaos"
        )
    return journal
