"""Whether torchrun may be re-forming this rank's group to admit a node waiting to join.

torchrun's agent restarts a healthy worker group when a node waits in the rendezvous to join
it, which only an elastic group below its ``--nnodes`` maximum does: every agent SIGTERMs its
own workers, each at its own monitor tick. Two places in a rank must tell that restart from a
failure:

- a SIGTERM with every peer alive (``harness.preempt``): a stop request, or this restart;
- a collective that failed because the only peer gone was torn down by its agent, saying
  farewell (``harness.failures``): a peer that was stopped (a fault's SIGTERM), or this
  restart, with this rank's own SIGTERM on its way. A late node joining at the start, or a
  node coming back after its power returned, would otherwise be a peer blamed for nothing.

And one place avoids the restart where it can: the job's first group, formed without a node
that was launched with the others, waits for it before it trains (``await_late_nodes``).

Cheapest question first: could the agent admit a node at all (its command line)? Then, only
where it could: is one waiting now? That is read from the rendezvous state in the store, as
the agent itself reads it (``DynamicRendezvousHandler.num_nodes_waiting``).
"""

from __future__ import annotations

import os
import pickle
import signal
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from harness.health import rendezvous_endpoint
from harness.quarantine import agent_pid

__all__ = ["NNODES_FLAG", "admission_restart_possible", "agent_cmdline", "await_late_nodes",
           "first_round_short_of_nodes", "group_below_max", "group_may_be_admitting", "group_nodes",
           "nodes_waiting_to_join"]

NNODES_FLAG = "--nnodes"
RUN_ID_ENV = "TORCHELASTIC_RUN_ID"
"""The rendezvous id torchrun gives its workers: the key of the rendezvous state is derived
from it (``torch.distributed.elastic.rendezvous.c10d_rendezvous_backend``)."""


def admission_restart_possible(parent_cmdline: list[str], group_nodes: int) -> bool:
    """Whether the torchrun agent (``parent_cmdline``) could be restarting this group to admit
    a waiting node: only an elastic group below its maximum node count does that."""
    for i, arg in enumerate(parent_cmdline):
        value = None
        if arg == NNODES_FLAG and i + 1 < len(parent_cmdline):
            value = parent_cmdline[i + 1]
        elif arg.startswith(NNODES_FLAG + "="):
            value = arg.split("=", 1)[1]
        if value is not None:
            upper = value.rpartition(":")[2]
            return upper.isdigit() and group_nodes < int(upper)
    return False


def agent_cmdline(start: int | None = None) -> list[str]:
    """The command line of the torchrun agent this rank runs under (``quarantine.agent_pid``
    from ``start``, default the parent): the parent of a cold rank, the zygote's parent under
    ``harness.warm_start``. Read from the parent instead, a warm rank saw the zygote's command
    line, took a grow-back restart's SIGTERM for its node being stopped, and blamed itself."""
    pid = agent_pid(start)
    if pid is None:
        return []
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def group_nodes() -> int:
    """How many nodes this rank's group has (torchrun's ``GROUP_WORLD_SIZE``)."""
    return int(os.environ.get("GROUP_WORLD_SIZE", "1") or 1)


_NO_ROUND = object()
"""The store holds no rendezvous state yet (no round has begun)."""


def group_below_max() -> bool:
    """Whether this rank's torchrun agent could restart its group to admit a node
    (``admission_restart_possible`` of the agent's command line and this group's size)."""
    return admission_restart_possible(agent_cmdline(), group_nodes())


def _rendezvous_state(timeout_s: float) -> Any:
    """The rendezvous state the agents keep in the store (torch's ``_RendezvousState``, as they
    pickle it), ``_NO_ROUND`` before any round, None when it cannot be read (no endpoint or
    run id exported, the store unreachable within ``timeout_s``)."""
    endpoint = rendezvous_endpoint()
    run_id = os.environ.get(RUN_ID_ENV)
    if endpoint is None or not run_id:
        return None
    try:
        from torch.distributed import TCPStore
        from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
            C10dRendezvousBackend,
        )

        store = TCPStore(*endpoint, is_master=False, timeout=timedelta(seconds=timeout_s))
        got = C10dRendezvousBackend(store, run_id).get_state()
        # torch's own rendezvous pickles its state into the store; this reads it as torch does.
        return _NO_ROUND if got is None else pickle.loads(got[0])  # nosec B301
    except Exception:  # a rank that cannot ask keeps to what it would have done without asking
        return None


def nodes_waiting_to_join(timeout_s: float = 1.0) -> int | None:
    """How many nodes wait in the rendezvous to join this job now; None when that cannot be
    read (no endpoint or run id exported, the store unreachable within ``timeout_s``)."""
    state = _rendezvous_state(timeout_s)
    if state is None:
        return None
    return 0 if state is _NO_ROUND else len(state.wait_list)  # no round: nobody waits to join one


def first_round_short_of_nodes(timeout_s: float = 1.0) -> bool:
    """Whether this rank's group is the job's first (rendezvous round 0) and formed with fewer
    nodes than its agent's ``--nnodes`` maximum: a node launched with the others is late
    (still importing, its container slow to start on a loaded host) and torchrun will restart
    the group to admit it as soon as it waits to join.

    Every rank of a round reads the same answer (the round is the group's, unlike torchrun's
    per-agent restart count, which a node that comes back after a power cut starts at 0
    while the survivors' count has moved), so either the whole group waits or none does."""
    if not group_below_max():
        return False
    state = _rendezvous_state(timeout_s)
    return state is not None and state is not _NO_ROUND and state.round == 0


def await_late_nodes(wait_s: float, on_stop: Callable[[], None]) -> bool:
    """Before a first round short of nodes trains (``first_round_short_of_nodes``), wait up to
    ``wait_s`` for torchrun to admit the late ones: its agent SIGTERMs this rank to re-form
    the group, and ``on_stop`` (which must not return: it ends the process) runs then. A
    fault planned at step N then hits the job at the size its scenario describes, instead of
    a group that restarts around it to let a latecomer in (a docker run of this suite: the
    power outage of two of three nodes landed in that restart, and the survivor's agent
    waited out its 30 s role exchange with the dead). False when no one came in time: the
    group trains at the size it has."""
    def stop(_signum: int, _frame: object) -> None:
        on_stop()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        time.sleep(wait_s)  # the handler runs in this sleep and does not come back to it
        return False
    finally:
        signal.signal(signal.SIGTERM, previous)


def group_may_be_admitting() -> bool:
    """Whether this rank's agent is (or is about to be) restarting the group for a waiting node."""
    if not group_below_max():
        return False
    return (nodes_waiting_to_join() or 0) > 0
