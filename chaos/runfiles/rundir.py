"""Every path of one run directory (``reports/<suite>/<scenario>/<repeat>/``), in one class.

A file name spelled in six modules drifts; here each is spelled once, and code asks a
``RunDir`` for the path. The names the training job shares with the controller (where the
probe writes events, where checkpoints go) come from ``chaos.contract``: the job side reads
them without trainchaos's dependencies.

What a run directory holds, and who writes it:

========================  ======================================================================
``.trainchaos.lock``      held (flock) by the controller of the run: a second one refuses the directory
``run.json``              the run's start record (scenario, seed, plan), before anything starts
``journal.json``          the run record (``chaos.runfiles.record``): written last, for every outcome
``fault_journal.jsonl``   every fault as applied and reverted (``chaos.runfiles.rollback``), fsynced
``resources.jsonl``       every run-scoped resource as created and released
``probe_faults.json``     the in-process faults each rank's probe fires
``events/``               every process's events (``chaos.probe``)
``holds/``                the controller's confirmations that ranks holding at a step wait for
``logs/``                 each node's output, and run-scoped helpers' logs
``checkpoints/``          the harness's shared checkpoint tier (unless configured elsewhere)
``crash-image/``          the tier as an armed crash point's power loss left it (--crash-points)
``summary.md``            the record explained for a human
``report.html``           the record as a page
``timeline.csv|.parquet`` every event in one ordered table
========================  ======================================================================
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass

from chaos.contract import EVENTS_SUBDIR, HOLDS_SUBDIR, SHARED_CHECKPOINTS_SUBDIR
from chaos.errors import ToolError

LOGS_SUBDIR = "logs"
PROBE_FAULTS_FILE = "probe_faults.json"
__all__ = [
    "FAULT_JOURNAL_FILE",
    "LOGS_SUBDIR",
    "PROBE_FAULTS_FILE",
    "RESOURCES_FILE",
    "RUN_RECORD_FILE",
    "RUN_REPORT_HTML",
    "RUN_DIR_LOCK_FILE",
    "RUN_START_FILE",
    "SUMMARY_FILE",
    "TIMELINE_CSV",
    "TIMELINE_PARQUET",
    "RunDir",
    "RunDirLock",
]

RUN_RECORD_FILE = "journal.json"
"""The run record. Its on-disk name stays ``journal.json``: every report folder and CI script
written so far knows it by that name."""
RUN_START_FILE = "run.json"
RUN_DIR_LOCK_FILE = ".trainchaos.lock"
FAULT_JOURNAL_FILE = "fault_journal.jsonl"
RESOURCES_FILE = "resources.jsonl"
SUMMARY_FILE = "summary.md"
RUN_REPORT_HTML = "report.html"
TIMELINE_CSV = "timeline.csv"
TIMELINE_PARQUET = "timeline.parquet"


def _entry(name: str, doc: str = "") -> property:
    """A path in the run directory, as a read-only attribute of ``RunDir``."""
    return property(lambda self: os.path.join(self.path, name), doc=doc or f"``<run_dir>/{name}``")


@dataclass(frozen=True)
class RunDir:
    """The directory of one run; ``path`` is kept as given (absolute when the runner made it)."""

    path: str

    run_record = _entry(RUN_RECORD_FILE, "``journal.json``: the run record (``chaos.runfiles.record``).")
    run_start = _entry(RUN_START_FILE, "``run.json``: what the run record needs that the events do "
                       "not hold, on disk before the job starts, so that ``trainchaos cleanup`` can "
                       "build the record of a killed run.")
    fault_journal = _entry(FAULT_JOURNAL_FILE)
    resources_journal = _entry(RESOURCES_FILE)
    probe_faults = _entry(PROBE_FAULTS_FILE)
    events = _entry(EVENTS_SUBDIR)
    logs = _entry(LOGS_SUBDIR)
    holds = _entry(HOLDS_SUBDIR, "``holds/``: one file per external fault in effect, which ranks "
                   "holding at its step wait for (``chaos.probe.hold``).")
    checkpoints = _entry(SHARED_CHECKPOINTS_SUBDIR, "The shared checkpoint tier when "
                         "``checkpoint.dir`` is not set.")
    crash_image = _entry("crash-image", "The checkpoint tier as the power loss at an armed crash "
                         "point left it (``chaos.storage.crashpoints``), audited by the sweep.")
    summary = _entry(SUMMARY_FILE)
    report_html = _entry(RUN_REPORT_HTML)
    timeline_csv = _entry(TIMELINE_CSV)
    timeline_parquet = _entry(TIMELINE_PARQUET)

    @classmethod
    def of(cls, path: str) -> RunDir:
        return cls(os.path.abspath(path))

    def node_log(self, node: int | str) -> str:
        return os.path.join(self.path, LOGS_SUBDIR, f"node-{node}.log")

    def log(self, name: str) -> str:
        """A run-scoped helper's log (``toxiproxy.log``, ``srun.out``)."""
        return os.path.join(self.path, LOGS_SUBDIR, name)

    def has_run_record(self) -> bool:
        return os.path.exists(self.run_record)


class RunDirLock:
    """A run directory held by one controller: an exclusive ``flock`` on its lock file,
    which the kernel drops when the controller exits, however it ends (a SIGKILLed
    controller's directory is free at once for ``trainchaos cleanup`` and the next run).
    The file says who holds it, so that a refusal names the holder."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def acquire(cls, run_dir: str, run_id: str) -> RunDirLock:
        """Hold ``run_dir`` (created if missing), or raise ``ToolError`` naming its holder."""
        os.makedirs(run_dir, exist_ok=True)
        path = os.path.join(run_dir, RUN_DIR_LOCK_FILE)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise ToolError(f"{run_dir} is in use by another trainchaos controller ({holder}); give this "
                            "run another --out, or wait for that one to end") from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "run_id": run_id}).encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # drops the flock
            self._fd = -1


def _holder(fd: int) -> str:
    """``pid 1234, run trainchaos-ab12``, as the holder wrote it (it may be mid-write)."""
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        holder = {}
    if not isinstance(holder, dict) or "pid" not in holder:
        return "pid unknown: it has not written it yet"
    return f"pid {holder['pid']}, run {holder.get('run_id', '?')}"
