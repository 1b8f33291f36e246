"""The backend interface's own logic: targets resolved against the live rank -> node map, and
the backend registry. A fake backend holds the live state; the real one is exercised by the
integration tests."""

from __future__ import annotations

import pytest

from chaos.cluster import UnknownBackend, known_backends, lookup_backend
from chaos.cluster.base import ClusterBackend, LiveRank, NodeStatus, RunSpec
from chaos.errors import EXIT_TOOL_FAILED
from chaos.model.scenario import Topology
from chaos.model.targets import TargetUnavailable

TOPO = Topology(nodes=2, ranks_per_node=2, spares=1, racks={"r1": [0], "r2": [1, 2]})


class FakeBackend(ClusterBackend):
    name = "fake"

    def __init__(self) -> None:
        super().__init__(RunSpec("trainchaos-fake", "/nonexistent", TOPO, []), resources=None)  # type: ignore[arg-type]
        self.alive_pids: set[int] = set()
        self.node_rc: dict[int, int | None] = {0: None, 1: None, 2: None}

    def start(self) -> None: ...
    def stop(self, grace_s: float = 3.0) -> list[int]: return []
    def poll(self) -> dict[int, NodeStatus]: return {n: NodeStatus(rc) for n, rc in self.node_rc.items()}
    def node_address(self, node: int) -> str: return "127.0.0.1"
    def node_logs(self) -> dict[int, str]: return {}
    def process_alive(self, pid: int) -> bool: return pid in self.alive_pids
    def find_rank(self, rank: int) -> LiveRank | None: return None
    def signal_pid(self, pid: int, sig: int) -> bool: return pid in self.alive_pids
    def signal_node(self, node: int, sig: int) -> list[int]: return []

    def rank_started(self, rank: int, node: int, pid: int) -> None:
        self.alive_pids.add(pid)
        self.note_event({"kind": "rank_start", "rank": rank, "node": node, "pid": pid})


def _first_round() -> FakeBackend:
    b = FakeBackend()
    for rank in range(4):
        b.rank_started(rank, rank // 2, 100 + rank)
    return b


def test_a_rank_target_resolves_to_its_live_process() -> None:
    b = _first_round()
    resolved = b.resolve({"rank": 3})
    assert resolved.ranks == (3,) and resolved.pids == {3: 103} and resolved.srcs() == ["rank-3"]


def test_a_node_target_names_the_ranks_living_there_now_not_at_plan_time() -> None:
    b = _first_round()
    # node 1 dies; the spare (node 2) takes ranks 2 and 3 in the next round
    b.alive_pids -= {102, 103}
    b.node_rc[1] = -9
    b.rank_started(2, 2, 202)
    b.rank_started(3, 2, 203)
    spare = b.resolve({"node": 2})
    assert spare.ranks == (2, 3) and spare.pids == {2: 202, 3: 203}
    assert b.resolve({"rank": 3}).pids == {3: 203}, "a rank is followed to its new process"
    with pytest.raises(TargetUnavailable, match="node 1 has no live process"):
        b.resolve({"rack": "r2"})


def test_a_rank_that_no_longer_exists_is_a_tool_error_not_a_verdict() -> None:
    b = _first_round()
    b.alive_pids.discard(103)
    with pytest.raises(TargetUnavailable, match="rank 3 has no live process") as info:
        b.resolve({"rank": 3})
    assert info.value.exit_code == EXIT_TOOL_FAILED


def test_backends_are_looked_up_by_name() -> None:
    assert "local" in known_backends()
    assert lookup_backend("local").name == "local"
    with pytest.raises(UnknownBackend):
        lookup_backend("kubernetes")
