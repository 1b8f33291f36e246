"""Suspect-node quarantine in the harness (detect.on_suspect: quarantine): which node goes,
who records it, and that only the suspect node's ranks stop their agent."""

from __future__ import annotations

import pytest

from harness.config import ConfigError
from harness.config_load import config_from_mapping
from harness.health import PeerAddress
from harness.quarantine import quarantine_node, suspect_node

PEERS = [PeerAddress(0, "h", 1, 10, 0), PeerAddress(1, "h", 1, 11, 0), PeerAddress(3, "h", 1, 13, 1)]


def test_the_suspect_rank_is_mapped_to_its_node_from_any_rank():
    assert suspect_node(3, own_rank=2, own_node=1, peers=PEERS) == 1
    assert suspect_node(2, own_rank=2, own_node=1, peers=PEERS) == 1  # itself
    assert suspect_node(None, own_rank=2, own_node=1, peers=PEERS) is None
    assert suspect_node(9, own_rank=2, own_node=1, peers=PEERS) is None


@pytest.mark.parametrize(("rank", "node", "records", "stops"), [
    (0, 0, True, False),   # rank 0 records, elsewhere
    (2, 1, False, True),   # a rank on the suspect node stops its agent
    (3, 1, False, True),
    (1, 0, False, False),  # a bystander does neither
])
def test_rank_zero_records_and_only_the_suspect_nodes_ranks_leave(rank, node, records, stops):
    emitted, stopped = [], []
    quarantine_node(1, rank, node, lambda kind, **f: emitted.append((kind, f)),
                    {"suspect": "rank-3", "detector": "golden", "step": 24}, stop_agent=lambda: stopped.append(1))
    assert emitted == ([("node_quarantined", {"node": 1, "suspect": "rank-3", "detector": "golden", "step": 24})]
                       if records else [])
    assert bool(stopped) == stops


def test_on_suspect_takes_only_its_two_policies():
    assert config_from_mapping({"detect": {"on_suspect": "quarantine"}}).detect.on_suspect == "quarantine"
    with pytest.raises(ConfigError, match=r"harness.detect.on_suspect: 'drain' is not allowed; allowed values: "
                                          r"rollback, quarantine"):
        config_from_mapping({"detect": {"on_suspect": "drain"}})


def test_the_agent_is_the_nearest_torchrun_ancestor(tmp_path):
    import subprocess
    import sys

    from harness.quarantine import agent_pid

    # a stand-in agent whose command line is torchrun's, and its child, a stand-in rank
    code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
            "'import os, time; print(os.getpid(), flush=True); time.sleep(30)'], stdout=subprocess.PIPE); "
            "print(p.stdout.readline().decode().strip(), flush=True); p.wait()")
    import os
    import signal

    agent = subprocess.Popen([sys.executable, "-c", code, "torch.distributed.run"], stdout=subprocess.PIPE)
    rank = None
    try:
        rank = int(agent.stdout.readline())
        assert agent_pid(start=rank) == agent.pid
        assert agent_pid() is None  # pytest's own ancestors are no torchrun
    finally:
        if rank is not None:
            os.kill(rank, signal.SIGKILL)
        agent.kill()
        agent.wait()
