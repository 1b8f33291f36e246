"""The launcher of the torchft kind: one torchrun per replica group, each group a node.

A replica group is torchft's failure domain: it trains a full replica, talks to the other
groups only through the lighthouse's quorum and the Manager's process group, and restarts
on its own. So each group gets a torchrun of its own (one node, ``ranks_per_node`` ranks, a
rendezvous id of its own on the controller's store, its own ``max_restarts``), and is
placed on the topology node of its number: node faults (a kill, a power cut, a partition)
and every backend act on a replica group with no change.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from chaos import contract
from chaos.workload.torchrun import AGENT_MAIN, TorchrunPerNode

if TYPE_CHECKING:
    from chaos.model import scenario as records

__all__ = ["LIGHTHOUSE_ENV", "TorchrunPerGroup"]

LIGHTHOUSE_ENV = "TORCHFT_LIGHTHOUSE"
"""Where torchft's Manager finds the lighthouse (torchft's own name)."""


@dataclass(frozen=True)
class TorchrunPerGroup(TorchrunPerNode):
    name: ClassVar[str] = "torchrun-per-replica-group"

    lighthouse_port: int = 0
    """The port of the run's lighthouse, on the controller (the rendezvous store's host)."""

    def agent_command(self, topology: records.Topology, *, run_id: str, rdzv_endpoint: str,
                      local_addr: str, python: str = sys.executable, node: int = 0) -> list[str]:
        """Replica group ``node``'s torchrun, standalone: its agent hosts the group's own
        rendezvous store (``<local_addr>:0``, a free port), so a group that dies re-forms
        alone while the others train on, and a dead node takes only its own store down."""
        return [
            python, "-c", AGENT_MAIN,
            "--nnodes", "1",
            "--nproc-per-node", str(topology.ranks_per_node),
            "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{local_addr}:0",
            "--rdzv-id", f"{run_id}-g{node}",
            "--rdzv-conf", "is_host=true,join_timeout=60,read_timeout=30",
            "--max-restarts", str(topology.max_restarts),
            "--monitor-interval", "0.1",
            "--local-addr", local_addr,
            *(["--tee", "3"] if self.tee_output else []),
            *self.worker_argv,
        ]

    def global_rank(self, node: int, agent_rank: int, topology: records.Topology) -> int:
        """Group ``node``'s agent numbers its ranks from 0: the job's are offset by the group."""
        return node * topology.ranks_per_node + agent_rank

    def node_env(self, node: int, topology: records.Topology, rdzv_endpoint: str) -> dict[str, str]:
        """torchft's own variables for group ``node``, and the offset that makes its ranks
        global ranks for trainchaos (group g's rank r is ``g * ranks_per_node + r``)."""
        host = rdzv_endpoint.rsplit(":", 1)[0]
        return {
            # torchft's Manager reaches the group's store at MASTER_ADDR:MASTER_PORT as a
            # client and expects torchelastic to host it there: the agent's own store, shared
            # with the workers. The backends' default (1: a fresh store per round, which the
            # harness creates itself) would leave nobody listening and the Manager waiting.
            # Each group's store is its own agent's: no key of one group reaches another.
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0",
            "REPLICA_GROUP_ID": str(node),
            "NUM_REPLICA_GROUPS": str(topology.nodes),
            LIGHTHOUSE_ENV: f"http://{host}:{self.lighthouse_port}",
            contract.RANK_OFFSET_ENV: str(node * topology.ranks_per_node),
        }
