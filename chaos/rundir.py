"""Every path of one run directory (``reports/<suite>/<scenario>/<repeat>/``), in one class.

A file name spelled in six modules drifts; here each is spelled once, and code asks a
``RunDir`` for the path. The names the training job shares with the controller (where the
probe writes events, where checkpoints go) come from ``chaos.contract``: the job side reads
them without trainchaos's dependencies.

What a run directory holds, and who writes it:

========================  ======================================================================
``run.json``              the run's start record (scenario, seed, plan), before anything starts
``journal.json``          the run record (``chaos.record``): written last, for every outcome
``fault_journal.jsonl``   every fault as applied and reverted (``chaos.rollback``), fsynced
``resources.jsonl``       every run-scoped resource as created and released
``probe_faults.json``     the in-process faults each rank's probe fires
``events/``               every process's events (``chaos.probe``)
``logs/``                 each node's output, and run-scoped helpers' logs
``checkpoints/``          the harness's shared checkpoint tier (unless configured elsewhere)
``summary.md``            the record explained for a human
``report.html``           the record as a page
``timeline.csv|.parquet`` every event in one ordered table
========================  ======================================================================
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from chaos.contract import EVENTS_SUBDIR, SHARED_CHECKPOINTS_SUBDIR

LOGS_SUBDIR = "logs"
PROBE_FAULTS_FILE = "probe_faults.json"
__all__ = [
    "FAULT_JOURNAL_FILE",
    "LOGS_SUBDIR",
    "PROBE_FAULTS_FILE",
    "RESOURCES_FILE",
    "RUN_RECORD_FILE",
    "RUN_REPORT_HTML",
    "RUN_START_FILE",
    "SUMMARY_FILE",
    "TIMELINE_CSV",
    "TIMELINE_PARQUET",
    "RunDir",
]

RUN_RECORD_FILE = "journal.json"
"""The run record. Its on-disk name stays ``journal.json``: every report folder and CI script
written so far knows it by that name."""
RUN_START_FILE = "run.json"
FAULT_JOURNAL_FILE = "fault_journal.jsonl"
RESOURCES_FILE = "resources.jsonl"
SUMMARY_FILE = "summary.md"
RUN_REPORT_HTML = "report.html"
TIMELINE_CSV = "timeline.csv"
TIMELINE_PARQUET = "timeline.parquet"


@dataclass(frozen=True)
class RunDir:
    """The directory of one run; ``path`` is kept as given (absolute when the runner made it)."""

    path: str

    @classmethod
    def of(cls, path: str) -> RunDir:
        return cls(os.path.abspath(path))

    def _join(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    @property
    def run_record(self) -> str:
        """``journal.json``: the run record (``chaos.record``)."""
        return self._join(RUN_RECORD_FILE)

    @property
    def run_start(self) -> str:
        """``run.json``: what the run record needs that the events do not hold, on disk before
        the job starts, so that ``trainchaos cleanup`` can write the record of a killed run."""
        return self._join(RUN_START_FILE)

    @property
    def fault_journal(self) -> str:
        return self._join(FAULT_JOURNAL_FILE)

    @property
    def resources_journal(self) -> str:
        return self._join(RESOURCES_FILE)

    @property
    def probe_faults(self) -> str:
        return self._join(PROBE_FAULTS_FILE)

    @property
    def events(self) -> str:
        return self._join(EVENTS_SUBDIR)

    @property
    def logs(self) -> str:
        return self._join(LOGS_SUBDIR)

    def node_log(self, node: int | str) -> str:
        return self._join(LOGS_SUBDIR, f"node-{node}.log")

    def log(self, name: str) -> str:
        """A run-scoped helper's log (``toxiproxy.log``, ``srun.out``)."""
        return self._join(LOGS_SUBDIR, name)

    @property
    def checkpoints(self) -> str:
        return self._join(SHARED_CHECKPOINTS_SUBDIR)

    @property
    def summary(self) -> str:
        return self._join(SUMMARY_FILE)

    @property
    def report_html(self) -> str:
        return self._join(RUN_REPORT_HTML)

    @property
    def timeline_csv(self) -> str:
        return self._join(TIMELINE_CSV)

    @property
    def timeline_parquet(self) -> str:
        return self._join(TIMELINE_PARQUET)

    def has_run_record(self) -> bool:
        return os.path.exists(self.run_record)
