"""Suspect-node quarantine: a corruption verdict that names a rank takes that rank's node out
of the job (``detect.on_suspect: quarantine``).

A flipped bit in memory ends with the process; a faulty core (a mercurial one, a stuck cell)
does not: after the rollback it corrupts the replay again. What a production job does about
a node its detectors blame is drain it, and let the scheduler put a spare in its place. Here
that is torchrun's elastic rendezvous: the suspect node's ranks stop their own agent with
SIGTERM. torchrun does not close the rendezvous when its agent dies by a signal (it would
close it for everyone on a normal exit), so the agent simply stops renewing its keep-alive;
the other nodes' agents restart their workers (the rollback's exit code) and the next round
forms without the suspect: a waiting spare joins, or the group shrinks to ``min_nodes``.

Every rank reached the same verdict at the same step (``harness.sdc``), so every rank agrees
which node goes, without another collective; rank 0 records it (``node_quarantined``).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterable
from typing import Any

from harness.health import PeerAddress

__all__ = ["agent_pid", "quarantine_node", "suspect_node"]


def suspect_node(suspect_rank: int | None, own_rank: int, own_node: int,
                 peers: Iterable[PeerAddress]) -> int | None:
    """The node the suspect rank runs on (None: no suspect, or a rank nobody knows)."""
    if suspect_rank is None:
        return None
    if suspect_rank == own_rank:
        return own_node
    return next((p.node for p in peers if p.rank == suspect_rank), None)


def quarantine_node(node: int, own_rank: int, own_node: int, emit: Callable[..., Any],
                    detection: dict[str, Any], stop_agent: Callable[[], None] | None = None) -> None:
    """Carry out the quarantine of ``node`` on this rank: rank 0 records it; the ranks on
    ``node`` stop their agent (``stop_agent``, default: SIGTERM to the parent process, which
    under torchrun is the node's agent). Call it after the rollback is on disk and before
    the rank exits."""
    if own_rank == 0:
        emit("node_quarantined", node=node, suspect=detection.get("suspect"),
             detector=detection.get("detector"), step=detection.get("step"))
    if own_node == node:
        (stop_agent or _stop_parent_agent)()


def _stop_parent_agent() -> None:
    agent = agent_pid()
    if agent is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(agent, signal.SIGTERM)


_AGENT_MARKS = (b"torch.distributed.run", b"torchrun")


def agent_pid(start: int | None = None, levels: int = 4) -> int | None:
    """The torchrun agent this rank runs under: the nearest ancestor whose command line is
    torchrun's (the parent of a cold rank; with ``harness.warm_start``, the parent of the
    zygote that forked it). None when there is none (``python -m harness`` from a shell):
    nothing else is ours to stop."""
    pid = os.getppid() if start is None else start
    for _ in range(levels):
        if pid <= 1:
            return None
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read()
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            return None
        if any(mark in cmdline for mark in _AGENT_MARKS):
            return pid
        pid = int(stat.rsplit(b")", 1)[1].split()[1])  # the field after the state: ppid
    return None
