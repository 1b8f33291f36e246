"""Event kinds and the one ordered timeline built from every process's JSON-lines file.

Every event has ``t`` (unix seconds), ``src`` (``rank-3``, ``node-1``, ``injector``,
``controller``), ``incarnation`` (how many processes of that src started before this one:
its restart count) and ``kind``;
kind-specific fields are listed in ``KINDS``. See docs/design.md, "Events".
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["KINDS", "Event", "read_events", "iter_event_file", "merge"]

Event = dict[str, Any]

# kind -> fields it carries beyond the common envelope (documentation and test oracle).
KINDS: dict[str, tuple[str, ...]] = {
    "run_start": ("world_size", "config"),
    "rank_start": ("rank", "local_rank", "world_size", "node", "pid", "resumed_from"),
    # samples: the sample indices the rank trained on in the step, sorted half-open ranges
    # [[start, stop], ...] (probe.samples / probe.track); epoch: the pass they belong to
    "step_end": ("step", "loss", "samples", "epoch"),
    "ckpt_save_start": ("step", "tier"),
    # durable: the files and directory were fsynced (false: a page-cache or shm tier)
    "ckpt_save_end": ("step", "tier", "bytes", "seconds", "blocked_seconds", "durable"),
    # copy: primary or replica for the fast tier (checkpoint.placement), none for shared
    "ckpt_load": ("step", "tier", "verified", "path", "skipped", "copy"),
    "ckpt_placement": ("placement", "replica_rank"),
    # a restart restored its state: the step it resumed from, whether the weights are finite
    "reload": ("step", "weights_finite"),
    "fault_injected": ("fault", "type", "target", "step", "mechanism"),
    "fault_reverted": ("fault", "target"),
    # a targeted rank holding at an external fault's step until the controller confirms it
    # in effect (chaos.probe.hold): phase start, then released or timeout (a killed rank: start only)
    "fault_hold": ("fault", "step", "phase", "timeout_s", "waited_s"),
    # by: who detected (src); reason: human text; suspect: the src blamed (rank-3/node-1)
    # or None; failure_class: crash | hang | device | network | storage | corruption | slow |
    # stalled (a live rank whose training loop makes no progress) |
    # oom (a kernel OOM kill, from the node's memory cgroup: chaos/cluster/oomwatch.py) | unknown;
    # corruption detections also name the detector (nonfinite, spike, digest, golden,
    # ckpt_checksum) and the step
    "detected": ("by", "reason", "suspect", "failure_class", "detector", "step"),
    # silent corruption: each bit the probe flipped; the harness's rollback after a detection
    # (checkpoints of clean_before or later quarantined); a verdict that the replay after
    # a rollback reached again (deterministic, so not silent corruption: no second rollback);
    # the suspect's node taken out of the job (detect.on_suspect: quarantine)
    "sdc_flip": ("fault", "step", "tensor", "element", "bit", "dtype", "before", "after"),
    "sdc_rollback": ("step", "detector", "clean_before", "quarantined"),
    "node_quarantined": ("node", "suspect", "detector", "step"),
    "sdc_reproduced": ("detector", "step", "reason"),
    # an in-process fault that could not be applied (an unknown tensor name...): a tool error
    "fault_error": ("fault", "type", "target", "step", "error"),
    "rank_exit": ("code", "reason"),
    "run_end": ("step", "digest", "loss"),
    # the model state at a step (probe.state_digest; only the fault-free twin reports it)
    "state_digest": ("step", "digest"),
    # emitted by the controller: the job as a whole
    "job_start": ("nodes", "ranks_per_node", "spares", "backend", "run_id"),
    # trainchaos began stopping the job (timeout, interrupt, tool error, or the end): what
    # the job reports from here on is teardown, never a detection. reason: why a run handler
    # ended the run before the job ended (chaos.runner.handlers.RunEnd)
    "job_stop": ("status", "reason"),
    "job_end": ("status", "returncode"),
    # a power fault's nodes powered on again (fresh agents that may rejoin)
    "power_restored": ("fault", "nodes"),
    # the controller read a checkpoint the job reported saved (chaos.runner.freshness): the step
    # it claims, the digest of the model state it holds; error: why it could not be read
    "ckpt_image": ("step", "tier", "path", "digest", "error"),
    # the storage fault layer (src "storage") at an armed crash point: each durability
    # boundary and each file operation (bytes: a close's) of the watched save (trace), and
    # the point it froze at
    "storage_boundary": ("seq", "op", "path"),
    "storage_op": ("seq", "op", "path", "bytes", "written_before", "own", "opened"),
    "crash_point": ("after", "op", "path", "where", "boundaries"),
    # a rank's DataLoader worker processes (children of the rank, never its target)
    "data_workers": ("pids",),
}


def iter_event_file(path: str) -> Iterator[Event]:
    """Events of one file; a torn last line (the process died mid-write) is skipped, and so
    is a line that is no event (garbage: not a JSON object with a time), which would
    otherwise take the whole timeline down with it. A read that fails names the file."""
    try:
        yield from _events_of(path)
    except OSError as exc:  # a failing disk: say which file (a close's error names none)
        if exc.filename is None:
            exc.filename = path
        raise


def _events_of(path: str) -> Iterator[Event]:
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break
            line = line.strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict) and isinstance(event.get("t"), int | float):
                yield event


def merge(streams: Iterable[Iterable[Event]]) -> list[Event]:
    """One timeline ordered by time; ties keep per-file order (stable sort)."""
    events = [e for stream in streams for e in stream]
    events.sort(key=lambda e: e["t"])
    return events


def read_events(events_dir: str) -> list[Event]:
    """Every event under ``events_dir`` (``*.jsonl``), merged into one ordered timeline."""
    if not os.path.isdir(events_dir):
        return []
    files = sorted(
        os.path.join(events_dir, name) for name in os.listdir(events_dir) if name.endswith(".jsonl")
    )
    return merge(iter_event_file(path) for path in files)
