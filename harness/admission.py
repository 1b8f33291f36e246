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

Cheapest question first: could the agent admit a node at all (its command line)? Then, only
where it could: is one waiting now? That is read from the rendezvous state in the store, as
the agent itself reads it (``DynamicRendezvousHandler.num_nodes_waiting``).
"""

from __future__ import annotations

import os
import pickle
from datetime import timedelta

from harness.health import rendezvous_endpoint
from harness.quarantine import agent_pid

__all__ = ["NNODES_FLAG", "admission_restart_possible", "agent_cmdline", "group_may_be_admitting",
           "group_nodes", "nodes_waiting_to_join"]

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


def nodes_waiting_to_join(timeout_s: float = 1.0) -> int | None:
    """How many nodes wait in the rendezvous to join this job now; None when that cannot be
    read (no endpoint or run id exported, the store unreachable within ``timeout_s``)."""
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
        if got is None:
            return 0  # no round yet: nobody can be waiting to join one
        return len(pickle.loads(got[0]).wait_list)  # the state the agents pickle (_RendezvousState)
    except Exception:  # a rank that cannot ask keeps to what it would have done without asking
        return None


def group_may_be_admitting() -> bool:
    """Whether this rank's agent is (or is about to be) restarting the group for a waiting node."""
    if not admission_restart_possible(agent_cmdline(), group_nodes()):
        return False
    return (nodes_waiting_to_join() or 0) > 0
