"""What the node logs tell: a user command's progress, and the agents' own failure reports.

For a script that cannot call ``chaos.probe``: torchrun runs it with ``--tee 3``, so every
worker line reaches the node log as ``[default<local_rank>]:<text>``, and each (re)start of
the worker group is announced by the agent with ``restart_count=N`` and
``global_ranks=[...]``. A regex with the named groups ``step`` (and ``loss``) turns matching
lines into ``step_end`` events of the right rank and incarnation. Their time is when the line was read (polled every 50 ms), so
metrics from this path are coarser than from the probe.

The torchrun agent is a detector of the real stack too: when it reports a worker that died
(``failed (exitcode: -9) local_rank: 1``), that becomes a ``detected`` event by ``node-N``
blaming the rank as a crash. A negative exit code (killed by a signal) is always reported;
a positive one only for user commands, since the harness exits non-zero on purpose after
reporting a failure itself; neither for a job whose stack reports its own detections through
an adapter (``agent_detections=False``). One signal is not what it says: a worker that printed
an uncaught Python exception (a survivor's "Connection reset by peer" after its peer was
killed) and then died of SIGABRT was ended by its exception; the abort came after, from a C++
thread still running while the interpreter tore down ("terminate called without an active
exception"), and it is counted as the exit with an error it was. A worker whose uncaught
exception says it lost its connection to a peer (gloo's "Connection reset by peer" or
"... closed by peer" after that peer died) noticed a failure but is not it: its exit is
reported as a detection that names no suspect and is marked ``secondary`` (the metrics time
the detection by it and take the attribution from the report that names the failed rank,
chaos.metrics.per_fault), so how fast a survivor's exception ends it never decides who is
blamed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from chaos.runfiles.events import Event

__all__ = ["LogProgress"]

_WORKER_LINE = re.compile(r"^\[[^\]]*?(\d+)\]:(.*)$")
_RESTART = re.compile(r"restart_count=(\d+)")
_GLOBAL_RANKS = re.compile(r"global_ranks=\[([\d, ]*)\]")
_AGENT_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")
_TRACEBACK = "Traceback (most recent call last):"
_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:")
"""torch's prefix of a distributed worker's uncaught exception (its rank)."""
_TEE_PREFIX = re.compile(r"^\[(?!rank\d)[^\]]*?(\d+)\]:")
"""The agent's prefix of a worker line it tees (``[default<local rank>]:``)."""
_PEER_LOST = re.compile(r"Connection (?:reset|closed) by peer")
"""gloo's words for a connection its peer's death ended (an exception a survivor raises)."""


@dataclass
class _NodeLog:
    offset: int = 0
    restart_count: int = 0
    global_ranks: list[int] = field(default_factory=list)
    raised: set[int] = field(default_factory=set)
    """Ranks of the node that printed an uncaught exception since the group's last start."""
    peer_lost: set[int] = field(default_factory=set)
    """Those of them whose exception was a connection to a peer that the peer ended."""


class LogProgress:
    def __init__(self, regex: str | None, events_dir: str, report_exit_codes: bool = False,
                 agent_detections: bool = True) -> None:
        self.regex = re.compile(regex) if regex else None
        self.report_exit_codes = report_exit_codes
        self.agent_detections = agent_detections
        """False: the job reports its own detections and an agent's report of its worker's
        death is not one (torchft: the survivors learn of a death from the quorum, not from
        the dead group's agent)."""
        self.path = os.path.join(events_dir, "log-progress.jsonl")
        self._nodes: dict[int, _NodeLog] = {}
        self.global_rank: Callable[[int, int], int] = lambda node, rank: rank
        """(node, rank as the node's agent numbers it) -> the job's rank: the launcher's
        (``global_rank``; a torchft group's agent numbers its ranks from 0)."""

    def _raising_rank(self, node: int, state: _NodeLog, line: str) -> int | None:
        """The job's rank whose uncaught exception ``line`` begins: by the agent's tee prefix
        (``[default<local rank>]:``), else by torch's (``[rank<rank>]:``, the rank as the
        agent numbers it), else the node's only worker."""
        if m := _TEE_PREFIX.match(line):
            local: int | None = int(m.group(1))
        elif m := _RANK_PREFIX.match(line):
            return self.global_rank(node, int(m.group(1)))
        else:
            local = 0 if len(state.global_ranks) == 1 else None
        if local is None or local >= len(state.global_ranks):
            return None
        return self.global_rank(node, state.global_ranks[local])

    def poll(self, logs: dict[int, str]) -> list[Event]:
        """New events from the node logs (``{node: path}``), also appended to the events dir."""
        out: list[Event] = []
        for node, path in logs.items():
            state = self._nodes.setdefault(node, _NodeLog())
            try:
                with open(path, "rb") as fh:
                    fh.seek(state.offset)
                    chunk = fh.read()
            except OSError:
                continue
            cut = chunk.rfind(b"\n") + 1
            state.offset += cut
            for line in chunk[:cut].decode(errors="replace").splitlines():
                out.extend(self._line(node, state, line))
        if out:
            with open(self.path, "a", encoding="utf-8") as fh:
                for ev in out:
                    fh.write(json.dumps(ev) + "\n")
        return out

    def _line(self, node: int, state: _NodeLog, line: str) -> list[Event]:
        now = time.time()
        if m := _RESTART.search(line):
            state.restart_count = int(m.group(1))
            state.raised.clear()
            state.peer_lost.clear()
            return []
        if m := _GLOBAL_RANKS.search(line):
            # No rank_start events from here: a log knows when the agent started a worker,
            # not which step it resumed from; metrics take that from its first step instead.
            state.global_ranks = [int(r) for r in m.group(1).replace(" ", "").split(",") if r]
            return []
        if _TRACEBACK in line:
            rank = self._raising_rank(node, state, line)
            if rank is not None:
                state.raised.add(rank)
        elif _PEER_LOST.search(line):
            rank = self._raising_rank(node, state, line)
            if rank is not None and rank in state.raised:
                state.peer_lost.add(rank)
        if m := _AGENT_FAILED.search(line):
            code, local = int(m.group(1)), int(m.group(2))
            rank = (self.global_rank(node, state.global_ranks[local]) if local < len(state.global_ranks)
                    else None)
            how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
            if code == -signal.SIGABRT and rank is not None and rank in state.raised:
                code, how = 1, f"raised an uncaught exception (then aborted at exit: signal {-code})"
            if code >= 0 and not self.report_exit_codes or not self.agent_detections:
                return []
            event: Event = {"t": now, "src": f"node-{node}", "incarnation": state.restart_count, "kind": "detected",
                            "by": f"node-{node}", "suspect": f"rank-{rank}" if rank is not None else f"node-{node}",
                            "failure_class": "crash", "reason": f"torchrun agent: worker local_rank {local} {how}",
                            "via": "log"}
            if code >= 0 and rank in state.peer_lost:
                event.update(suspect=None, secondary=True,
                             reason=f"{event['reason']} after a peer ended its connection: it noticed a failure "
                                    "of another rank, not one of its own")
            return [event]
        worker = _WORKER_LINE.match(line)
        if not worker or self.regex is None:
            return []
        m = self.regex.search(worker.group(2))
        if not m:
            return []
        local = int(worker.group(1))
        rank = self.global_rank(node, state.global_ranks[local] if local < len(state.global_ranks) else local)
        loss = m.groupdict().get("loss")
        return [{"t": now, "src": f"rank-{rank}", "incarnation": state.restart_count, "kind": "step_end",
                 "step": int(m.group("step")), "loss": float(loss) if loss else None, "via": "log"}]
