"""Emulated clusters of up to 32 nodes and 128 ranks (issue 45): the topology's limits, what
assumes a node count (the netns fabric's names and addresses), and the warm start that jobs
of 16 ranks or more get by default."""

from __future__ import annotations

import ipaddress

import pytest

from chaos import contract
from chaos.model.scenario import Scenario
from chaos.scenario.load import parse_scenario
from chaos.schema.models import MAX_NODES, MAX_TOTAL_NODES, MAX_WORLD_SIZE
from chaos.workload import workload_for
from chaos.workload.harness import WARM_BY_DEFAULT_FROM_RANKS


def _scenario(nodes: int, ranks_per_node: int, **harness: object) -> Scenario:
    return parse_scenario({"name": "size", "topology": {"nodes": nodes, "ranks_per_node": ranks_per_node},
                           "workload": {"harness": {"global_batch": nodes * ranks_per_node, **harness}}},
                          "size.yaml")


def _warm(scenario: Scenario, tmp_path) -> bool:
    return workload_for(scenario.workload).launch(str(tmp_path), 1).launcher.warm_start


def test_four_racks_of_eight_nodes_of_four_ranks_is_a_valid_topology(tmp_path) -> None:
    s = parse_scenario({
        "name": "racks", "topology": {
            "nodes": 32, "ranks_per_node": 4, "spares": 8,
            "racks": {f"r{r}": list(range(8 * r, 8 * r + 8)) for r in range(4)}},
        "workload": {"harness": {"global_batch": 128}},
        "faults": [{"type": "kill_node", "target": {"rack": "r3"}, "trigger": {"at_step": 5}},
                   {"type": "kill_rank", "target": {"rank": 127}, "trigger": {"at_step": 7}}],
    }, "racks.yaml")
    assert s.topology.world_size == MAX_WORLD_SIZE and s.topology.total_nodes == MAX_TOTAL_NODES
    assert s.topology.rack_of(31) == "r3" and s.topology.nodes == MAX_NODES
    assert _warm(s, tmp_path), "128 ranks that say nothing of warm_start start cold"


@pytest.mark.parametrize(("nodes", "per_node", "warm"), [
    (5, 3, False),  # 15 ranks: as before
    (2, 2, False),
    (4, 4, True),  # 16 ranks
    (16, 4, True),
])
def test_a_job_of_16_ranks_or_more_starts_warm_unless_it_says_otherwise(tmp_path, nodes: int, per_node: int,
                                                                        warm: bool) -> None:
    assert WARM_BY_DEFAULT_FROM_RANKS == 16
    s = _scenario(nodes, per_node)
    assert _warm(s, tmp_path) is warm
    # The run's record says how it ran: the default is written into its options.
    assert s.workload.harness is not None and s.workload.harness.get("warm_start", False) is warm
    assert _warm(_scenario(nodes, per_node, warm_start=False), tmp_path) is False
    assert _warm(_scenario(nodes, per_node, warm_start=True), tmp_path) is True


@pytest.mark.parametrize(("env", "warm"), [("0", False), ("1", True)])
def test_trainchaos_warm_start_still_decides_a_big_job_that_says_nothing(monkeypatch, tmp_path, env: str,
                                                                         warm: bool) -> None:
    monkeypatch.setenv(contract.WARM_START_ENV, env)
    s = _scenario(16, 4)
    assert "warm_start" not in (s.workload.harness or {})
    assert _warm(s, tmp_path) is warm


def test_other_workload_kinds_are_left_as_they_are() -> None:
    s = parse_scenario({"name": "own", "topology": {"nodes": 16, "ranks_per_node": 4},
                        "workload": {"command": "python train.py"}}, "own.yaml")
    assert s.workload.harness is None and s.workload.command == "python train.py"


def test_the_netns_fabric_names_and_addresses_every_node_the_schema_allows() -> None:
    from chaos.net.fabric import IFNAMSIZ, bridge_name, fabric_names, node_namespace

    run_id = "trainchaos-0123456789abcdef"
    last = MAX_TOTAL_NODES - 1
    for name in (*fabric_names(run_id, last), bridge_name(run_id), node_namespace(run_id, last)):
        assert len(name) <= IFNAMSIZ, name
    from chaos.cluster.netns import NODE_HOST_OFFSET

    subnet = ipaddress.IPv4Network("198.18.7.0/24")
    assert subnet.network_address + NODE_HOST_OFFSET + last in list(subnet.hosts())
